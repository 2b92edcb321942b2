"""Ramp-up, main and ramp-down phases of a pipeline, and one micro-batch's path.

PopART runs N micro-batches through P pipeline stages in N + P - 1 cycles:
P - 1 cycles of ramp-up while the pipeline fills, N - P + 1 cycles with every
stage busy, and P - 1 cycles of ramp-down while it drains (P and N are the
engine plan's :attr:`~ipusim.plan.engine_plan.EnginePlan.pipeline_depth` and
:attr:`~ipusim.plan.engine_plan.EnginePlan.micro_batches_per_run`). The cycles come from
the event table's ``cycle`` column; their simulated times from the events tied
to a micro-batch within each cycle. Each is read through a :class:`ipusim.Timeline`
method; the reports only draw them.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import pandas as pd

if TYPE_CHECKING:
    from ipusim.analysis.timeline_view import TimelineView

PHASES = ("ramp-up", "main", "ramp-down")
PHASE_COLUMNS = ["step", "run", "phase", "first_pipeline_cycle", "last_pipeline_cycle",
                 "start_ps", "end_ps"]


def pipeline_cycle_times(timeline: TimelineView) -> pd.DataFrame:
    """Start and end of every pipeline cycle, over all replicas.

    Columns: step, run, cycle, start_ps, end_ps.
    """
    events = timeline.events
    tied = events[(events["pipeline_cycle"] >= 0) & (events["micro_batch"] >= 0)]
    keys = [tied["step"], tied["micro_batch"] // timeline.plan.micro_batches_per_run,
            tied["pipeline_cycle"]]
    grouped = tied.groupby(keys)
    table = pd.DataFrame({"start_ps": grouped["start_ps"].min(), "end_ps": grouped["end_ps"].max()})
    table.index.names = ["step", "run", "pipeline_cycle"]
    return table.reset_index()


def pipeline_phases(timeline: TimelineView) -> pd.DataFrame:
    """One row per phase of every pipeline run: its cycles and the time it spans.

    Phases are contiguous: each ends where the next one's first cycle starts,
    and ramp-down ends with the last event of its last cycle. Empty when the
    run is not pipelined.
    """
    depth = timeline.plan.pipeline_depth
    if depth == 0 or timeline.events.empty:
        return pd.DataFrame(columns=PHASE_COLUMNS)
    n = timeline.plan.micro_batches_per_run
    bounds = [("ramp-up", 0, depth - 2), ("main", depth - 1, n - 1),
              ("ramp-down", n, n + depth - 2)]
    rows = []
    for (step, run), cycles in pipeline_cycle_times(timeline).groupby(["step", "run"]):
        start = dict(zip(cycles["pipeline_cycle"], cycles["start_ps"]))
        end = dict(zip(cycles["pipeline_cycle"], cycles["end_ps"]))
        for phase, first, last in bounds:
            if last < first:  # a one-stage pipeline has no ramps
                continue
            phase_end = start[last + 1] if last + 1 in start else end[last]
            rows.append((step, run, phase, first, last, start[first], phase_end))
    return pd.DataFrame(rows, columns=PHASE_COLUMNS)


class LatencyPath(NamedTuple):
    """One micro-batch from its first event (its input copy) to its last."""

    replica: int
    step: int
    micro_batch: int
    start_ps: int
    end_ps: int

    @property
    def latency_ps(self) -> int:
        return self.end_ps - self.start_ps


def latency_path(timeline: TimelineView, step: int | None = None) -> LatencyPath | None:
    """The micro-batch Fig 4.1 highlights, in ``step`` (default: the first) of replica 0.

    In a pipeline it is micro-batch P - 1, the first to enter once the
    pipeline is full; otherwise micro-batch 0. None when no event is tied to
    a micro-batch.
    """
    events = timeline.events
    tied = events[(events["micro_batch"] >= 0) & (events["replica"] == 0)]
    if tied.empty:
        return None
    step = int(tied["step"].min()) if step is None else step
    tied = tied[tied["step"] == step]
    if tied.empty:
        return None
    wanted = max(timeline.plan.pipeline_depth - 1, 0)
    micro_batch = min(wanted, int(tied["micro_batch"].max()))
    mine = tied[tied["micro_batch"] == micro_batch]
    return LatencyPath(0, step, micro_batch, int(mine["start_ps"].min()), int(mine["end_ps"].max()))
