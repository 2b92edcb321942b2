"""The timeline as PyTorch profiler (Kineto) traces, one per IPU, for HolisticTraceAnalysis.

HolisticTraceAnalysis (HTA: ``TraceAnalysis(trace_dir=DIR)``) reads a folder of
PyTorch profiler traces, one file per rank, each naming its rank in
``distributedInfo``. ipusim's ``trace.json`` is one file for the whole system,
so these are written apart, on demand: ``ipusim trace PROFILE_DIR --hta DIR``
(or :func:`write_kineto_traces`) writes ``DIR/rank-<ipu>.json``, an IPU a rank.
They are not part of every autoReport directory: a pod has thousands of IPUs,
and each file holds all its IPU's events, whatever the trace's level of detail,
since HTA's breakdowns add them up.

Each IPU is a GPU-like device: its lanes (compute, host I/O, exchange, sync) are
its streams (``args.stream``, ``args.device``), its events ``X`` slices in µs
named so that HTA's classes of kernels are ipusim's categories of time:

- compute (forward, backward, recompute, weight update): ``cat`` "kernel", one
  per operator, named for it (``aten::addmm``) where the pass lists them and
  they fit ``Detail.operators_up_to`` for the whole run, else one per pass named
  for the pass: HTA's computation kernels;
- host copies and streaming memory: ``cat`` "gpu_memcpy", ``Memcpy HtoD`` /
  ``Memcpy DtoH`` (and the wait for a shared host link); IPU-to-IPU copies:
  ``Memcpy PtoP``: memory kernels;
- all-reduce: ``ncclDevKernel_AllReduce``, a communication kernel;
- sync waits and the host's round trip between calls: ``cat`` "cuda_sync", names
  with ``Sync``.

So HTA's temporal breakdown per rank (idle, compute, non-compute) is
:meth:`ipusim.Timeline.category_times`' idle, compute and the rest. Each kernel
has a correlation id of its own, which HTA's kernel filters need; there are no
``cuda_runtime`` launches (the host starts a whole program per call, not a
kernel at a time): the host's calls to the model are ``user_annotation`` slices
named "step", not ``ProfilerStep#N``, since HTA keeps only the kernels launched
from the CPU in all but the last profiler step. Left out: the copies on the I/O
tiles, which overlap the compute tiles' time and which ipusim's shares leave
out too.

Times are whole µs, each start and end rounded to the nearest, so that
events end to end stay so: HTA works in whole µs and rounds finer times in
(start up, end down), which would open a gap of up to 2 µs at every event and
count it idle. A share HTA reports is then ipusim's to within the rounding of
the events' ends, far below a percentage point unless events last a few µs.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ipusim.analysis.metrics import step_spans
from ipusim.analysis.timeline import Timeline
from ipusim.cost.cost_model import PS_PER_US
from ipusim.engine.event_kinds import (
    ALL_REDUCE,
    DEVICE_TO_HOST,
    HOST_CALL,
    HOST_LINK_WAIT,
    HOST_TO_DEVICE,
    IO_TILES_COPY,
    IPU_COPY,
    KIND,
    STREAM_IN,
    STREAM_OUT,
    SYNC_WAIT,
)
from ipusim.report.chrome_trace import (
    CALLS_TID,
    HOST_PID,
    LANE_TID,
    event_args,
    ipu_pid,
    meta,
    operator_layout,
    operator_pieces,
)
from ipusim.report.detail import Detail
from ipusim.report.files import write_atomically

# The Kineto category and name of each kind of event that is not compute.
KINETO_NAMES = {
    HOST_TO_DEVICE: ("gpu_memcpy", "Memcpy HtoD (Host -> IPU)"),
    DEVICE_TO_HOST: ("gpu_memcpy", "Memcpy DtoH (IPU -> Host)"),
    HOST_LINK_WAIT: ("gpu_memcpy", "Memcpy queued for the host link"),
    STREAM_IN: ("gpu_memcpy", "Memcpy HtoD (streaming memory -> IPU)"),
    STREAM_OUT: ("gpu_memcpy", "Memcpy DtoH (IPU -> streaming memory)"),
    IPU_COPY: ("gpu_memcpy", "Memcpy PtoP (IPU -> IPU)"),
    ALL_REDUCE: ("kernel", "ncclDevKernel_AllReduce (IPU-Links)"),
    SYNC_WAIT: ("cuda_sync", "Sync wait"),
    HOST_CALL: ("cuda_sync", "Sync with the host (host call)"),
}
LEFT_OUT = (IO_TILES_COPY,)


def kineto_traces(timeline: Timeline, detail: Detail | None = None) -> dict[int, dict]:
    """One PyTorch profiler trace per IPU (its rank), keyed by IPU. ``detail``: only its
    ``operators_up_to`` counts (compute kernels are operators if all of them fit)."""
    detail = Detail() if detail is None else detail
    events = timeline.events
    events = events[~events["kind"].isin(LEFT_OUT).to_numpy()]
    stage_names = [stage.name for stage in timeline.plan.stages]
    layout = operator_layout(timeline)
    kinds = events["kind"].astype(str).to_numpy()
    keys = list(zip(events["stage"].tolist(), kinds.tolist()))
    operators = sum(len(layout.get(key, ())) for key in keys)
    if operators > detail.operators_up_to:
        layout = {}
    steps = step_spans(timeline.events)
    ipu = timeline.system.ipu
    traces = {}
    correlation = 0
    by_ipu = events.groupby("ipu", sort=True).indices
    all_args = event_args(events, stage_names)
    starts, ends = events["start_ps"].to_numpy(), events["end_ps"].to_numpy()
    for rank in range(timeline.num_ipus):
        rows = by_ipu.get(rank, np.array([], np.int64))
        out = _metadata(rank)
        for step, start, end in zip(steps.index, steps["start_ps"], steps["end_ps"]):
            out.append({"ph": "X", "cat": "user_annotation", "name": "step", "pid": HOST_PID,
                        "tid": CALLS_TID, "ts": _us(start), "dur": _us(end) - _us(start),
                        "args": {"step": int(step)}})
        for row in rows.tolist():
            kind = kinds[row]
            stream = LANE_TID[KIND[kind].lane]
            pieces = _pieces(kind, keys[row], layout, int(starts[row]), int(ends[row]))
            for cat, name, low, high, extra in pieces:
                correlation += 1
                out.append({"ph": "X", "cat": cat, "name": name, "pid": ipu_pid(rank),
                            "tid": stream, "ts": _us(low), "dur": _us(high) - _us(low),
                            "args": {"device": rank, "stream": stream,
                                     "correlation": correlation, **all_args[row], **extra}})
        traces[rank] = {
            "schemaVersion": 1,
            "distributedInfo": {"backend": "ipusim", "rank": rank,
                                "world_size": timeline.num_ipus},
            "deviceProperties": [{"id": rank, "name": ipu.name, "totalGlobalMem": int(
                ipu.tiles * ipu.sram_per_tile_bytes), "numSms": ipu.tiles,
                "clockRate": int(ipu.clock_hz / 1e3)}],
            "traceEvents": out,
            "traceName": f"ipusim IPU {rank}",
            "displayTimeUnit": "ms",
        }
    return traces


def _us(ps: int) -> int:
    """Picoseconds as whole µs, rounded to the nearest (halves up)."""
    return (int(ps) + PS_PER_US // 2) // PS_PER_US


def _pieces(kind: str, key: tuple[int, str], layout: dict, start: int,
            end: int) -> list[tuple[str, str, int, int, dict]]:
    """The Kineto slices of one event: (cat, name, start, end, extra args)."""
    if kind in KINETO_NAMES:
        cat, name = KINETO_NAMES[kind]
        return [(cat, name, start, end, {})]
    if key not in layout:
        return [("kernel", kind.replace("_", " "), start, end, {})]
    return [("kernel", name, low, high, {"pass": kind, **args})
            for name, low, high, args in operator_pieces(layout[key], start, end)]


def _metadata(rank: int) -> list[dict]:
    out = [meta("process_name", HOST_PID, 0, name="Host"),
           meta("thread_name", HOST_PID, CALLS_TID, name="calls to the model (steps)"),
           meta("process_name", ipu_pid(rank), 0, name=f"IPU {rank}")]
    out += [meta("thread_name", ipu_pid(rank), stream, name=f"stream {stream} ({lane})")
            for lane, stream in LANE_TID.items()]
    return out


def write_kineto_traces(timeline: Timeline, directory: str | Path,
                        detail: Detail | None = None) -> list[Path]:
    """Write :func:`kineto_traces` to ``directory/rank-<ipu>.json`` (the folder created,
    each file atomically), and remove the rank files of IPUs this timeline does not have
    (HTA would read them too); returns their paths."""
    directory = Path(directory)
    for old in directory.glob("rank-*.json"):
        number = old.stem.removeprefix("rank-")
        if number.isdigit() and int(number) >= timeline.num_ipus:
            old.unlink()
    paths = []
    for rank, trace in kineto_traces(timeline, detail).items():
        # ": " after each key: HTA finds a file's rank by the text '"rank": N'.
        text = json.dumps(trace, separators=(",", ": "))
        paths.append(write_atomically(directory / f"rank-{rank}.json", text))
    return paths


__all__ = ["kineto_traces", "write_kineto_traces"]
