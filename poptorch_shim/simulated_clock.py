"""The clock a script reads while it runs on the simulator.

A PopTorch tutorial times ``model(x)`` with ``time.time()``: on the
simulator that measures how long torch took on this host's CPU, not how
long the IPUs would. The runner therefore watches the clock functions of
the ``time`` module (``time``, ``perf_counter``, ``monotonic`` and their
``_ns`` variants) while the script runs:

- by default they read the host's clock as ever, and the first time the
  script reads one after a model call, a note on stderr says its timings
  are this host's wall clock and points to ``--simulated-clock``;
- with ``--simulated-clock`` (or ``IPUSIM_SIMULATED_CLOCK=1``) they read a
  virtual clock that starts at the host's reading when the script starts and
  advances only by the simulated duration of each model call, so
  ``t1 - t0`` around a call is its simulated latency, and items over the
  seconds between two readings is the simulated throughput.

Only the script sees the virtual clock: a reading is virtual when the
function that asks is in the script's own files (the script and the modules
beside it, installed packages aside) and in the process that runs the
script. Libraries (logging, tqdm, subprocess and queue timeouts,
multiprocessing, SimPy) and data loader workers keep the host's clock. Time
the script spends outside model calls (its own Python, ``time.sleep``, the
data loader) adds nothing to the virtual clock; nor does compilation.
``datetime.now()`` and ``time.process_time()`` are left alone.
"""
from __future__ import annotations

import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

SIMULATED_CLOCK_ENV = "IPUSIM_SIMULATED_CLOCK"
_NAMES = ("time", "perf_counter", "monotonic")
_PS_PER_NS = 1000


class ScriptClock:
    """The clock readings of one script's run, and how far the simulation has gone."""

    def __init__(self, script: Path, simulated: bool):
        self.simulated = simulated
        self.elapsed_ps = 0  # simulated time of the model calls so far
        self.calls = 0
        self.warned = False
        self._directory = script.resolve().parent
        self._pid = os.getpid()
        self._users: dict[str, bool] = {}
        self._packages = tuple(str(Path(p).resolve()) for p in
                               (Path(__file__).parent, Path(__file__).parent.parent / "ipusim"))
        # The host's readings at the start, from which the virtual clock counts.
        self._origin_ns = {name: getattr(time, f"{name}_ns")() for name in _NAMES}

    def advance(self, duration_ps: int) -> None:
        """A model call took ``duration_ps`` of simulated time."""
        self.elapsed_ps += duration_ps
        self.calls += 1

    def _is_script(self, filename: str) -> bool:
        """Whether code in ``filename`` is the script's own (cached per file)."""
        known = self._users.get(filename)
        if known is None:
            path = Path(filename).resolve()  # a relative name is the cwd's, as runpy's
            known = (not filename.startswith("<") and path.is_relative_to(self._directory)
                     and not {"site-packages", "dist-packages"} & set(path.parts)
                     and not str(path).startswith(self._packages))
            self._users[filename] = known
        return known

    def reads_virtual(self, frame) -> bool:
        """Whether the caller in ``frame`` gets the virtual clock (and, when
        the clock is the host's, tell the script so once)."""
        if os.getpid() != self._pid or not self._is_script(frame.f_code.co_filename):
            return False
        if self.simulated:
            return True
        if self.calls and not self.warned:
            self.warned = True
            print("ipusim: this script times itself with the host's clock: its timings are "
                  "this host's CPU running torch, not the simulated IPUs. Run it with "
                  "--simulated-clock (or IPUSIM_SIMULATED_CLOCK=1) to make time.time() and "
                  "time.perf_counter() follow the simulation.", file=sys.stderr)
        return False

    def virtual_ns(self, name: str) -> int:
        return self._origin_ns[name] + self.elapsed_ps // _PS_PER_NS


_clock: ScriptClock | None = None


def advance(duration_ps: int) -> None:
    """Move the script's clock on by a model call's simulated duration (no-op
    outside the runner)."""
    if _clock is not None:
        _clock.advance(duration_ps)


def requested() -> bool:
    """Whether the environment asks for the simulated clock."""
    return os.environ.get(SIMULATED_CLOCK_ENV, "") not in ("", "0")


def _readers(name: str, clock: ScriptClock) -> tuple[Callable[[], float], Callable[[], int]]:
    """``time.<name>`` and ``time.<name>_ns`` as the script reads them."""
    host, host_ns = getattr(time, name), getattr(time, f"{name}_ns")

    def seconds() -> float:
        if clock.reads_virtual(sys._getframe(1)):
            return clock.virtual_ns(name) / 1e9
        return host()

    def nanoseconds() -> int:
        if clock.reads_virtual(sys._getframe(1)):
            return clock.virtual_ns(name)
        return host_ns()

    seconds.__name__, seconds.__doc__ = name, host.__doc__
    nanoseconds.__name__, nanoseconds.__doc__ = f"{name}_ns", host_ns.__doc__
    return seconds, nanoseconds


@contextmanager
def watching(script: Path, simulated: bool) -> Iterator[ScriptClock]:
    """Watch the clock the script reads while it runs (see the module docstring)."""
    global _clock
    saved = {name: getattr(time, name) for name in _NAMES}
    saved.update({f"{name}_ns": getattr(time, f"{name}_ns") for name in _NAMES})
    _clock = clock = ScriptClock(script, simulated)
    for name in _NAMES:
        seconds, nanoseconds = _readers(name, clock)
        setattr(time, name, seconds)
        setattr(time, f"{name}_ns", nanoseconds)
    try:
        yield clock
    finally:
        for name, function in saved.items():
            setattr(time, name, function)
        _clock = None
