"""Figures of a whole timeline: the headline figures, cycles per program step and per
kind, memory per IPU and per stage, host-link occupancy, stage times, and each
micro-batch's input and output times.

Each is computed here once and read through :class:`ipusim.Timeline`'s methods;
the reports in :mod:`ipusim.report` only format and draw them. The figures of
the event table alone (spans, shares per IPU, pipeline slots) are in
:mod:`ipusim.analysis.metrics`.
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ipusim.analysis.metrics import intervals_joined, span_ps, step_spans, time_by_category_ps
from ipusim.cost import cost_model
from ipusim.cost.cost_model import PS_PER_MS, PS_PER_US
from ipusim.cost.work import Work
from ipusim.engine.event_kinds import (
    COMPUTE_KINDS,
    DEVICE_TO_HOST,
    FORWARD,
    HOST_CALL_TIME,
    HOST_TO_DEVICE,
    HOST_TRANSFER_KINDS,
    KINDS,
)
from ipusim.plan import memory
from ipusim.plan.memory import MEMORY_PARTS, MemoryModel

if TYPE_CHECKING:
    from ipusim.analysis.timeline_view import TimelineView

# The headline figures Timeline.summary() shows, in the units a person reads them.
SUMMARY_FIGURES = ("items", "duration(ms)", "throughput(items/s)", "latency(us)", "utilisation",
                   "bubble_fraction", "host_io_share", "sync_wait_share")
# Those an autoReport directory keeps (profile.json's "figures").
REPORTED_FIGURES = SUMMARY_FIGURES + ("host_link_occupancy", "steps", "step_time(ms)", "ipus")


def headline_figures(timeline: TimelineView) -> dict[str, float]:
    """Every headline figure of ``timeline``, unit-suffixed (counts as ints, the rest as
    floats): the one source of :meth:`~ipusim.Timeline.summary`, the reports' figures and
    the bottleneck verdict."""
    shares = timeline.per_ipu()[["utilisation", "host_io_share", "sync_wait_share"]].mean()
    return {
        "items": timeline.items,
        "duration(ms)": timeline.duration_ps / PS_PER_MS,
        "throughput(items/s)": timeline.throughput(),
        "latency(us)": timeline.latency_ps() / PS_PER_US,
        "utilisation": float(shares["utilisation"]),
        "bubble_fraction": float(timeline.bubble_fraction()),
        "host_io_share": float(shares["host_io_share"]),
        "sync_wait_share": float(shares["sync_wait_share"]),
        "host_link_occupancy": host_link_occupancy(timeline),
        "host_round_trip_share": host_round_trip_share(timeline),
        "steps": timeline.steps,
        "step_time(ms)": timeline.duration_ps / PS_PER_MS / timeline.steps if timeline.steps
        else 0.0,
        "ipus": timeline.num_ipus,
    }


def delivered_items_per_s(device_items_per_s: float,
                          loader_items_per_s: float | None) -> float:
    """The run's one throughput: the IPUs' own, or the data loader's where that is lower
    (the IPUs then wait for data). What the what-ifs, the reports, their index and the
    exit line all give."""
    if loader_items_per_s is None:
        return device_items_per_s
    return min(device_items_per_s, loader_items_per_s)


def reported_figures(timeline: TimelineView) -> dict[str, float]:
    """The headline figures an autoReport directory keeps, as plain floats."""
    figures = timeline.figures()
    return {name: float(figures[name]) for name in REPORTED_FIGURES}


def host_link_occupancy(timeline: TimelineView) -> float:
    """Busiest host link's share of the span spent moving data, in either direction."""
    events = timeline.events
    span = span_ps(events)
    copies = events[events["kind"].isin(HOST_TRANSFER_KINDS)]
    if copies.empty or span == 0:
        return 0.0
    # One group per link and direction; a link's copies overlap where its IPUs stream
    # at once, so its busy time is their union.
    link = np.asarray(timeline.system.host_link_of(copies["ipu"].to_numpy()), np.int64)
    direction = (copies["kind"].astype(str) == DEVICE_TO_HOST).to_numpy()
    starts, ends, groups = intervals_joined(copies["start_ps"].to_numpy(),
                                            copies["end_ps"].to_numpy(), 2 * link + direction)
    return float(np.bincount(groups, weights=ends - starts).max() / span)


def host_round_trip_share(timeline: TimelineView) -> float:
    """The IPUs' mean share of the span spent waiting for the host between calls (the
    host call column of :func:`ipusim.analysis.metrics.category_times`, alone)."""
    waits = time_by_category_ps(timeline.events, timeline.num_ipus, (HOST_CALL_TIME,))
    return float((waits[HOST_CALL_TIME.name] / max(span_ps(timeline.events), 1)).mean())


def stage_times_us(timeline: TimelineView) -> dict[int, float]:
    """Mean compute time of each stage per micro-batch (forward, recompute and backward)."""
    events = timeline.events
    compute = events[events["kind"].isin(COMPUTE_KINDS) & (events["micro_batch"] >= 0)]
    if compute.empty:
        return {}
    per_micro_batch = (compute["end_ps"] - compute["start_ps"]).groupby(
        [compute["stage"], compute["replica"], compute["step"], compute["micro_batch"]]).sum()
    means = per_micro_batch.groupby(level=0).mean()
    return {int(stage): float(t) / PS_PER_US for stage, t in means.items()}


def to_cycles(ps: float, timeline: TimelineView) -> int:
    """Simulated picoseconds as cycles of the IPU clock."""
    return cost_model.to_cycles(ps, timeline.system.ipu.clock_hz)


MICRO_BATCH_IO_COLUMNS = ["input_start_ps", "input_end_ps", "output_ready_ps", "output_end_ps",
                          "returned"]


def micro_batch_io(timeline: TimelineView, step: int | None = None) -> pd.DataFrame:
    """When each micro-batch of ``step`` (default: the last) of replica 0 came in and went out.

    One row per micro-batch (the index), in picoseconds (as floats): its input
    copy's start and end (with synthetic data there is none: its first event),
    when its last forward ended (its outputs ready), when they reached the host
    (when ready, if the output mode sends nothing), and whether the output mode
    returns them. PopTorch's performance counters and latency are read off this
    table.
    """
    events = timeline.events
    if events.empty:
        return pd.DataFrame(columns=MICRO_BATCH_IO_COLUMNS)
    step = int(events["step"].max()) if step is None else step
    mine = events[(events["step"] == step) & (events["replica"] == 0)
                  & (events["micro_batch"] >= 0)]
    first = mine.groupby("micro_batch")["start_ps"].min().astype("float64")

    def of(kind: str, column: str, reduce: str) -> pd.Series:
        chosen = mine[mine["kind"] == kind].groupby("micro_batch")[column].agg(reduce)
        return chosen.reindex(first.index).astype("float64")

    ready = of(FORWARD, "end_ps", "max")
    table = pd.DataFrame({
        "input_start_ps": of(HOST_TO_DEVICE, "start_ps", "min").fillna(first),
        "input_end_ps": of(HOST_TO_DEVICE, "end_ps", "max").fillna(first),
        "output_ready_ps": ready,
        "output_end_ps": of(DEVICE_TO_HOST, "end_ps", "max").fillna(ready),
        "returned": first.index.isin(timeline.plan.returned_micro_batches),
    })
    return table[MICRO_BATCH_IO_COLUMNS]


def step_cycles(timeline: TimelineView) -> pd.DataFrame:
    """Cycles of every program step (call to the model), and per kind of event.

    Columns: step, start_cycle, cycles, duration(us), then one ``<kind>_cycles``
    column per kind: the cycles an IPU spent on that kind in the step, as a
    mean over the engine's IPUs.
    """
    events = timeline.events
    spans = step_spans(events)
    start, end = spans["start_ps"], spans["end_ps"]
    table = pd.DataFrame({
        "start_cycle": [to_cycles(ps, timeline) for ps in start],
        "cycles": [to_cycles(ps, timeline) for ps in end - start],
        "duration(us)": (end - start) / PS_PER_US,
    }, index=start.index)
    busy = (events["end_ps"] - events["start_ps"]).groupby(
        [events["step"], events["kind"].astype(str)]).sum().unstack(fill_value=0)
    busy = busy.reindex(columns=[k for k in KINDS if k in busy.columns])
    for kind in busy.columns:
        table[f"{kind}_cycles"] = [to_cycles(ps / timeline.num_ipus, timeline) for ps in busy[kind]]
    table.index.name = "step"
    return table.reset_index()


def cycles_by_kind(steps: pd.DataFrame) -> pd.Series:
    """The cycles of :func:`step_cycles` summed over its steps, per kind of event (a mean
    over the engine's IPUs), indexed by kind."""
    columns = [c for c in steps.columns if c.endswith("_cycles") and c != "start_cycle"]
    totals = steps[columns].sum()
    totals.index = [name.removesuffix("_cycles") for name in columns]
    return totals


def grouped_steps(steps: pd.DataFrame) -> pd.DataFrame:
    """The program steps of :func:`step_cycles`, consecutive steps of equal cycles on
    one row: steps ("0-9"), count, start_cycle of the first, cycles and duration(us) of
    each."""
    run = (steps["cycles"] != steps["cycles"].shift()).cumsum()
    grouped = steps.groupby(run, sort=False).agg(
        first=("step", "min"), last=("step", "max"), count=("step", "size"),
        start_cycle=("start_cycle", "min"), cycles=("cycles", "first"),
        duration=("duration(us)", "first"))
    label = grouped["first"].astype(str).where(
        grouped["count"] == 1, grouped["first"].astype(str) + "-" + grouped["last"].astype(str))
    return pd.DataFrame({"steps": label.to_numpy(), "count": grouped["count"].to_numpy(),
                         "start_cycle": grouped["start_cycle"].to_numpy(),
                         "cycles": grouped["cycles"].to_numpy(),
                         "duration(us)": grouped["duration"].to_numpy()})


def memory_per_ipu(timeline: TimelineView, model: MemoryModel = MemoryModel()) -> pd.DataFrame:
    """Bytes each IPU of one replica needs, by category, against its capacity
    (:func:`ipusim.plan.memory.memory_per_ipu`), and the share of the capacity it uses."""
    table = memory.memory_per_ipu(timeline.work, timeline.run, timeline.system, model,
                                  timeline.plan)
    table["used"] = table["total"] / table["capacity"]
    return table


def memory_per_stage(timeline: TimelineView, model: MemoryModel = MemoryModel()) -> pd.DataFrame:
    """Bytes each (merged) stage needs, by category, without the per-IPU runtime code.

    Each stage is what :func:`ipusim.plan.memory.memory_per_ipu` counts for it on
    its IPU: measured by placing every stage on an IPU of its own.
    """
    merged = timeline.plan.work
    alone = Work(tuple(replace(stage, ipu=k) for k, stage in enumerate(merged.stages)),
                 merged.micro_batch_size, merged.input_bytes_per_sample,
                 merged.output_bytes_per_sample)
    table = memory.memory_per_ipu(alone, timeline.run, timeline.system, model)
    table["code"] -= model.code_bytes_per_tile * timeline.system.ipu.tiles
    table["total"] = table[list(MEMORY_PARTS)].sum(axis=1)
    table.insert(0, "ipu", [stage.ipu for stage in merged.stages])
    table.insert(0, "name", [stage.name for stage in merged.stages])
    table.index.name = "stage"
    return table.drop(columns="capacity")
