"""A data loader's rate on the simulated host: the CPU time each step cost, run on
the host's cores by the loader's worker processes, so that the rate (and the verdict
it feeds) holds still whatever else this machine is doing.

Each step the loader hands out is costed (:class:`StepCost`) by the processes that
made it: the thread that hands out steps (the script's own thread in ``Sync`` mode,
the ``AsynchronousDataAccessor``'s worker in ``Async`` mode: ``serial``), with its
own time off the CPU (sleeps, reads) where it loads the data itself, and torch's
worker processes, CPU time only (``cpu_clock.py``, ``worker_cpu.py``). Nothing of it
is the time a process waited for a CPU that other processes held, which is all that
this machine's other load adds.

A simulated host of C cores (``host_cpu_cores``, see :func:`host_cores`) with W
worker processes makes a step in the longest of: the serial thread's time; the
workers' CPU time over min(W, C) (a worker loads one batch at a time, and at most C
run at once); and all the CPU time over C. The steps after the first (which pays for
starting workers) are cut into :data:`WINDOWS` runs of consecutive steps, and the
rate is their items over their time, the slowest window left out (a garbage
collection, a burst of work the loader does once); the lowest and highest windows'
rates are the spread the reports quote. ``Options.Simulation.loaderRate`` replaces
the measurement by a given rate, which holds exactly.

The CPU time is this machine's: the simulated host's cores are taken to be as fast
as one of this machine's (an assumption: scale ``host_cpu_cores`` for a faster or
slower host).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

WINDOWS = 8


@dataclass(frozen=True)
class StepCost:
    """What one step cost the host, in seconds: CPU time of the thread that hands out
    steps, that thread's own time off the CPU (sleeps, reads: counted only where it
    loads the data itself), and the worker processes' CPU time for the step."""

    serial_cpu_s: float = 0.0
    serial_wait_s: float = 0.0
    workers_cpu_s: float = 0.0

    def __add__(self, other: StepCost) -> StepCost:
        return StepCost(self.serial_cpu_s + other.serial_cpu_s,
                        self.serial_wait_s + other.serial_wait_s,
                        self.workers_cpu_s + other.workers_cpu_s)

    def __sub__(self, other: StepCost) -> StepCost:
        return StepCost(self.serial_cpu_s - other.serial_cpu_s,
                        self.serial_wait_s - other.serial_wait_s,
                        self.workers_cpu_s - other.workers_cpu_s)


class CostLog:
    """The costs of a loader's steps, kept as running totals: any run of consecutive
    steps costs one subtraction, so the rate, which a model reads after every call,
    takes the same time after ten steps or ten thousand."""

    def __init__(self, costs: tuple[StepCost, ...] = ()):
        self._totals = [StepCost()]
        for cost in costs:
            self.append(cost)

    def append(self, cost: StepCost) -> None:
        self._totals.append(self._totals[-1] + cost)

    def __len__(self) -> int:
        return len(self._totals) - 1

    def total(self, start: int = 0, end: int | None = None) -> StepCost:
        """What steps ``start`` to ``end`` (excluded; None: the last) cost together."""
        return self._totals[len(self) if end is None else end] - self._totals[start]


@dataclass(frozen=True)
class LoaderRate:
    """Items per second a data loader delivers on the simulated host, over its windows
    of steps but the slowest, and the lowest and highest windows' (all equal when the
    rate was given, not measured)."""

    items_per_s: float
    low: float
    high: float
    measured: bool = True

    @classmethod
    def given(cls, items_per_s: float) -> LoaderRate:
        return cls(items_per_s, items_per_s, items_per_s, measured=False)


def step_seconds(cost: StepCost, workers: int, cores: int) -> float:
    """Seconds a host of ``cores`` CPU cores takes to load what cost ``cost``, with
    ``workers`` worker processes (0: the serial thread loads alone)."""
    if isinstance(cores, bool) or not isinstance(cores, int) or cores < 1:
        raise ValueError(f"host_cpu_cores must be a positive integer, got {cores!r}: the "
                         "simulated host's CPU cores that run the data loader "
                         "(Options.Simulation.system(..., host_cpu_cores=N)).")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
        raise ValueError(f"num_workers must be an integer >= 0, got {workers!r}.")
    parallel = cost.workers_cpu_s / min(workers, cores) if workers else 0.0
    return max(cost.serial_cpu_s + cost.serial_wait_s, parallel,
               (cost.serial_cpu_s + cost.workers_cpu_s) / cores)


def measured_rate(costs: CostLog, items_per_step: int, workers: int,
                  cores: int) -> LoaderRate | None:
    """The rate of steps of ``items_per_step`` items each, whose costs ``costs`` holds,
    loaded by ``workers`` worker processes on ``cores`` host cores; None before a step
    was costed (or when none cost anything)."""
    steps = len(costs)
    if not steps or not step_seconds(costs.total(), workers, cores) > 0:
        return None
    count = min(WINDOWS, steps)
    bounds = [round(k * steps / count) for k in range(count + 1)]
    windows = [((end - start) * items_per_step,
                step_seconds(costs.total(start, end), workers, cores))
               for start, end in zip(bounds, bounds[1:])]
    rates = [items / spent if spent > 0 else math.inf for items, spent in windows]
    kept = [window for _, window in sorted(zip(rates, windows))[1:]] if count > 2 else windows
    spent = sum(seconds for _, seconds in kept)
    rate = (sum(items for items, _ in kept) / spent if spent > 0  # else only the slowest cost
            else steps * items_per_step / step_seconds(costs.total(), workers, cores))
    finite = [r for r in rates if math.isfinite(r)]
    return LoaderRate(rate, min(min(finite), rate), max(max(finite), rate))
