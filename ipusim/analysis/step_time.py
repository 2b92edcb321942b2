"""Where a run's step time goes: each IPU's time cut into parts that add up to the span.

Every IPU is somewhere for the whole of a run, from its first event to its
last: computing, exchanging with other IPUs, streaming, copying to or from
the host, waiting for the host between calls, waiting in a sync, or idle.
:func:`step_time_by_ipu` cuts each IPU's span into the parts of
:data:`STEP_PARTS`, which do not overlap, so that every row adds up to the span
exactly (in integer picoseconds). The compute tiles' categories of
:mod:`ipusim.engine.event_kinds` give the parts; in a pipeline the waiting
(sync wait and idle) during ramp-up and ramp-down, when the pipeline is not
full (:func:`ipusim.analysis.pipeline_phases.pipeline_phases`), is the
pipeline's bubble rather than a sync's.

The mean of a part over the IPUs, divided by the steps, is that part's share
of the mean step time (span / steps); as each IPU's parts add up to the span,
these shares add up to the step time, and two runs' differences add up to the
difference of their step times (:mod:`ipusim.analysis.comparison`'s parts, the
compare page's waterfall).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ipusim.analysis.metrics import span_ps, time_by_category_ps
from ipusim.analysis.pipeline_phases import pipeline_phases
from ipusim.engine.event_kinds import (
    COMPUTE_TIME,
    COUNTED,
    HOST_CALL_TIME,
    HOST_IO_TIME,
    IPU_COPY_TIME,
    STREAMING_TIME,
    SYNC_WAIT,
    SYNC_WAIT_TIME,
    kinds_of,
)

if TYPE_CHECKING:
    from ipusim.analysis.timeline_view import TimelineView


@dataclass(frozen=True)
class StepPart:
    """A part of the step time: its column, how reports name it (in a few words and in
    full), and whether a report leaves it out when it is zero in every run it shows."""

    name: str
    short: str
    label: str
    colour: str
    optional: bool = False


COMPUTE = StepPart("compute", "compute", "compute", COMPUTE_TIME.colour)
EXCHANGE = StepPart("exchange", "exchange", "exchange (IPU-to-IPU copies, all-reduce)",
                    IPU_COPY_TIME.colour)
STREAMING = StepPart("streaming", "streaming", "streaming memory", STREAMING_TIME.colour,
                     optional=True)
HOST_IO = StepPart("host_io", "host I/O", "host I/O (stream copies)", HOST_IO_TIME.colour)
SYNC = StepPart("sync_wait", "sync wait", "sync wait", SYNC_WAIT_TIME.colour)
BUBBLE = StepPart("pipeline_bubble", "pipeline bubble",
                  "pipeline bubble (waiting in ramp-up / ramp-down)", "#e377c2")
HOST_ROUND_TRIP = StepPart("host_round_trip", "host round trip",
                           "host round trip (between calls)", HOST_CALL_TIME.colour)
IDLE = StepPart("idle", "other / idle", "other / idle (no event)", "#dbdb8d", optional=True)
#: The parts, in the order the reports stack and list them.
STEP_PARTS = (COMPUTE, EXCHANGE, STREAMING, HOST_IO, SYNC, BUBBLE, HOST_ROUND_TRIP, IDLE)

# Which compute-tile category each part but the bubble and idle is made of.
_CATEGORY = {COMPUTE: COMPUTE_TIME, EXCHANGE: IPU_COPY_TIME, STREAMING: STREAMING_TIME,
             HOST_IO: HOST_IO_TIME, SYNC: SYNC_WAIT_TIME, HOST_ROUND_TRIP: HOST_CALL_TIME}
assert set(_CATEGORY.values()) == set(COUNTED), "every counted category has its part"


def step_time_by_ipu(timeline: TimelineView) -> pd.DataFrame:
    """Picoseconds each IPU spends in each part of :data:`STEP_PARTS` over the whole run
    (int64; index ipu, one column per part): each row adds up to the span exactly.

    Idle is what no counted event covers; the bubble is the sync wait and idle
    time inside the pipeline's ramp-up and ramp-down phases (zero unless pipelined).
    """
    events, ipus = timeline.events, timeline.num_ipus
    span = span_ps(events)
    by_category = time_by_category_ps(events, ipus)
    table = pd.DataFrame({part.name: by_category[category.name].astype(np.int64)
                          for part, category in _CATEGORY.items()}, index=by_category.index)
    idle = span - table.sum(axis=1)
    starts, ends = _ramps(timeline)
    counted = set().union(*(kinds_of(category) for category in COUNTED))
    in_ramps = _overlap_by_ipu(events, counted, starts, ends, ipus)
    sync_in_ramps = _overlap_by_ipu(events, {SYNC_WAIT}, starts, ends, ipus)
    idle_in_ramps = int((ends - starts).sum()) - in_ramps
    table[SYNC.name] -= sync_in_ramps
    table[BUBBLE.name] = sync_in_ramps + idle_in_ramps
    table[IDLE.name] = idle.to_numpy() - idle_in_ramps
    table = table[[part.name for part in STEP_PARTS]]
    table.index.name = "ipu"
    return table


def _ramps(timeline: TimelineView) -> tuple[np.ndarray, np.ndarray]:
    """The ramp-up and ramp-down phases of every pipeline run, as sorted, disjoint
    [start, end) intervals (picoseconds); none unless pipelined."""
    phases = pipeline_phases(timeline)
    ramps = phases[phases["phase"] != "main"].sort_values("start_ps")
    merged: list[list[int]] = []
    for start, end in zip(ramps["start_ps"].astype(np.int64), ramps["end_ps"].astype(np.int64)):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        elif end > start:
            merged.append([start, end])
    bounds = np.array(merged, dtype=np.int64).reshape(-1, 2)
    return bounds[:, 0], bounds[:, 1]


def _overlap_by_ipu(events: pd.DataFrame, kinds: set[str], starts: np.ndarray,
                    ends: np.ndarray, ipus: int) -> np.ndarray:
    """Picoseconds of each IPU's events of ``kinds`` inside the intervals (int64)."""
    chosen = events["kind"].isin(kinds).to_numpy()
    ipu = events["ipu"].to_numpy()[chosen]
    inside = (ipu >= 0) & (ipu < ipus)
    if not len(starts) or not inside.any():
        return np.zeros(ipus, dtype=np.int64)
    begin = events["start_ps"].to_numpy()[chosen][inside].astype(np.int64)
    end = events["end_ps"].to_numpy()[chosen][inside].astype(np.int64)
    covered = _inside_before(end, starts, ends) - _inside_before(begin, starts, ends)
    totals = np.zeros(ipus, dtype=np.int64)
    np.add.at(totals, ipu[inside], covered)
    return totals


def _inside_before(times: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """How much of the disjoint, sorted intervals [starts, ends) lies before each of
    ``times``, in whole picoseconds (int64, exact: each IPU's parts add up to the span;
    :func:`ipusim.analysis.over_time._weighted_before` sums overlapping weighted intervals
    in floats)."""
    lengths = ends - starts
    before = np.concatenate(([0], np.cumsum(lengths)))
    k = np.searchsorted(starts, times, side="right") - 1
    within = np.clip(times - starts[np.maximum(k, 0)], 0, lengths[np.maximum(k, 0)])
    return np.where(k < 0, 0, before[np.maximum(k, 0)] + within)
