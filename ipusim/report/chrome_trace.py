"""Export a timeline in the Chrome Trace Event format (Perfetto, chrome://tracing).

Processes are the host and each IPU; an IPU's threads are the report's lanes
(compute, host I/O, exchange, sync); the host's threads are the calls to the
model and the host links, one thread per link and direction. Every event is a
complete (``X``) event with times in µs; ``M`` events name and order the
processes and threads; flow events (``s`` -> ``f``) follow activations from a
stage's forward to the next stage's forward on another IPU, and gradients
from a stage's backward to the previous stage's backward.

At pod scale the trace keeps a level of detail (:mod:`ipusim.report.detail`):
the edges of the steps event by event, the steady middle as boxes named
"aggregated", each saying how many events of which kinds it stands for.
"""
from __future__ import annotations

import itertools
import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from ipusim.analysis.metrics import step_spans
from ipusim.analysis.timeline import Timeline
from ipusim.cost.cost_model import PS_PER_US
from ipusim.engine.event_kinds import (
    BACKWARD,
    COMPUTE_LANE,
    DEVICE_TO_HOST,
    FORWARD,
    HOST_TRANSFER_KINDS,
    KIND,
    LANES,
)
from ipusim.report import lanes
from ipusim.report.detail import Detail, aggregates, shown

HOST_PID = 1
CALLS_TID = 1
_LANE_TID = {lane: i + 1 for i, lane in enumerate(LANES)}
_ARG_COLUMNS = ("replica", "instance", "stage", "micro_batch", "step", "pipeline_cycle", "bytes",
                "flops")


def ipu_pid(ipu: int) -> int:
    """The trace process id of IPU ``ipu`` (the host is process 1)."""
    return ipu + 2


def _link_tid(link: int, direction: str) -> int:
    return 10 + 2 * link + (direction == DEVICE_TO_HOST)


def chrome_trace(timeline: Timeline, detail: Detail | None = None) -> dict:
    """The timeline as a Chrome trace: ``{"traceEvents": [...], "displayTimeUnit": "ns"}``.

    ``detail`` defaults to :meth:`Detail.from_environment` (``IPUSIM_TRACE_DETAIL=full``
    for every event).
    """
    detail = Detail.from_environment() if detail is None else detail
    events = timeline.events
    keep = shown(events, detail)
    detailed = events if keep.all() else events[keep]
    stage_names = [stage.name for stage in timeline.plan.work.stages]
    trace = _metadata(timeline)
    trace += _slices(detailed, stage_names)
    trace += _aggregate_slices(aggregates(events, detail, keep))
    trace += _host_slices(timeline, detailed)
    trace += _flows(detailed)
    return {"traceEvents": trace, "displayTimeUnit": "ns",
            "otherData": {"generator": "ipusim", "ipu": timeline.system.ipu.name,
                          "steps": timeline.steps, "instance": timeline.instance,
                          "detail": detail.describe(), "events": len(events),
                          "events_aggregated": int(len(events) - keep.sum())}}


def write_chrome_trace(timeline: Timeline, path: str | Path,
                       detail: Detail | None = None) -> Path:
    """Write :func:`chrome_trace` as JSON to ``path`` (parents created, atomically)."""
    # json.dumps, not json.dump: only the one-shot encoder runs in C.
    text = json.dumps(chrome_trace(timeline, detail), separators=(",", ":"))
    return write_atomically(path, text)


_temporary_names = itertools.count()


def write_atomically(path: str | Path, content: str | bytes | Callable[[Path], None]) -> Path:
    """Write ``content`` (text, bytes, or a function that writes the file it is
    given) to ``path``: into a temporary file in the same folder, renamed into
    place once whole, so that a reader never sees half a file and a failure
    (a full disk) leaves the old file, or none, and no temporary one. Parents
    are created. A path that exists and is no regular file (``/dev/stdout``,
    a pipe) is written directly: it cannot be replaced. Raises OSError."""
    path = Path(path)
    if path.exists() and not stat.S_ISREG(path.stat().st_mode):
        try:
            _write(path, content)
        except OSError as error:
            raise _naming(error, path) from error
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}-{next(_temporary_names)}.tmp")
    try:
        _write(temporary, content)
        os.replace(temporary, path)
    except BaseException as error:
        temporary.unlink(missing_ok=True)
        if isinstance(error, OSError):
            raise _naming(error, path) from error
        raise
    return path


def _naming(error: OSError, path: Path) -> OSError:
    """``error`` naming ``path``, the file meant, rather than its temporary one or none."""
    if error.errno is None or error.filename not in (None, str(path)) and \
            not str(error.filename).endswith(".tmp"):
        return error
    return type(error)(error.errno, error.strerror, str(path))


def _write(path: Path, content: str | bytes | Callable[[Path], None]) -> None:
    if callable(content):
        content(path)
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")


def _meta(what: str, pid: int, tid: int, **args) -> dict:
    return {"ph": "M", "name": what, "pid": pid, "tid": tid, "args": args}


def _metadata(timeline: Timeline) -> list[dict]:
    out = [_meta("process_name", HOST_PID, 0, name="Host"),
           _meta("process_sort_index", HOST_PID, 0, sort_index=0),
           _meta("thread_name", HOST_PID, CALLS_TID, name="calls to the model (steps)"),
           _meta("thread_sort_index", HOST_PID, CALLS_TID, sort_index=0)]
    for link in range(timeline.system.num_host_links):
        for direction in HOST_TRANSFER_KINDS:
            label = KIND[direction].label
            tid = _link_tid(link, direction)
            out += [_meta("thread_name", HOST_PID, tid, name=f"host link {link}: {label}"),
                    _meta("thread_sort_index", HOST_PID, tid, sort_index=tid)]
    for ipu in range(timeline.num_ipus):
        pid = ipu_pid(ipu)
        replica = timeline.plan.replica_of(ipu)
        out += [_meta("process_name", pid, 0, name=f"IPU {ipu} (replica {replica})"),
                _meta("process_sort_index", pid, 0, sort_index=pid)]
        for lane, tid in _LANE_TID.items():
            out += [_meta("thread_name", pid, tid, name=lane),
                    _meta("thread_sort_index", pid, tid, sort_index=tid)]
    return out


def _slices(events: pd.DataFrame, stage_names: list[str]) -> list[dict]:
    kinds = events["kind"].astype(str).tolist()
    labels = lanes.box_labels(events).tolist()
    columns = [events[c].tolist() for c in _ARG_COLUMNS]
    out = []
    for kind, label, start, end, ipu, *values in zip(
            kinds, labels, events["start_ps"].tolist(), events["end_ps"].tolist(),
            events["ipu"].tolist(), *columns):
        args = dict(zip(_ARG_COLUMNS, values))
        if args["stage"] >= 0:
            args["stage_name"] = stage_names[args["stage"]]
        out.append({"ph": "X", "name": f"{lanes.NAMES[kind]} {label}".strip(), "cat": kind,
                    "pid": ipu_pid(ipu), "tid": _LANE_TID[lanes.LANE_OF[kind]],
                    "ts": start / PS_PER_US, "dur": (end - start) / PS_PER_US, "args": args})
    return out


def _aggregate_slices(boxes: pd.DataFrame) -> list[dict]:
    """One box per IPU, lane and step for the events not shown one by one."""
    out = []
    for ipu, replica, lane, step, start, end, count, busy, kinds in boxes.itertuples(
            index=False):
        out.append({"ph": "X", "name": f"aggregated: {count:,} events", "cat": "aggregated",
                    "pid": ipu_pid(ipu), "tid": _LANE_TID[lane], "ts": start / PS_PER_US,
                    "dur": (end - start) / PS_PER_US,
                    "args": {"aggregated": True, "events": int(count), "kinds": kinds,
                             "busy_us": busy / PS_PER_US,
                             "busy_share": busy / (end - start) if end > start else 0.0,
                             "replica": int(replica), "step": int(step)}})
    return out


def _host_slices(timeline: Timeline, detailed: pd.DataFrame) -> list[dict]:
    """The calls to the model (all of them) and each host link's transfers (those
    shown one by one), on the host process."""
    out = []
    spans = step_spans(timeline.events)
    for step, start, end in zip(spans.index, spans["start_ps"], spans["end_ps"]):
        out.append({"ph": "X", "name": f"step {step}", "cat": "step", "pid": HOST_PID,
                    "tid": CALLS_TID, "ts": start / PS_PER_US, "dur": (end - start) / PS_PER_US,
                    "args": {"step": int(step)}})
    copies = detailed[detailed["kind"].isin(HOST_TRANSFER_KINDS)]
    for kind, start, end, ipu, nbytes, mb in zip(
            copies["kind"].astype(str), copies["start_ps"].tolist(), copies["end_ps"].tolist(),
            copies["ipu"].tolist(), copies["bytes"].tolist(), copies["micro_batch"].tolist()):
        out.append({"ph": "X", "name": f"{lanes.NAMES[kind]} IPU {ipu}", "cat": kind,
                    "pid": HOST_PID, "tid": _link_tid(timeline.system.host_link_of(ipu), kind),
                    "ts": start / PS_PER_US, "dur": (end - start) / PS_PER_US,
                    "args": {"ipu": ipu, "bytes": nbytes, "micro_batch": mb}})
    return out


def _flows(events: pd.DataFrame) -> list[dict]:
    """Arrows between the passes of one micro-batch on consecutive stages on other IPUs."""
    keys = ["instance", "replica", "step", "micro_batch", "stage"]
    out = []
    flow_id = 0
    for kind, name, offset in ((FORWARD, "activation", 1), (BACKWARD, "gradient", -1)):
        passes = events.loc[(events["kind"] == kind) & (events["micro_batch"] >= 0), keys + ["ipu"]]
        # Flow ends sit mid-slice: at a slice's edge they could bind to its neighbour.
        passes["middle_ps"] = events[["start_ps", "end_ps"]].loc[passes.index].mean(axis=1)
        successor = passes.assign(stage=passes["stage"] - offset)
        pairs = passes.merge(successor, on=keys, suffixes=("", "_to"))
        pairs = pairs[pairs["ipu"] != pairs["ipu_to"]]
        for src, dst, t0, t1, mb in zip(pairs["ipu"].tolist(), pairs["ipu_to"].tolist(),
                                        pairs["middle_ps"].tolist(), pairs["middle_ps_to"].tolist(),
                                        pairs["micro_batch"].tolist()):
            flow_id += 1
            common = {"name": name, "cat": name, "id": flow_id, "tid": _LANE_TID[COMPUTE_LANE]}
            out.append({**common, "ph": "s", "pid": ipu_pid(src), "ts": t0 / PS_PER_US,
                        "args": {"micro_batch": mb}})
            out.append({**common, "ph": "f", "bp": "e", "pid": ipu_pid(dst), "ts": t1 / PS_PER_US,
                        "args": {"micro_batch": mb}})
    return out
