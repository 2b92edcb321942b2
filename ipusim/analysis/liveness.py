"""What is live at each program step: PopVision's liveness view, of one simulated step.

The always-live variables (:func:`~ipusim.analysis.graph_variables.always_live_variables`)
occupy their memory for the whole program; each other variable from the first
program step that writes it to the last that reads it
(:func:`~ipusim.analysis.graph_variables.live_ranges`). Poplar gives each program
step the bytes of the not-always-live variables live there; the peak of them, added
to the always-live bytes, is what the program needs. Per tile, the peak over the
steps of what is live on that tile is what the tile must hold besides its
always-live variables.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from ipusim.analysis.graph_variables import LiveRange
from ipusim.analysis.program_steps import StepTable
from ipusim.analysis.tile_memory import tile_bytes


def not_always_live_bytes(steps: StepTable, ranges: list[LiveRange], ipus: int) -> pd.DataFrame:
    """Bytes of the not-always-live variables live at each step, one row a step (columns
    ``step``, ``bytes``: on all IPUs of the replica, and ``ipu<i>``: on each)."""
    count = len(steps)
    per_ipu = np.zeros((ipus, count + 1), dtype=np.int64)
    for live in ranges:
        per_ipu[live.variable.ipu, live.first] += live.variable.bytes
        per_ipu[live.variable.ipu, live.last + 1] -= live.variable.bytes
    per_ipu = np.cumsum(per_ipu, axis=1)[:, :count]
    table = pd.DataFrame({"step": np.arange(count), "bytes": per_ipu.sum(axis=0)})
    for ipu in range(ipus):
        table[f"ipu{ipu}"] = per_ipu[ipu]
    return table


class Peak(NamedTuple):
    """The program step where the most not-always-live memory is live: its index and name,
    those bytes, and the variables live there, largest first."""

    step: int
    name: str
    bytes: int
    variables: tuple[str, ...]


def peak(steps: StepTable, ranges: list[LiveRange], ipus: int) -> Peak | None:
    """The peak of :func:`not_always_live_bytes` and what is live there (None without
    steps)."""
    if not len(steps):
        return None
    table = not_always_live_bytes(steps, ranges, ipus)
    at = int(table["bytes"].idxmax())
    live = sorted(((r.variable.bytes, r.variable.name) for r in ranges if r.first <= at <= r.last),
                  reverse=True)
    return Peak(at, steps.step(at).name, int(table.loc[at, "bytes"]),
                tuple(name for _, name in live))


def peak_per_tile(ranges: list[LiveRange], tiles: int, ipus: int) -> dict[int, np.ndarray]:
    """For each IPU, the most not-always-live bytes each tile holds at any one step: the
    live sets are swept from boundary to boundary (where a variable starts or ends), the
    tiles' bytes updated and their maximum kept."""
    out = {}
    for ipu in range(ipus):
        own = [r for r in ranges if r.variable.ipu == ipu]
        placed = [tile_bytes(r.variable, tiles) for r in own]
        changes: dict[int, list[tuple[int, int]]] = {}
        for index, live in enumerate(own):
            changes.setdefault(live.first, []).append((index, 1))
            changes.setdefault(live.last + 1, []).append((index, -1))
        current = np.zeros(tiles, dtype=np.int64)
        highest = np.zeros(tiles, dtype=np.int64)
        for at in sorted(changes):
            for index, sign in changes[at]:
                current += sign * placed[index]
            np.maximum(highest, current, out=highest)
        out[ipu] = highest
    return out


def liveness_windows(liveness: pd.DataFrame, windows: int = 2000) -> pd.DataFrame:
    """:func:`not_always_live_bytes` in at most ``windows`` windows of consecutive steps, for
    a chart: each window's first and last step and the most bytes live in it (the peak
    is kept whatever the window)."""
    count = len(liveness)
    edges = np.unique(np.linspace(0, count, min(windows, count) + 1).astype(np.int64))
    if count == 0:
        return pd.DataFrame({"first": [], "last": [], "bytes": []})
    starts = edges[:-1]
    return pd.DataFrame({"first": starts, "last": edges[1:] - 1,
                         "bytes": np.maximum.reduceat(liveness["bytes"].to_numpy(), starts)})
