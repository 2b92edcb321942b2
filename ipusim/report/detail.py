"""Level of detail: which events a trace shows one by one, and aggregate boxes for the rest.

A pod-scale step records millions of events, most of them the same steady
pipeline cycle again. A timeline of up to 200,000 events is shown in full;
beyond that, a step keeps in full its start up to the end
of its first ``edge`` micro-batches (the pipeline filling, the host call) and
its end from the start of its last ``edge`` micro-batches (draining, the
weight update); the first and last ``edge_steps`` steps do, the steps between
them are summarised whole. A chosen ``window_ps`` is always in full, and
``full=True`` shows every event. What is left becomes, per IPU, lane and step,
one box labelled as aggregated, over the time its events span.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ipusim.cost.cost_model import PS_PER_US
from ipusim.engine.event_kinds import KINDS
from ipusim.report import lanes

DETAIL_ENV = "IPUSIM_TRACE_DETAIL"


@dataclass(frozen=True)
class Detail:
    """How much of a timeline a trace shows event by event."""

    full: bool = False
    edge: int = 16        # micro-batches kept in full at each end of a step
    edge_steps: int = 2   # steps kept (their edges) at each end of the run
    replicas: int = 16    # replicas kept (their edges); the others' events all aggregated
    window_ps: tuple[int, int] | None = None  # [start, end) always shown in full
    full_up_to: int = 200_000  # a timeline of at most this many events is shown in full
    # Operator slices at most inside the compute slices shown: about 10 MB of trace, the
    # first replicas' first (a Pod64 BERT-Large step's edges hold some 165,000).
    operators_up_to: int = 50_000

    def __post_init__(self) -> None:
        for name in ("edge", "edge_steps", "replicas"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"Detail.{name} must be a positive integer, got {value!r}")
        for name in ("full_up_to", "operators_up_to"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"Detail.{name} must be a non-negative integer, got "
                                 f"{value!r}")
        if self.window_ps is not None and not self.window_ps[0] < self.window_ps[1]:
            raise ValueError(f"Detail.window_ps must be (start, end) with start < end, "
                             f"got {self.window_ps!r}")

    @classmethod
    def from_environment(cls) -> Detail:
        """``IPUSIM_TRACE_DETAIL``: ``full`` for every event, ``edges`` for the level of
        detail whatever the size; unset, the default (in full up to 200,000 events)."""
        setting = os.environ.get(DETAIL_ENV, "")
        if setting not in ("", "full", "edges"):
            raise ValueError(f"{DETAIL_ENV} must be 'full' or 'edges', got {setting!r}")
        return cls(full=setting == "full", full_up_to=0 if setting == "edges" else 200_000)

    def describe(self) -> str:
        if self.full:
            return "every event"
        start, end = (t / PS_PER_US for t in self.window_ps or (0, 0))
        window = "" if self.window_ps is None else f", and {start:,.3f}-{end:,.3f} µs"
        return (f"the first and last {self.edge} micro-batches of the first and last "
                f"{self.edge_steps} steps of the first {self.replicas} replicas{window} "
                f"event by event; the rest aggregated")


def _per_step(values: np.ndarray, at: np.ndarray, steps: int, how: str,
              empty: float) -> np.ndarray:
    """The ``how`` ("min" or "max") of ``values`` per step index ``at`` (``empty`` where none)."""
    out = np.full(steps, empty)
    reduced = getattr(pd.Series(values).groupby(at), how)()
    out[reduced.index.to_numpy()] = reduced.to_numpy()
    return out


def shown(events: pd.DataFrame, detail: Detail) -> np.ndarray:
    """Whether each event is shown one by one (a boolean per row)."""
    if detail.full or len(events) <= detail.full_up_to:
        return np.ones(len(events), bool)
    start, end = events["start_ps"].to_numpy(), events["end_ps"].to_numpy()
    micro_batch = events["micro_batch"].to_numpy()
    step = events["step"].to_numpy()
    first_step = int(step.min())
    step = step - first_step
    steps = int(step.max()) + 1
    # Per step: every event shown that starts before `head` or from `tail` on.
    head, tail = np.full(steps, np.inf), np.full(steps, -np.inf)
    labelled = micro_batch >= 0
    if labelled.any():
        at, mbs = step[labelled], micro_batch[labelled]
        early = mbs < _per_step(mbs, at, steps, "min", np.inf)[at] + detail.edge
        late = mbs > _per_step(mbs, at, steps, "max", -np.inf)[at] - detail.edge
        ends = _per_step(end[labelled][early], at[early], steps, "max", -np.inf)
        starts = _per_step(start[labelled][late], at[late], steps, "min", np.inf)
        head = np.where(np.isfinite(ends), ends, head)
        tail = np.where(np.isfinite(starts), starts, tail)
    index = np.arange(steps)
    middle = (index >= detail.edge_steps) & (index < steps - detail.edge_steps)
    head[middle], tail[middle] = -np.inf, np.inf
    keep = (start < head[step]) | (start >= tail[step])
    keep &= events["replica"].to_numpy() < detail.replicas
    if detail.window_ps is not None:
        low, high = detail.window_ps
        keep |= (start < high) & (end > low)
    return keep


def aggregates(events: pd.DataFrame, detail: Detail,
               keep: np.ndarray | None = None) -> pd.DataFrame:
    """The events not shown, one row per IPU, lane, step (and side of the window):
    ipu, replica, lane, step, start_ps, end_ps, events, busy_ps and kinds (a text).

    ``keep``: :func:`shown` of the events, when the caller has it already.
    """
    columns = ["ipu", "replica", "lane", "step", "start_ps", "end_ps", "events", "busy_ps",
               "kinds"]
    hidden = ~(shown(events, detail) if keep is None else keep)
    if not hidden.any():
        return pd.DataFrame(columns=columns)
    kind = events["kind"].cat.codes.to_numpy()[hidden].astype(np.int64)
    lane_of_kind = np.array([lanes.LANES.index(lanes.LANE_OF[k]) for k in KINDS])
    start = events["start_ps"].to_numpy()[hidden]
    end = events["end_ps"].to_numpy()[hidden]
    ipu = events["ipu"].to_numpy()[hidden]
    step = events["step"].to_numpy()[hidden]
    first_step, first_ipu = int(step.min()), int(ipu.min())
    side = (start >= detail.window_ps[1] if detail.window_ps is not None
            else np.zeros(len(start), bool))
    # One dense integer key per (IPU, lane, step, side): a few thousand boxes at most.
    shape = (int(ipu.max()) - first_ipu + 1, len(lanes.LANES), int(step.max()) - first_step + 1, 2)
    key = np.ravel_multi_index((ipu - first_ipu, lane_of_kind[kind], step - first_step, side),
                               shape)
    size = int(np.prod(shape))
    count = np.bincount(key, minlength=size)
    busy = np.bincount(key, weights=end - start, minlength=size)
    low = pd.Series(start).groupby(key).min()
    high = pd.Series(end).groupby(key).max()
    by_kind = np.bincount(key * len(KINDS) + kind, minlength=size * len(KINDS)).reshape(
        size, len(KINDS))
    used = np.flatnonzero(count)
    box_ipu, box_lane, box_step, _ = np.unravel_index(used, shape)
    replica_of = np.zeros(shape[0], np.int64)
    replica_of[ipu - first_ipu] = events["replica"].to_numpy()[hidden]
    return pd.DataFrame({
        "ipu": box_ipu + first_ipu,
        "replica": replica_of[box_ipu],
        "lane": [lanes.LANES[lane] for lane in box_lane.tolist()],
        "step": box_step + first_step,
        "start_ps": low.loc[used].to_numpy(), "end_ps": high.loc[used].to_numpy(),
        "events": count[used],
        "busy_ps": busy[used].astype(np.int64),
        "kinds": [", ".join(f"{KINDS[k]} ×{n:,}" for k, n in enumerate(row) if n)
                  for row in by_kind[used].tolist()],
    }, columns=columns)
