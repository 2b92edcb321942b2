"""Figures computed from the event table, never kept in parallel counters.

Every function takes the events DataFrame of :mod:`ipusim.engine.recorder`.
Per-IPU tables use unit-suffixed column names, e.g. ``busy(us)``.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ipusim.cost.cost_model import PS_PER_S, PS_PER_US
from ipusim.engine.event_kinds import (
    BACKWARD,
    COMPUTE_KINDS,
    COUNTED,
    FORWARD,
    HOST_TRANSFER_KINDS,
    IDLE,
    Category,
    kinds_of,
)

__all__ = ["COMPUTE_KINDS", "HOST_TRANSFER_KINDS", "bubble_fraction",
           "category_times", "host_io_share", "intervals_joined", "latency_ps", "per_ipu",
           "pipeline_slots", "span_ps", "step_spans", "sync_wait_share", "throughput",
           "time_by_category_ps", "utilisation"]


def span_ps(events: pd.DataFrame) -> int:
    """Simulated time from the first event's start to the last event's end."""
    if events.empty:
        return 0
    return int(events["end_ps"].max() - events["start_ps"].min())


def intervals_joined(starts: np.ndarray, ends: np.ndarray,
                     groups: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The intervals [starts, ends) of each group joined where they overlap or touch:
    (starts, ends, groups) of the disjoint intervals that cover the same time. A host
    link's copies overlap (a machine's IPUs stream at once, each on its own hop from
    the gateway), and the time the link is in use is the union of them, not the sum."""
    starts, ends, groups = (np.asarray(a, np.int64) for a in (starts, ends, groups))
    if len(starts) == 0:
        return starts, ends, groups
    order = np.lexsort((starts, groups))
    starts, ends, groups = starts[order], ends[order], groups[order]
    new_group = np.r_[True, groups[1:] != groups[:-1]]
    # The latest end so far within a group: an interval opens a new run unless it
    # starts at or before it.
    reach = np.empty_like(ends)
    for first, last in zip(*_runs(new_group)):
        reach[first:last] = np.maximum.accumulate(ends[first:last])
    opens = new_group | np.r_[True, starts[1:] > reach[:-1]]
    index = np.flatnonzero(opens)
    closing = np.r_[index[1:] - 1, len(starts) - 1]
    return starts[index], reach[closing], groups[index]


def _runs(new: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The [first, last) bounds of each run of rows that ``new`` starts."""
    first = np.flatnonzero(new)
    return first, np.r_[first[1:], len(new)]


def step_spans(events: pd.DataFrame) -> pd.DataFrame:
    """When each program step (call to the model) starts and ends: columns start_ps and
    end_ps, indexed by step."""
    grouped = events.groupby("step")
    return pd.DataFrame({"start_ps": grouped["start_ps"].min(), "end_ps": grouped["end_ps"].max()})


def _time_by_ipu(events: pd.DataFrame, kinds: tuple[str, ...], ipus: range) -> pd.Series:
    # On the columns' arrays: selecting rows of the whole table costs more than the sum.
    chosen = events["kind"].isin(kinds).to_numpy()
    durations = events["end_ps"].to_numpy()[chosen] - events["start_ps"].to_numpy()[chosen]
    ipu = events["ipu"].to_numpy()[chosen]
    inside = (ipu >= 0) & (ipu < len(ipus))
    return pd.Series(_exact_bincount(ipu[inside], durations[inside], len(ipus)), index=ipus)


def _exact_bincount(bins: np.ndarray, values: np.ndarray, length: int) -> np.ndarray:
    """Integer sums of ``values`` per bin: bincount sums its weights in float64, so each
    value is split in two halves of 26 bits whose sums float64 holds exactly."""
    high, low = np.divmod(values, 1 << 26)
    sums = [np.bincount(bins, weights=part, minlength=length).astype(np.int64)
            for part in (high, low)]
    return (sums[0] << 26) + sums[1]


def time_by_category_ps(events: pd.DataFrame, num_ipus: int,
                        categories: tuple[Category, ...] = COUNTED) -> pd.DataFrame:
    """Picoseconds each IPU spends in each of ``categories`` (columns named by category),
    grouping the kinds as :data:`ipusim.engine.event_kinds.EVENT_KINDS` says."""
    ipus = range(num_ipus)
    table = pd.DataFrame({category.name: _time_by_ipu(events, kinds_of(category), ipus)
                          for category in categories}, index=ipus)
    table.index.name = "ipu"
    return table


def per_ipu(events: pd.DataFrame, num_ipus: int) -> pd.DataFrame:
    """Time of each IPU in each category (compute, host I/O, ..., sync wait), and the
    compute, host-I/O and sync-wait shares of the span."""
    span = max(span_ps(events), 1)
    times = time_by_category_ps(events, num_ipus)
    table = times.rename(columns={c.name: c.column for c in COUNTED}) / PS_PER_US
    table["utilisation"] = table["compute(us)"] * PS_PER_US / span
    table["host_io_share"] = table["host_io(us)"] * PS_PER_US / span
    table["sync_wait_share"] = table["sync_wait(us)"] * PS_PER_US / span
    return table


def category_times(events: pd.DataFrame, num_ipus: int) -> pd.DataFrame:
    """Share of the span each IPU spends in each category, idle included (rows sum to 1).

    The same grouping as :func:`per_ipu`: the compute tiles' time; copies on the
    I/O tiles overlap it and are left out.
    """
    span = max(span_ps(events), 1)
    table = time_by_category_ps(events, num_ipus) / span
    table[IDLE.name] = (1.0 - table.sum(axis=1)).clip(lower=0.0)
    return table


def utilisation(events: pd.DataFrame, num_ipus: int) -> pd.Series:
    """Fraction of the span each IPU spends computing."""
    return per_ipu(events, num_ipus)["utilisation"]


def host_io_share(events: pd.DataFrame, num_ipus: int) -> float:
    """Mean over IPUs of the fraction of time spent in host stream copies."""
    return float(per_ipu(events, num_ipus)["host_io_share"].mean())


def sync_wait_share(events: pd.DataFrame, num_ipus: int) -> float:
    """Mean over IPUs of the fraction of time spent waiting in syncs."""
    return float(per_ipu(events, num_ipus)["sync_wait_share"].mean())


def throughput(events: pd.DataFrame, items: int) -> float:
    """Items per simulated second."""
    return rate(items, span_ps(events))


def rate(items: int, span_ps: int) -> float:
    """``items`` over ``span_ps`` picoseconds, per second (0 for an empty span)."""
    return items * PS_PER_S / span_ps if span_ps else 0.0


def pipeline_slots(events: pd.DataFrame, depth: int, micro_batches_per_run: int) -> pd.DataFrame:
    """Occupied (pipeline stage, cycle) slots of every pipeline run, for a pipeline of
    ``depth`` (P) stages and ``micro_batches_per_run`` (N); both are the engine plan's.

    Columns: replica, step, run, cycle, pipeline_stage. A run is one fill and
    flush of the pipeline: a device iteration in training, a call in inference.
    """
    compute = events[(events["pipeline_cycle"] >= 0) & events["kind"].isin((FORWARD, BACKWARD))]
    backward = compute["kind"] == BACKWARD  # stage k's backward is pipeline stage P - 1 - k
    pipeline_stage = compute["stage"].where(~backward, depth - 1 - compute["stage"])
    slots = pd.DataFrame({
        "replica": compute["replica"],
        "step": compute["step"],
        "run": compute["micro_batch"] // micro_batches_per_run,
        "pipeline_cycle": compute["pipeline_cycle"],
        "pipeline_stage": pipeline_stage,
    })
    return slots.drop_duplicates().reset_index(drop=True)


def bubble_fraction(events: pd.DataFrame, depth: int, micro_batches_per_run: int) -> float:
    """PopART's pipeline bubble: the share of (stage, cycle) slots left idle.

    For N micro-batches through P pipeline stages it is (P - 1) / (N + P - 1).
    """
    slots = pipeline_slots(events, depth, micro_batches_per_run)
    if slots.empty:
        return 0.0
    cycles = slots.groupby(["replica", "step", "run"])["pipeline_cycle"].nunique().sum()
    return 1.0 - len(slots) / (depth * cycles)


def latency_ps(events: pd.DataFrame) -> float:
    """Mean time one micro-batch takes through the system, host copies included."""
    tied = events[events["micro_batch"] >= 0]
    if tied.empty:
        return 0.0
    keys = ["replica", "step", "micro_batch"]
    spans = tied.groupby(keys)["end_ps"].max() - tied.groupby(keys)["start_ps"].min()
    return float(spans.mean())
