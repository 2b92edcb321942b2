"""Export a timeline in the Chrome Trace Event format (Perfetto, chrome://tracing).

Processes are the host and each IPU; an IPU's threads are the report's lanes
(compute, host I/O, exchange, sync); the host's threads are the calls to the
model, the host links (a thread per IPU and direction, under its link: a
machine's IPUs stream at once) and the host's own work where a caller adds it
(a run's ``poptorch.profiling`` tracepoints, one thread per channel:
:class:`HostSlice`, :func:`add_host_slices`). ``M`` events name and order the
processes and threads.

Slices (complete ``X`` events, times in µs to the ns: Perfetto rounds them to
whole ns, so that is what nests exactly) are named for what they are, the
event kind: "forward", "backward", "recompute", "weight update", "host to
device", "device to host", "ipu copy", "all reduce", "sync wait", "host
call"...; the rest is in ``args``, only where it applies: step, replica,
micro-batch, pipeline cycle, stage (its name, and ``stage_index``), bytes,
FLOPs. A compute slice whose pass lists its operators holds them as child
slices on its thread (``cat`` "operator", named for the aten operator, e.g.
``aten::addmm``, else for the kernel kind), laid end to end, each taking its
share of the pass's clock cycles (:meth:`ipusim.Timeline.operator_breakdown`).

Counter tracks (``C``): each IPU's memory by category (the plan's memory table:
constant over the run), its time by category per window of the span (the
utilisation over time, :meth:`ipusim.Timeline.category_shares_over_time`), and
each host link's busy share and bandwidth per direction per window
(:meth:`ipusim.Timeline.host_link_busy_over_time`). Flow events (``s`` ->
``f``) follow activations from a stage's forward to the next stage's forward
on another IPU, and gradients from a stage's backward to the previous stage's
backward; each end sits inside the slice it binds to.

At pod scale the trace keeps a level of detail (:mod:`ipusim.report.detail`):
the edges of the steps event by event, the steady middle as boxes named
"aggregated", each saying how many events of which kinds it stands for. Only
the compute slices shown one by one get their operators (at most
``Detail.operators_up_to`` operator slices, the first replicas' first), and
only the IPUs of the replicas shown get counters.

HolisticTraceAnalysis reads PyTorch profiler traces, one file per rank, rather
than this one: :mod:`ipusim.report.kineto_trace` writes those.
"""
from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ipusim.analysis.metrics import step_spans
from ipusim.analysis.program_steps import operator_sources
from ipusim.analysis.timeline import Timeline
from ipusim.cost.cost_model import PS_PER_US
from ipusim.engine.event_kinds import (
    BACKWARD,
    COMPUTE_KINDS,
    COMPUTE_LANE,
    DEVICE_TO_HOST,
    FORWARD,
    HOST_TRANSFER_KINDS,
    KIND,
    KINDS,
    LANES,
)
from ipusim.plan.memory import MB, MEMORY_PARTS
from ipusim.report import lanes
from ipusim.report.detail import Detail, aggregates, shown
from ipusim.report.files import write_atomically

HOST_PID = 1
CALLS_TID = 1
HOST_SLICES_TID = 1000  # the first thread of the host's own slices (tracepoint channels)
#: The thread of each of an IPU's lanes (the Kineto traces' streams too).
LANE_TID = {lane: i + 1 for i, lane in enumerate(LANES)}
# A slice is named for its kind: "weight update", "host to device", "ipu copy"...
SLICE_NAMES = {kind: kind.replace("_", " ") for kind in KINDS}
OPERATOR = "operator"
COUNTER_WINDOWS = 200  # windows of the span the counters over time sample


@dataclass(frozen=True)
class HostSlice:
    """A span of the host's own work, in the timeline's simulated time, to show on the
    host process: its row (``thread``, e.g. a tracepoint's channel), name, start and
    end in picoseconds, and ``args`` as (name, value) pairs."""

    thread: str
    name: str
    start_ps: int
    end_ps: int
    args: tuple[tuple[str, object], ...] = ()

    def __post_init__(self) -> None:
        for field_name in ("thread", "name"):
            value = getattr(self, field_name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"HostSlice.{field_name} must be a non-empty string, "
                                 f"got {value!r}")
        if not (isinstance(self.start_ps, int) and isinstance(self.end_ps, int)
                and 0 <= self.start_ps <= self.end_ps):
            raise ValueError(f"HostSlice {self.name!r}: start_ps and end_ps must be integers "
                             f"with 0 <= start_ps <= end_ps, got {self.start_ps!r} and "
                             f"{self.end_ps!r}")


def _ns(ps: float) -> int:
    return (int(ps) + 500) // 1000


def _ts(ps: float) -> float:
    """A time in µs, whole ns: Perfetto reads µs as ns rounded to the nearest, so times
    of whole ns come through exactly and a slice ends where its last child does."""
    return _ns(ps) / 1000


def _span(start_ps: float, end_ps: float) -> dict:
    """An ``X`` event's ts and dur (µs, whole ns): its end rounded as a start would be."""
    return {"ts": _ts(start_ps), "dur": (_ns(end_ps) - _ns(start_ps)) / 1000}


def ipu_pid(ipu: int) -> int:
    """The trace process id of IPU ``ipu`` (the host is process 1)."""
    return ipu + 2


def _link_tid(ipu: int, direction: str) -> int:
    """The host-process thread of ``ipu``'s copies in ``direction``: one per IPU, under
    its host link, since a machine's IPUs stream at once and the copies of one link
    overlap (slices on one thread must nest)."""
    return 10 + 2 * ipu + (direction == DEVICE_TO_HOST)


def chrome_trace(timeline: Timeline, detail: Detail | None = None,
                 host_slices: Iterable[HostSlice] = (),
                 contexts: dict[str, list[dict]] | None = None) -> dict:
    """The timeline as a Chrome trace: ``{"traceEvents": [...], "displayTimeUnit": "ns",
    "otherData": {...}}``, with ``host_slices`` on the host process.

    ``detail`` defaults to :meth:`Detail.from_environment` (``IPUSIM_TRACE_DETAIL=full``
    for every event); ``contexts``, the operator runs' debug contexts by name, name each
    operator slice by its module and give its sources.
    """
    detail = Detail.from_environment() if detail is None else detail
    events = timeline.events
    keep = shown(events, detail)
    detailed = events if keep.all() else events[keep]
    stage_names = [stage.name for stage in timeline.plan.stages]
    operators, expanded = _operator_slices(detailed, operator_layout(timeline, contexts),
                                           detail.operators_up_to)
    host_slices = list(host_slices)
    trace = _metadata(timeline)
    trace += _slices(detailed, stage_names, with_instance=bool((events["instance"] != 0).any()))
    trace += _aggregate_slices(aggregates(events, detail, keep))
    trace += _host_slices(timeline, detailed, stage_names)
    trace += operators
    trace += _counters(timeline, None if keep.all() else detail.replicas)
    trace += _flows(detailed)
    trace += host_slice_events(host_slices, HOST_SLICES_TID)
    compute = int(detailed["kind"].isin(COMPUTE_KINDS).sum())
    return {"traceEvents": trace, "displayTimeUnit": "ns",
            "otherData": {"generator": "ipusim", "ipu": timeline.system.ipu.name,
                          "steps": timeline.steps, "instance": timeline.instance,
                          "detail": detail.describe(), "events": len(events),
                          "events_aggregated": int(len(events) - keep.sum()),
                          "compute_slices_with_operators": expanded,
                          "compute_slices": compute, "operator_slices": len(operators),
                          "host_slices": len(host_slices)}}


def write_chrome_trace(timeline: Timeline, path: str | Path, detail: Detail | None = None,
                       host_slices: Iterable[HostSlice] = (),
                       contexts: dict[str, list[dict]] | None = None) -> Path:
    """Write :func:`chrome_trace` as JSON to ``path`` (parents created, atomically)."""
    # json.dumps, not json.dump: only the one-shot encoder runs in C.
    text = json.dumps(chrome_trace(timeline, detail, host_slices, contexts),
                      separators=(",", ":"))
    return write_atomically(path, text)


def add_host_slices(path: str | Path, host_slices: Iterable[HostSlice]) -> Path:
    """Add ``host_slices`` to the Chrome trace at ``path`` (one :func:`write_chrome_trace`
    wrote), atomically: for the host's work known only once the trace is written, such
    as the tracepoints of the rest of a run. Their threads follow the host's others."""
    path = Path(path)
    host_slices = list(host_slices)
    trace = json.loads(path.read_text(encoding="utf-8"))
    used = [e.get("tid", 0) for e in trace["traceEvents"] if e.get("pid") == HOST_PID]
    first = max([HOST_SLICES_TID - 1, *used]) + 1
    trace["traceEvents"] += host_slice_events(host_slices, first)
    other = trace.setdefault("otherData", {})
    other["host_slices"] = other.get("host_slices", 0) + len(host_slices)
    return write_atomically(path, json.dumps(trace, separators=(",", ":")))


def host_slices_in(path: str | Path) -> list[HostSlice]:
    """The host slices of the Chrome trace at ``path`` (those :func:`add_host_slices` or
    ``host_slices`` put there: a run's tracepoints), to keep when the trace is written
    again from the saved profile, which does not hold them. None if there is no trace,
    or one that cannot be read: it holds nothing to keep."""
    try:
        events = json.loads(Path(path).read_text(encoding="utf-8"))["traceEvents"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    threads = {e.get("tid"): e.get("args", {}).get("name") for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name"
               and e.get("pid") == HOST_PID}
    out = []
    for e in events:
        if e.get("ph") == "X" and e.get("cat") == "host" and e.get("pid") == HOST_PID:
            start = round(e["ts"] * 1000) * 1000  # whole ns, as _span wrote them
            out.append(HostSlice(threads.get(e.get("tid")) or "host", e["name"], start,
                                 start + round(e["dur"] * 1000) * 1000,
                                 tuple(e.get("args", {}).items())))
    return out

def host_slice_events(host_slices: list[HostSlice], first_tid: int) -> list[dict]:
    """``host_slices`` as ``X`` events on the host process, a thread per row from
    ``first_tid`` on, each named by its ``thread_name`` metadata."""
    threads = {name: first_tid + k
               for k, name in enumerate(dict.fromkeys(s.thread for s in host_slices))}
    out = []
    for name, tid in threads.items():
        out += [meta("thread_name", HOST_PID, tid, name=name),
                meta("thread_sort_index", HOST_PID, tid, sort_index=tid)]
    for piece in sorted(host_slices, key=lambda s: (s.start_ps, -s.end_ps)):
        out.append({"ph": "X", "name": piece.name, "cat": "host", "pid": HOST_PID,
                    "tid": threads[piece.thread], **_span(piece.start_ps, piece.end_ps),
                    "args": dict(piece.args)})
    return out


def meta(what: str, pid: int, tid: int, **args) -> dict:
    """A metadata (``M``) event: a process's or thread's name or sort index."""
    return {"ph": "M", "name": what, "pid": pid, "tid": tid, "args": args}


def _metadata(timeline: Timeline) -> list[dict]:
    out = [meta("process_name", HOST_PID, 0, name="Host"),
           meta("process_sort_index", HOST_PID, 0, sort_index=0),
           meta("thread_name", HOST_PID, CALLS_TID, name="calls to the model (steps)"),
           meta("thread_sort_index", HOST_PID, CALLS_TID, sort_index=0)]
    for ipu in range(timeline.num_ipus):
        link = int(timeline.system.host_link_of(ipu))
        for direction in HOST_TRANSFER_KINDS:
            label = KIND[direction].label
            tid = _link_tid(ipu, direction)
            out += [meta("thread_name", HOST_PID, tid,
                         name=f"host link {link}: {label}, IPU {ipu}"),
                    meta("thread_sort_index", HOST_PID, tid, sort_index=tid)]
    for ipu in range(timeline.num_ipus):
        pid = ipu_pid(ipu)
        replica = timeline.plan.replica_of(ipu)
        out += [meta("process_name", pid, 0, name=f"IPU {ipu} (replica {replica})"),
                meta("process_sort_index", pid, 0, sort_index=pid)]
        for lane, tid in LANE_TID.items():
            out += [meta("thread_name", pid, tid, name=lane),
                    meta("thread_sort_index", pid, tid, sort_index=tid)]
    return out


def _number(value: float) -> int | float:
    """A count as an int when it is whole (bytes, FLOPs), else as it is."""
    return int(value) if float(value).is_integer() else float(value)


def event_args(events: pd.DataFrame, stage_names: list[str],
               with_instance: bool = False) -> list[dict]:
    """Each event's ``args``: step and replica, and only where they apply the instance,
    micro-batch, pipeline cycle, stage (name and index), bytes and FLOPs."""
    columns = [events[c].tolist() for c in ("step", "replica", "instance", "micro_batch",
                                            "pipeline_cycle", "stage", "bytes", "flops")]
    out = []
    for step, replica, instance, micro_batch, cycle, stage, nbytes, flops in zip(*columns):
        args = {"step": step, "replica": replica}
        if with_instance:
            args["instance"] = instance
        if micro_batch >= 0:
            args["micro_batch"] = micro_batch
        if cycle >= 0:
            args["pipeline_cycle"] = cycle
        if stage >= 0:
            args["stage"] = stage_names[stage]
            args["stage_index"] = stage
        if nbytes > 0:
            args["bytes"] = _number(nbytes)
        if flops > 0:
            args["flops"] = _number(flops)
        out.append(args)
    return out


def _slices(events: pd.DataFrame, stage_names: list[str], with_instance: bool) -> list[dict]:
    out = []
    for kind, start, end, ipu, args in zip(
            events["kind"].astype(str).tolist(), events["start_ps"].tolist(),
            events["end_ps"].tolist(), events["ipu"].tolist(),
            event_args(events, stage_names, with_instance)):
        out.append({"ph": "X", "name": SLICE_NAMES[kind], "cat": kind,
                    "pid": ipu_pid(ipu), "tid": LANE_TID[lanes.LANE_OF[kind]],
                    **_span(start, end), "args": args})
    return out


def operator_layout(timeline: Timeline, contexts: dict[str, list[dict]] | None = None
                    ) -> dict[tuple[int, str], list[tuple[str, float, dict]]]:
    """For each (stage index, pass) whose pass lists its operators: each operator's name
    (its aten operator, else its kernel kind; with ``contexts``, the debug contexts of the
    runs by name, after the module that made it: ``fc1/aten::addmm``), where it ends as a
    fraction of the pass (end to end, in proportion to its clock cycles; the last ends
    at 1) and its args (with its ``sources``: each module and the file and line of the
    model's code). Only the passes the timeline runs
    (:meth:`ipusim.Timeline.operator_shares`)."""
    table = timeline.operator_shares()
    sources = operator_sources(timeline, contexts or {})
    out = {}
    for (index, kind), rows in table.groupby(["stage_index", "pass"], sort=False):
        cycles = rows["total_cycles"].to_numpy(float)
        if cycles.sum() <= 0:
            continue
        ends = np.cumsum(cycles) / cycles.sum()
        ends[-1] = 1.0
        operators = []
        for position, row, end in zip(rows.index, rows.itertuples(index=False), ends.tolist()):
            args = {"kernel": row.kind, "count": int(row.count),
                    "cycles": int(row.total_cycles), "width": int(row.width)}
            found = sources.get(position, [])
            if found:
                args["sources"] = [f"{s.module or '(model)'} {s.file}:{s.line}" for s in found]
            args.update({dim: int(getattr(row, dim)) for dim in ("m", "k", "n", "elements")
                         if getattr(row, dim)})
            if row.groups > 1:
                args["groups"] = int(row.groups)
            name = row.op or row.kind
            modules = {s.module for s in found}
            if len(modules) == 1 and next(iter(modules)):
                name = f"{next(iter(modules))}/{name}"
            operators.append((name, end, args))
        out[(int(index), kind)] = operators
    return out


def _operator_slices(events: pd.DataFrame, layout: dict, budget: int) -> tuple[list[dict], int]:
    """Each compute slice's operators, laid out inside it, for as many compute slices as
    ``budget`` operator slices allow, the first replicas' first; and that number of
    compute slices."""
    if not layout:
        return [], 0
    kinds = events["kind"].astype(str).to_numpy()
    stages = events["stage"].to_numpy()
    keys = [(stage, kind) for stage, kind in zip(stages.tolist(), kinds.tolist())]
    has = np.array([key in layout for key in keys], bool)
    order = np.lexsort((events["start_ps"].to_numpy(), events["replica"].to_numpy()))
    order = order[has[order]]
    start, end = events["start_ps"].to_numpy(), events["end_ps"].to_numpy()
    ipu = events["ipu"].to_numpy()
    out, expanded = [], 0
    for row in order.tolist():
        operators = layout[keys[row]]
        if len(out) + len(operators) > budget:
            break
        expanded += 1
        pid, tid = ipu_pid(int(ipu[row])), LANE_TID[COMPUTE_LANE]
        for name, low, high, args in operator_pieces(operators, int(start[row]),
                                                     int(end[row])):
            out.append({"ph": "X", "name": name, "cat": OPERATOR, "pid": pid, "tid": tid,
                        **_span(low, high), "args": args})
    return out, expanded


def operator_pieces(operators: list[tuple[str, float, dict]], start: int,
                    end: int) -> list[tuple[str, int, int, dict]]:
    """One pass's operators (an entry of :func:`operator_layout`) laid end to end over
    its span from ``start`` to ``end`` (ps): each one's name, start, end and args."""
    out, low = [], start
    for name, fraction, args in operators:
        high = start + round((end - start) * fraction)
        out.append((name, low, high, args))
        low = high
    return out


def _aggregate_slices(boxes: pd.DataFrame) -> list[dict]:
    """One box per IPU, lane and step for the events not shown one by one."""
    out = []
    for ipu, replica, lane, step, start, end, count, busy, kinds in boxes.itertuples(
            index=False):
        out.append({"ph": "X", "name": "aggregated", "cat": "aggregated",
                    "pid": ipu_pid(ipu), "tid": LANE_TID[lane], **_span(start, end),
                    "args": {"aggregated": True, "events": int(count), "kinds": kinds,
                             "busy_us": busy / PS_PER_US,
                             "busy_share": busy / (end - start) if end > start else 0.0,
                             "replica": int(replica), "step": int(step)}})
    return out


def _host_slices(timeline: Timeline, detailed: pd.DataFrame,
                 stage_names: list[str]) -> list[dict]:
    """The calls to the model (all of them) and each host link's transfers (those
    shown one by one), on the host process."""
    out = []
    spans = step_spans(timeline.events)
    for step, start, end in zip(spans.index, spans["start_ps"], spans["end_ps"]):
        out.append({"ph": "X", "name": "step", "cat": "step", "pid": HOST_PID,
                    "tid": CALLS_TID, **_span(start, end),
                    "args": {"step": int(step)}})
    copies = detailed[detailed["kind"].isin(HOST_TRANSFER_KINDS)]
    for kind, start, end, ipu, args in zip(
            copies["kind"].astype(str), copies["start_ps"].tolist(), copies["end_ps"].tolist(),
            copies["ipu"].tolist(), event_args(copies, stage_names)):
        out.append({"ph": "X", "name": SLICE_NAMES[kind], "cat": kind,
                    "pid": HOST_PID, "tid": _link_tid(ipu, kind),
                    **_span(start, end),
                    "args": {"ipu": ipu, **args}})
    return out


def _counter(name: str, pid: int, ts_ps: float, values: dict) -> dict:
    return {"ph": "C", "name": name, "pid": pid, "ts": _ts(ts_ps),
            "args": values}


def counter_windows(timeline: Timeline) -> int:
    """How many windows the counters over time sample: ``COUNTER_WINDOWS``, or fewer in
    a short run, no more than its IPUs have events each."""
    return max(1, min(COUNTER_WINDOWS, len(timeline.events) // max(timeline.num_ipus, 1)))


def _counters(timeline: Timeline, replicas: int | None) -> list[dict]:
    """Counter tracks: each IPU's memory by category and its time by category per window;
    each host link's busy share and bandwidth per direction per window. ``replicas``:
    only the IPUs of the first so many replicas (None: all)."""
    events = timeline.events
    if events.empty:
        return []
    first, last = int(events["start_ps"].min()), int(events["end_ps"].max())
    ipus = range(timeline.num_ipus)
    if replicas is not None:
        ipus = range(min(timeline.num_ipus, replicas * timeline.plan.ipus_per_replica))
    out = []
    memory = timeline.memory_per_ipu()
    for ipu in ipus:
        row = memory.loc[ipu % timeline.plan.ipus_per_replica]
        values = {part: float(row[part]) / MB for part in MEMORY_PARTS}
        out += [_counter("memory (MB)", ipu_pid(ipu), t, values) for t in (first, last)]
    windows = counter_windows(timeline)
    shares = timeline.category_shares_over_time(windows)
    categories = [c for c in shares.columns if c not in ("ipu", "start_ps", "end_ps")]
    shares = shares[shares["ipu"] < len(ipus)]
    for ipu, start, end, *values in shares[["ipu", "start_ps", "end_ps", *categories]].itertuples(
            index=False):
        sample = dict(zip(categories, values))
        out.append(_counter("time by category (share)", ipu_pid(ipu), start, sample))
        if end == last:  # the last window's values hold to the end of the span
            out.append(_counter("time by category (share)", ipu_pid(ipu), end, sample))
    links = timeline.host_link_busy_over_time(windows).sort_values(
        ["direction", "link", "start_ps"], kind="stable")
    shown_links = sorted({int(timeline.system.host_link_of(ipu)) for ipu in ipus})
    edges = links["start_ps"].to_numpy()[:windows].tolist() + [last]
    widths = np.maximum(np.diff(edges), 1)
    busy, rate = {}, {}
    for direction in HOST_TRANSFER_KINDS:
        rows = links[links["direction"] == direction]
        busy[direction] = rows["busy_share"].to_numpy().reshape(-1, windows)
        rate[direction] = rows["bytes"].to_numpy().reshape(-1, windows) / widths * 1e3  # GB/s
    for link in shown_links:
        for window, t in enumerate(edges):
            k = min(window, windows - 1)  # the last window's values hold to the end
            out.append(_counter(f"host link {link} busy share", HOST_PID, t, {
                SLICE_NAMES[d]: float(busy[d][link, k]) for d in HOST_TRANSFER_KINDS}))
            out.append(_counter(f"host link {link} bandwidth (GB/s)", HOST_PID, t, {
                SLICE_NAMES[d]: float(rate[d][link, k]) for d in HOST_TRANSFER_KINDS}))
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
            common = {"name": name, "cat": name, "id": flow_id, "tid": LANE_TID[COMPUTE_LANE]}
            out.append({**common, "ph": "s", "pid": ipu_pid(src), "ts": _ts(t0),
                        "args": {"micro_batch": mb}})
            out.append({**common, "ph": "f", "bp": "e", "pid": ipu_pid(dst), "ts": _ts(t1),
                        "args": {"micro_batch": mb}})
    return out
