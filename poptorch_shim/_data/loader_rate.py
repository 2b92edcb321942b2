"""A data loader's rate, measured so that it holds still from run to run.

The caller's wait for each step is timed on the host's wall clock, less the
time the caller's thread waited, ready to run, for a CPU that other processes
held (Linux's per-thread schedstat): a loader that loads in the caller's
thread (``Sync``, no workers) is then timed as on an idle host, whatever else
the host is doing; a sleep or a read in the dataset still counts. The steps
after the first are cut into :data:`WINDOWS` runs of consecutive steps; each
window's rate is its items over its wait, and the loader's rate is the median
window's. A window the host spent on something else (another process, the
garbage collector, a worker's start) moves the lowest window, not the median,
which the mean over all steps followed. The lowest and highest windows are the
spread the reports quote; ``Options.Simulation.loaderRate`` replaces the
measurement by a given rate, which holds exactly.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from pathlib import Path

WINDOWS = 8
_SCHEDSTAT = Path("/proc/thread-self/schedstat")


@dataclass(frozen=True)
class LoaderRate:
    """Items per second a data loader delivered: the median window's, and the
    lowest and highest windows' (equal when the rate was given, not measured)."""

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
    rates = []
    for start, end in zip(bounds, bounds[1:]):
        waited = sum(waits[start:end])
        rates.append((end - start) * items_per_step / waited if waited > 0 else math.inf)
    median = statistics.median(rates)
    if math.isinf(median):  # most windows never waited: the rate over every step
        median = len(waits) * items_per_step / sum(waits)
    finite = [rate for rate in rates if math.isfinite(rate)]
    return LoaderRate(median, min(finite), max(max(finite), median))


def queued_s() -> float:
    """Seconds this thread has spent ready to run but waiting for a CPU, since it
    started (0 where the kernel does not say)."""
    try:
        return int(_SCHEDSTAT.read_text().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0
