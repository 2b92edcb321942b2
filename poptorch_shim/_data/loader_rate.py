"""A data loader's rate, measured so that it holds still from run to run.

The caller's wait for each step is timed on the host's wall clock, less the
time the caller's thread waited, ready to run, for a CPU that other processes
held (Linux's per-thread schedstat): a loader that loads in the caller's
thread (``Sync``, no workers) is then timed as on an idle host, whatever else
the host is doing; a sleep or a read in the dataset still counts. The steps
after the first are cut into :data:`WINDOWS` runs of consecutive steps, and the
loader's rate is their items over their wait, the slowest window left out: a
window the host spent on something else (the garbage collector, a worker's
start, a burst of another process's I/O) moves the spread, not the rate, while
a loader whose workers deliver in bursts is still timed over all its other
steps, as the mean over every step timed it. The lowest and highest windows'
rates are the spread the reports quote; ``Options.Simulation.loaderRate``
replaces the measurement by a given rate, which holds exactly.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

WINDOWS = 8
_SCHEDSTAT = Path("/proc/thread-self/schedstat")


@dataclass(frozen=True)
class LoaderRate:
    """Items per second a data loader delivered, over its windows of steps but the
    slowest, and the lowest and highest windows' (all equal when the rate was given,
    not measured)."""

    items_per_s: float
    low: float
    high: float
    measured: bool = True

    @classmethod
    def given(cls, items_per_s: float) -> LoaderRate:
        return cls(items_per_s, items_per_s, items_per_s, measured=False)


def measured_rate(waits: list[float], items_per_step: int) -> LoaderRate | None:
    """The rate of steps of ``items_per_step`` items each, the caller having waited
    ``waits`` seconds for each; None before a wait was timed or when it never waited
    (a loader that keeps up: nothing to measure)."""
    if not waits or not sum(waits) > 0:
        return None
    count = min(WINDOWS, len(waits))
    bounds = [round(k * len(waits) / count) for k in range(count + 1)]
    windows = [((end - start) * items_per_step, sum(waits[start:end]))
               for start, end in zip(bounds, bounds[1:])]
    rates = [items / waited if waited > 0 else math.inf for items, waited in windows]
    kept = [window for _, window in sorted(zip(rates, windows))[1:]] if count > 2 else windows
    waited = sum(wait for _, wait in kept)
    rate = (sum(items for items, _ in kept) / waited if waited > 0
            else len(waits) * items_per_step / sum(waits))  # only the slowest window waited
    finite = [r for r in rates if math.isfinite(r)]
    return LoaderRate(rate, min(min(finite), rate), max(max(finite), rate))


def queued_s() -> float:
    """Seconds this thread has spent ready to run but waiting for a CPU, since it
    started (0 where the kernel does not say)."""
    try:
        return int(_SCHEDSTAT.read_text().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0
