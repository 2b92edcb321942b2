"""The clock a script reads while it runs on the simulator.

A PopTorch tutorial times ``model(x)`` with ``time.time()``: on the
simulator that measures how long torch took on this host's CPU, not how
long the IPUs would. The runner therefore watches the clock functions of
the ``time`` module (``time``, ``perf_counter``, ``monotonic`` and their
``_ns`` variants) while the script runs:

- by default they read the host's clock as ever, and the first time the
  script reads one after a model call, a note on stderr says its timings
  are this host's and points to ``--simulated-clock``;
- with ``--simulated-clock`` (or ``IPUSIM_SIMULATED_CLOCK=1``) each model
  call lasts its simulated duration instead of the time torch took here:
  the script's clock is the host's, less the host's time inside model calls,
  plus their simulated time. So ``t1 - t0`` around a call is its simulated
  duration (and the few microseconds of Python around it), a loop of calls
  gives the simulated throughput, and what the host really does between
  calls (the script's Python, its data loader, ``time.sleep``) passes as it
  does on an IPU system's host. Inside a call (a ``forward`` that reads the
  clock) the clock stands at the call's start; compiling adds nothing.

Only the script sees that clock: a reading is the script's when the function
that asks is in the script's own files (the script and the modules beside
it, installed packages aside) and in the process that runs the script.
Libraries (logging, tqdm, subprocess and queue timeouts, multiprocessing,
SimPy) and data loader workers keep the host's clock. ``datetime.now()`` and
``time.process_time()`` are left alone.
"""
from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

NAMES = ("time", "perf_counter", "monotonic")
_PS_PER_NS = 1000


class ScriptClock:
    """The clock of one script's run: how much host time its model calls took
    and how much simulated time they stand for."""

    def __init__(self, script: Path, simulated: bool,
                 host_ns: dict[str, Callable[[], int]] | None = None):
        self.simulated = simulated
        self.calls = 0
        self.warned = False
        self._host_ns = host_ns or {name: getattr(time, f"{name}_ns") for name in NAMES}
        self._simulated_ps = 0  # simulated time of the calls so far
        self._host_in_calls_ns = 0  # host time spent inside them
        self._call_started_ns: int | None = None  # host perf_counter at the current call's start
        self._directory = script.resolve().parent
        self._pid = os.getpid()
        self._script_files: dict[str, bool] = {}
        shim = Path(__file__).resolve().parents[1]  # the shim and ipusim keep host time
        self._packages = (str(shim), str(shim.parent / "ipusim"))

    # -- model calls -----------------------------------------------------------
    def call_started(self) -> None:
        self._call_started_ns = self._host_ns["perf_counter"]()

    def call_ended(self, simulated_ps: int) -> None:
        """The call that started last took ``simulated_ps`` of simulated time."""
        self._host_in_calls_ns += self._host_ns["perf_counter"]() - self._call_started_ns
        self._simulated_ps += simulated_ps
        self._call_started_ns = None
        self.calls += 1

    # -- readings ----------------------------------------------------------------
    def reading_ns(self, name: str) -> int:
        """``time.<name>_ns()`` as the script reads it with the simulated clock."""
        host = self._host_ns[name]()
        if self._call_started_ns is not None:  # stand still at the call's start
            host -= self._host_ns["perf_counter"]() - self._call_started_ns
        return host - self._host_in_calls_ns + self._simulated_ps // _PS_PER_NS

    def is_script(self, filename: str) -> bool:
        """Whether code in ``filename`` is the script's own (cached per file)."""
        known = self._script_files.get(filename)
        if known is None:
            path = Path(filename).resolve()  # a relative name is the cwd's, as runpy's
            known = (not filename.startswith("<") and path.is_relative_to(self._directory)
                     and not {"site-packages", "dist-packages"} & set(path.parts)
                     and not str(path).startswith(self._packages))
            self._script_files[filename] = known
        return known

    def reads_simulated(self, frame) -> bool:
        """Whether the caller in ``frame`` reads the simulated clock (and, when the
        clock is the host's, tell the script so once)."""
        if os.getpid() != self._pid or not self.is_script(frame.f_code.co_filename):
            return False
        if self.simulated:
            return True
        if self.calls and not self.warned:
            self.warned = True
            print("ipusim: this script times itself with the host's clock: its timings are "
                  "this host's CPU running torch, not the simulated IPUs. Run it with "
                  "--simulated-clock (or IPUSIM_SIMULATED_CLOCK=1) to make each model call "
                  "last its simulated time.", file=sys.stderr)
        return False


class ModelCall:
    """One call to a model, as the clock sees it: when it began on the host's
    ``perf_counter_ns`` (the outermost call's start, for a call made inside another),
    and how long it lasted in simulated time, which the model says."""

    def __init__(self) -> None:
        self.simulated_ps = 0
        self.host_start_ns = host_now_ns()

    def lasted(self, simulated_ps: int) -> None:
        self.simulated_ps = simulated_ps


_clock: ScriptClock | None = None
_host_perf_counter_ns = time.perf_counter_ns  # the host's, whatever the script's clock reads
_calls_ps = 0   # simulated time of every outermost model call this process made
_host_calls_ns = 0  # and the host's time inside them: the real compute on this CPU
_in_call = False


def host_now_ns() -> int:
    """The host's ``perf_counter_ns``, whatever the script's clock reads."""
    return _host_perf_counter_ns()


def simulated_calls_ps() -> int:
    """The simulated time of every model call this process has made (a call made
    inside another call counts once, in the outer one), runner or not."""
    return _calls_ps


def host_calls_s() -> float:
    """This host's seconds inside every model call this process has made: what
    computing the models for real cost, which a timing-only run does not pay."""
    return _host_calls_ns / 1e9


@contextmanager
def model_call() -> Iterator[ModelCall]:
    """Time one call to a model: the script's clock replaces the host's time
    inside it by the simulated time the model reports (outside the runner only
    :func:`simulated_calls_ps` counts it)."""
    global _calls_ps, _host_calls_ns, _in_call
    call = ModelCall()
    if _in_call:  # a call made inside a call
        yield call
        return
    clock, _in_call = _clock, True
    if clock is not None:
        clock.call_started()
    try:
        yield call
    finally:
        _in_call = False
        _calls_ps += call.simulated_ps
        _host_calls_ns += host_now_ns() - call.host_start_ns
        if clock is not None:
            clock.call_ended(call.simulated_ps)


def _readers(name: str, clock: ScriptClock) -> tuple[Callable[[], float], Callable[[], int]]:
    """``time.<name>`` and ``time.<name>_ns`` as the script reads them."""
    host, host_ns = getattr(time, name), getattr(time, f"{name}_ns")

    def seconds() -> float:
        if clock.reads_simulated(sys._getframe(1)):
            return clock.reading_ns(name) / 1e9
        return host()

    def nanoseconds() -> int:
        if clock.reads_simulated(sys._getframe(1)):
            return clock.reading_ns(name)
        return host_ns()

    seconds.__name__, seconds.__doc__ = name, host.__doc__
    nanoseconds.__name__, nanoseconds.__doc__ = f"{name}_ns", host_ns.__doc__
    return seconds, nanoseconds


@contextmanager
def watching(script: Path, simulated: bool) -> Iterator[ScriptClock]:
    """Watch the clock the script reads while it runs (see the module docstring)."""
    global _clock
    saved = {name: getattr(time, name) for name in NAMES}
    saved.update({f"{name}_ns": getattr(time, f"{name}_ns") for name in NAMES})
    _clock = clock = ScriptClock(script, simulated)
    for name in NAMES:
        seconds, nanoseconds = _readers(name, clock)
        setattr(time, name, seconds)
        setattr(time, f"{name}_ns", nanoseconds)
    try:
        yield clock
    finally:
        for name, function in saved.items():
            setattr(time, name, function)
        _clock = None
