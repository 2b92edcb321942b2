"""Figures over time: each IPU's time by category and each host link's busy share, per
window of the span.

The per-IPU shares of :mod:`ipusim.analysis.metrics` are over the whole span; a
trace's counter tracks show how they change along it (the pipeline filling,
the host call between steps). The span is cut into ``windows`` equal windows,
and each figure is the share of a window an IPU or a link spends busy, exact
to the picosecond (an event straddling two windows counts in each for its part).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ipusim.analysis.metrics import intervals_joined
from ipusim.engine.event_kinds import COUNTED, HOST_TRANSFER_KINDS, kinds_of


def window_edges(events: pd.DataFrame, windows: int) -> np.ndarray:
    """``windows`` + 1 edges (integer picoseconds) cutting the span of ``events`` into
    equal windows (the last one takes the remainder)."""
    if not isinstance(windows, int) or isinstance(windows, bool) or windows < 1:
        raise ValueError(f"windows must be a positive integer, got {windows!r}")
    if events.empty:
        return np.zeros(windows + 1, np.int64)
    start, end = int(events["start_ps"].min()), int(events["end_ps"].max())
    return start + (np.arange(windows + 1, dtype=np.int64) * (end - start)) // windows


def _weighted_before(starts: np.ndarray, ends: np.ndarray, weights: np.ndarray,
                    times: np.ndarray) -> np.ndarray:
    """How much of the intervals [starts, ends), each weighted, lies before each of
    ``times``: the sum over intervals of weight x clip(t - start, 0, end - start), from the
    intervals' starts and ends sorted (the part from each start to t, less the part
    past each end)."""
    out = np.zeros(len(times))
    for points, sign in ((starts, 1), (ends, -1)):
        order = np.argsort(points, kind="stable")
        at, weight = points[order].astype(float), weights[order]
        count = np.searchsorted(at, times, side="right")
        total_weight = np.concatenate(([0.0], np.cumsum(weight)))[count]
        total_moment = np.concatenate(([0.0], np.cumsum(weight * at)))[count]
        out += sign * (total_weight * times - total_moment)
    return out


def busy_per_window(events: pd.DataFrame, groups: np.ndarray, num_groups: int,
                    edges: np.ndarray, weights: np.ndarray | None = None) -> np.ndarray:
    """Picoseconds each group (an integer per event, 0 to ``num_groups`` - 1) is busy in
    each window between ``edges`` (each picosecond of an event counted ``weights`` times,
    when given): an array of ``num_groups`` x windows."""
    origin = edges[0]  # times from the first edge: smaller sums, exact in float64 for longer
    start, end = events["start_ps"].to_numpy() - origin, events["end_ps"].to_numpy() - origin
    weights = np.ones(len(start)) if weights is None else np.asarray(weights, float)
    out = np.zeros((num_groups, len(edges) - 1))
    order = np.argsort(groups, kind="stable")
    bounds = np.searchsorted(groups[order], np.arange(num_groups + 1))
    for group in range(num_groups):
        chosen = order[bounds[group]:bounds[group + 1]]
        if len(chosen):
            out[group] = np.diff(_weighted_before(start[chosen], end[chosen], weights[chosen],
                                                 (edges - origin).astype(float)))
    return out


def category_shares_over_time(events: pd.DataFrame, num_ipus: int,
                              windows: int) -> pd.DataFrame:
    """The share of each window each IPU spends in each category of time (compute, host
    I/O, ..., the columns of :func:`ipusim.analysis.metrics.category_times` but idle):
    columns ipu, start_ps, end_ps and one per category."""
    edges = window_edges(events, windows)
    widths = np.maximum(np.diff(edges), 1)
    kind = events["kind"].astype(str).to_numpy()
    ipu = events["ipu"].to_numpy()
    shares = {}
    for category in COUNTED:
        chosen = np.isin(kind, kinds_of(category)) & (ipu >= 0) & (ipu < num_ipus)
        busy = busy_per_window(events[chosen], ipu[chosen], num_ipus, edges)
        shares[category.name] = (busy / widths).ravel()
    return pd.DataFrame({"ipu": np.repeat(np.arange(num_ipus), windows),
                         "start_ps": np.tile(edges[:-1], num_ipus),
                         "end_ps": np.tile(edges[1:], num_ipus), **shares})


def host_link_busy_over_time(events: pd.DataFrame, link_of_ipu: np.ndarray, num_links: int,
                             windows: int) -> pd.DataFrame:
    """The share of each window each host link spends moving data in each direction, and
    the bytes it moves (a copy's bytes spread evenly over its time): columns link,
    direction (an event kind), start_ps, end_ps, busy_share, bytes."""
    edges = window_edges(events, windows)
    widths = np.maximum(np.diff(edges), 1)
    rows = []
    for direction in HOST_TRANSFER_KINDS:
        copies = events[(events["kind"] == direction).to_numpy()]
        link = link_of_ipu[copies["ipu"].to_numpy()]
        # A link is busy while any of its copies runs: its IPUs' copies overlap.
        starts, ends, groups = intervals_joined(copies["start_ps"].to_numpy(),
                                                copies["end_ps"].to_numpy(), link)
        busy = busy_per_window(pd.DataFrame({"start_ps": starts, "end_ps": ends}), groups,
                               num_links, edges)
        start, end = copies["start_ps"].to_numpy(), copies["end_ps"].to_numpy()
        rate = copies["bytes"].to_numpy() / np.maximum(end - start, 1)  # bytes a picosecond
        moved = busy_per_window(copies, link, num_links, edges, weights=rate)
        for group in range(num_links):
            rows.append(pd.DataFrame({"link": group, "direction": direction,
                                      "start_ps": edges[:-1], "end_ps": edges[1:],
                                      "busy_share": busy[group] / widths,
                                      "bytes": moved[group]}))
    return pd.concat(rows, ignore_index=True)
