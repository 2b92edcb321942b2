"""Level of detail: which events a trace shows one by one, and aggregate boxes for the rest.

A pod-scale step records millions of events, most of them the same steady
pipeline cycle again. By default a step keeps in full its start up to the end
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

from ipusim.recorder import KINDS
from ipusim.report import lanes

DETAIL_ENV = "IPUSIM_TRACE_DETAIL"


@dataclass(frozen=True)
class Detail:
    """How much of a timeline a trace shows event by event."""

    full: bool = False
    edge: int = 16        # micro-batches kept in full at each end of a step
    edge_steps: int = 2   # steps kept (their edges) at each end of the run
    window_ps: tuple[int, int] | None = None  # [start, end) always shown in full

    def __post_init__(self) -> None:
        for name in ("edge", "edge_steps"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"Detail.{name} must be a positive integer, got {value!r}")
        if self.window_ps is not None and not self.window_ps[0] < self.window_ps[1]:
            raise ValueError(f"Detail.window_ps must be (start, end) with start < end, "
                             f"got {self.window_ps!r}")

    @classmethod
    def from_environment(cls) -> "Detail":
        """``IPUSIM_TRACE_DETAIL=full`` asks for every event; default detail otherwise."""
        return cls(full=os.environ.get(DETAIL_ENV, "") == "full")

    def describe(self) -> str:
        if self.full:
            return "every event"
        window = ("" if self.window_ps is None else
                  f", and {self.window_ps[0] / 1e6:,.3f}-{self.window_ps[1] / 1e6:,.3f} µs")
        return (f"the first and last {self.edge} micro-batches of the first and last "
                f"{self.edge_steps} steps{window} event by event; the rest aggregated")


def shown(events: pd.DataFrame, detail: Detail) -> np.ndarray:
    """Whether each event is shown one by one (a boolean per row)."""
    if detail.full or events.empty:
        return np.ones(len(events), bool)
    start, end = events["start_ps"].to_numpy(), events["end_ps"].to_numpy()
    micro_batch = events["micro_batch"].to_numpy()
    steps, step = np.unique(events["step"].to_numpy(), return_inverse=True)
    # Per step: every event shown that starts before `head` or from `tail` on.
    head, tail = np.full(len(steps), np.inf), np.full(len(steps), -np.inf)
    labelled = micro_batch >= 0
    if labelled.any():
        at, mbs = step[labelled], micro_batch[labelled]
        by_step = pd.Series(mbs).groupby(at)
        early = mbs < by_step.transform("min").to_numpy() + detail.edge
        late = mbs > by_step.transform("max").to_numpy() - detail.edge
        ends = pd.Series(end[labelled][early]).groupby(at[early]).max()
        head[ends.index] = ends.to_numpy()
        starts = pd.Series(start[labelled][late]).groupby(at[late]).min()
        tail[starts.index] = starts.to_numpy()
    middle = (np.arange(len(steps)) >= detail.edge_steps) & \
        (np.arange(len(steps)) < len(steps) - detail.edge_steps)
    head[middle], tail[middle] = -np.inf, np.inf
    keep = (start < head[step]) | (start >= tail[step])
    if detail.window_ps is not None:
        low, high = detail.window_ps
        keep |= (start < high) & (end > low)
    return keep


def aggregates(events: pd.DataFrame, detail: Detail) -> pd.DataFrame:
    """The events not shown, one row per IPU, lane, step (and side of the window):
    ipu, replica, lane, step, start_ps, end_ps, events, busy_ps and kinds (a text)."""
    columns = ["ipu", "replica", "lane", "step", "start_ps", "end_ps", "events", "busy_ps",
               "kinds"]
    hidden = ~shown(events, detail)
    if not hidden.any():
        return pd.DataFrame(columns=columns)
    kind = events["kind"].cat.codes.to_numpy()[hidden]
    lane_of_kind = np.array([lanes.LANES.index(lanes.LANE_OF[k]) for k in KINDS])
    start = events["start_ps"].to_numpy()[hidden]
    end = events["end_ps"].to_numpy()[hidden]
    keys = {"ipu": events["ipu"].to_numpy()[hidden],
            "replica": events["replica"].to_numpy()[hidden],
            "lane": lane_of_kind[kind], "step": events["step"].to_numpy()[hidden],
            "side": (start >= detail.window_ps[1] if detail.window_ps is not None
                     else np.zeros(len(start), bool))}
    table = pd.DataFrame({**keys, "kind": kind, "start_ps": start, "end_ps": end,
                          "busy_ps": end - start})
    grouped = table.groupby(list(keys))
    boxes = grouped.agg(start_ps=("start_ps", "min"), end_ps=("end_ps", "max"),
                        events=("start_ps", "size"), busy_ps=("busy_ps", "sum"))
    counts = table.groupby(list(keys) + ["kind"]).size()
    texts: dict[tuple, list[str]] = {}
    for (*key, code), count in counts.items():
        texts.setdefault(tuple(key), []).append(f"{KINDS[code]} ×{count:,}")
    boxes["kinds"] = [", ".join(texts[key]) for key in boxes.index]
    boxes = boxes.reset_index()
    boxes["lane"] = [lanes.LANES[code] for code in boxes["lane"]]
    return boxes[columns]
