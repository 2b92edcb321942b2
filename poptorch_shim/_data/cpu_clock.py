"""A stopwatch of one thread's CPU time, and of its time off the CPU that was not
spent waiting for one: what a data loader costs the host, whatever else the host runs.

A thread that loads data is, at each moment, on a CPU (its CPU time), ready to run
but waiting for a CPU that other processes hold (its run-queue time, which Linux
reports per thread in ``/proc/thread-self/schedstat``), or off the CPU by its own
doing: sleeping, reading a file, waiting for another process. The first and the
last are the loader's; the middle one is this machine's other load. The wall clock
counts all three, which is why a loader timed on it moves with the machine's load.
"""
from __future__ import annotations

import time
from pathlib import Path

_SCHEDSTAT = Path("/proc/thread-self/schedstat")


def queued_s() -> float:
    """Seconds this thread has spent ready to run but waiting for a CPU, since it
    started (0 where the kernel does not say)."""
    try:
        return int(_SCHEDSTAT.read_text().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


class Stopwatch:
    """This thread's CPU seconds and its own seconds off the CPU (wall time less CPU
    time less run-queue time), accumulated while running; ``pause`` and ``resume``
    leave out what is not the loader's (a worker waiting for a free slot), ``take``
    hands over what was accumulated and starts again from zero. Built running."""

    def __init__(self):
        self._cpu_s = self._off_cpu_s = 0.0
        self._mark: tuple[float, float, float] | None = None
        self.resume()

    def resume(self) -> None:
        if self._mark is None:
            self._mark = (time.thread_time(), time.perf_counter(), queued_s())

    def pause(self) -> None:
        if self._mark is not None:
            cpu, wall, queued = self._mark
            cpu_s = time.thread_time() - cpu
            self._cpu_s += cpu_s
            self._off_cpu_s += max(0.0, time.perf_counter() - wall - cpu_s
                                   - (queued_s() - queued))
            self._mark = None

    def take(self) -> tuple[float, float]:
        """CPU seconds and own off-CPU seconds since the last ``take`` (or since the
        stopwatch was built); it goes on running if it was running."""
        running = self._mark is not None
        self.pause()
        taken = self._cpu_s, self._off_cpu_s
        self._cpu_s = self._off_cpu_s = 0.0
        if running:
            self.resume()
        return taken
