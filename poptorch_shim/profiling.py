"""``poptorch.profiling``: channels of host tracepoints, as PopTorch has them.

On an IPU system PopTorch hands a :class:`Channel`'s tracepoints to libpvti,
and the PopVision System Analyser shows them beside the host's other work.
Here each tracepoint is recorded with the host time it spanned and the
simulated time of the model calls made inside it. At the end of a run
(``ipusim run``) they join each model's report trace (``trace.json``) on its
host process, a thread per channel, placed in that model's simulated time by
its calls (see :func:`host_slices`); a run with reports (``ipusim run --report
DIR`` or ``IPUSIM_REPORT_DIR``) also writes them on their own, on the host's
clock, as ``tracepoints.json`` in DIR (see :func:`write_tracepoints`).

>>> channel = poptorch.profiling.Channel("MyApp")
>>> with channel.tracepoint("TimeThis"):
...     functionToTime()
>>> channel.instrument(myobj, "methodName", "otherMethod")
"""
from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ipusim.cost.cost_model import PS_PER_US
from poptorch_shim._core import simulated_clock

TRACE_FILE = "tracepoints.json"
#: A model's host-side trace for ``pva.openTrace``, beside its report.
PVTI_FILE = "host.pvti"
PVTI_FORMAT, PVTI_VERSION = "ipusim-pvti", 1
_NS_PER_US = 1000


@dataclass(frozen=True)
class Tracepoint:
    """One tracepoint as it ran: its channel, its name (``Channel.name``), when it
    began and ended on the host's ``perf_counter``, and the simulated time of the
    model calls made inside it."""

    channel: str
    name: str
    start_ns: int
    end_ns: int
    simulated_ps: int


_recorded: list[Tracepoint] = []


class Channel:
    """A named channel of tracepoints (PopTorch's ``poptorch.profiling.Channel``)."""

    def __init__(self, name: str):
        if not isinstance(name, str) or not name:
            raise TypeError(f"poptorch.profiling.Channel: name must be a non-empty string, "
                            f"got {name!r}")
        self.name = name

    def tracepoint(self, name: str) -> Any:
        """A context whose span is recorded as ``<channel>.<name>``."""
        if not isinstance(name, str):
            raise TypeError(f"Channel({self.name!r}).tracepoint: name must be a string, "
                            f"got {name!r}")
        return _tracing(self.name, f"{self.name}.{name}")

    def instrument(self, obj: Any, *methods: str) -> Any:
        """Record every call of each of ``obj``'s ``methods`` as a tracepoint named
        after it; returns ``obj``."""
        for method in methods:
            bound = getattr(obj, method, None)
            if not callable(bound):
                raise AttributeError(f"Channel({self.name!r}).instrument: "
                                     f"{type(obj).__name__} has no method {method!r}")
            setattr(obj, method, self._traced(bound, method))
        return obj

    def _traced(self, function, method: str):
        @functools.wraps(function)
        def traced(*args, **kwargs):
            with self.tracepoint(method):
                return function(*args, **kwargs)
        return traced


@contextmanager
def _tracing(channel: str, name: str) -> Iterator[None]:
    start_ns, simulated_ps = time.perf_counter_ns(), simulated_clock.simulated_calls_ps()
    try:
        yield
    finally:
        _recorded.append(Tracepoint(channel, name, start_ns, time.perf_counter_ns(),
                                    simulated_clock.simulated_calls_ps() - simulated_ps))


def recorded(since: int = 0) -> list[Tracepoint]:
    """The tracepoints this process has finished, in the order they ended, from the
    ``since``-th on (:func:`count` taken earlier: those finished after it)."""
    return _recorded[since:]


def count() -> int:
    """How many tracepoints this process has finished so far."""
    return len(_recorded)


def chrome_trace(tracepoints: list[Tracepoint]) -> dict:
    """The tracepoints as a Chrome trace: a thread per channel, times in µs from the
    first tracepoint's start, each with its simulated time in ``args``."""
    origin = min(tp.start_ns for tp in tracepoints)
    channels = list(dict.fromkeys(tp.channel for tp in tracepoints))
    pid = os.getpid()
    events: list[dict] = [{"ph": "M", "name": "process_name", "pid": pid,
                           "args": {"name": "host: poptorch.profiling tracepoints"}}]
    events += [{"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                "args": {"name": channel}} for tid, channel in enumerate(channels)]
    events += [{"ph": "X", "name": tp.name, "cat": tp.channel, "pid": pid,
                "tid": channels.index(tp.channel),
                "ts": (tp.start_ns - origin) / _NS_PER_US,
                "dur": (tp.end_ns - tp.start_ns) / _NS_PER_US,
                "args": {"simulated model calls (us)": tp.simulated_ps / PS_PER_US}}
               for tp in sorted(tracepoints, key=lambda tp: tp.start_ns)]
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_tracepoints(directory: str | Path, since: int = 0) -> Path | None:
    """Write the tracepoints finished from the ``since``-th on to
    ``directory``/``tracepoints.json`` (None, and nothing written, when there are none)."""
    tracepoints = recorded(since)
    if not tracepoints:
        return None
    path = Path(directory) / TRACE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(chrome_trace(tracepoints)))
    return path


def host_slices(tracepoints: list[Tracepoint],
                calls: list[tuple[int, int, int, int]]) -> list:
    """The ``tracepoints`` that overlap a model's ``calls`` (each its host
    ``perf_counter_ns`` at start and end and its simulated start and end in ps), as
    :class:`ipusim.report.chrome_trace.HostSlice` s in that model's simulated time: a
    host time inside a call maps to the same share of the call's simulated time, one
    between calls to where the earlier call ended (host work between calls takes no
    simulated time). A tracepoint wholly before the first call or after the last is
    left out; the part of one that is, cut off."""
    from ipusim.report.chrome_trace import HostSlice
    if not calls:
        return []
    host = [float(t) for call in calls for t in call[:2]]
    simulated = [float(t) for call in calls for t in call[2:]]
    out = []
    for tp in tracepoints:
        if tp.end_ns < host[0] or tp.start_ns > host[-1]:
            continue
        start, end = (round(float(t)) for t in np.interp([tp.start_ns, tp.end_ns], host,
                                                           simulated))
        out.append(HostSlice(
            f"tracepoints: {tp.channel}", tp.name, start, max(start, end),
            (("host (us)", (tp.end_ns - tp.start_ns) / _NS_PER_US),
             ("simulated model calls (us)", tp.simulated_ps / PS_PER_US))))
    return out


def add_to_traces(traces: list[tuple[Path, list[tuple[int, int, int, int]]]],
                  since: int = 0) -> None:
    """Add the tracepoints finished from the ``since``-th on to each Chrome trace of
    ``traces`` (its path and its model's calls, see :func:`host_slices`) that exists
    and that they overlap, atomically."""
    from ipusim.report.chrome_trace import add_host_slices
    tracepoints = recorded(since)
    for path, calls in traces if tracepoints else ():
        slices = host_slices(tracepoints, calls)
        if slices and Path(path).is_file():
            add_host_slices(path, slices)


def _nested(events: list[dict]) -> list[dict]:
    """``events`` (each with ``start_us`` and ``duration_us``) as a forest: each event a
    child of the latest-starting one that holds it whole."""
    roots: list[dict] = []
    open_: list[dict] = []
    for event in sorted(events, key=lambda e: (e["start_us"], -e["duration_us"])):
        end = event["start_us"] + event["duration_us"]
        while open_ and open_[-1]["start_us"] + open_[-1]["duration_us"] < end:
            open_.pop()
        (open_[-1]["children"] if open_ else roots).append(event)
        open_.append(event)
    return roots


def write_pvti(path: str | Path, model: str, calls: list[tuple[int, int, int, int]],
               since: int = 0) -> Path:
    """Write a model's host-side trace to ``path`` in ipusim's own format (JSON,
    ``{"format": "ipusim-pvti", "version", "processes": [{"pid", "threads": [{"tid",
    "name", "events": [{"label", "start_us", "duration_us", "children"}]}]}]}``): the
    host's side of each call of the model on one thread, and each channel's
    tracepoints finished from the ``since``-th on, on a thread of their own, nested by
    time. Times are the host's ``perf_counter`` in µs from the first event."""
    tracepoints = recorded(since)
    starts = [call[0] for call in calls] + [tp.start_ns for tp in tracepoints]
    origin = min(starts, default=0)
    threads = [{"tid": 0, "name": f"{model}: model calls",
                "events": [{"label": f"{model} call {index}",
                            "start_us": (start - origin) / _NS_PER_US,
                            "duration_us": (end - start) / _NS_PER_US, "children": []}
                           for index, (start, end, _, _) in enumerate(calls)]}]
    for tid, channel in enumerate(dict.fromkeys(tp.channel for tp in tracepoints), start=1):
        threads.append({"tid": tid, "name": channel, "events": _nested([
            {"label": tp.name, "start_us": (tp.start_ns - origin) / _NS_PER_US,
             "duration_us": (tp.end_ns - tp.start_ns) / _NS_PER_US, "children": []}
            for tp in tracepoints if tp.channel == channel])})
    document = {"format": PVTI_FORMAT, "version": PVTI_VERSION,
                "processes": [{"pid": os.getpid(), "threads": threads}]}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document))
    return path


__all__ = ["Channel"]
