"""Where each kind of event is drawn, in what colour, under which label.

The timeline, the utilisation chart and the Chrome trace share one mapping
from event kind to lane (the row of an IPU it is drawn in) and to category
(the slice of time it counts towards), so the three views always agree.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ipusim.recorder import COMPUTE_KINDS

LANES = ("compute", "host I/O", "exchange / streaming", "sync")

LANE_OF = {
    "forward": "compute", "backward": "compute", "recompute": "compute",
    "weight_update": "compute",
    "host_to_device": "host I/O", "device_to_host": "host I/O", "host_call": "host I/O",
    "host_link_wait": "host I/O",
    "ipu_copy": "exchange / streaming", "all_reduce": "exchange / streaming",
    "stream_in": "exchange / streaming", "stream_out": "exchange / streaming",
    "sync_wait": "sync", "io_tiles_copy": "host I/O",
}

# Categories of IPU time for the utilisation chart, in stacking order.
CATEGORY_OF = {
    "forward": "compute", "backward": "compute", "recompute": "compute",
    "weight_update": "compute",
    "host_to_device": "host I/O", "device_to_host": "host I/O", "host_link_wait": "host I/O",
    "host_call": "host call",
    "ipu_copy": "IPU copies", "all_reduce": "IPU copies",
    "stream_in": "streaming memory", "stream_out": "streaming memory",
    "sync_wait": "sync wait",
    "io_tiles_copy": "I/O tiles (overlapped)",
}
# The compute tiles' time, which the utilisation chart stacks; copies on the
# I/O tiles overlap it and are left out of the shares.
CATEGORIES = ("compute", "host I/O", "host call", "IPU copies", "streaming memory",
              "sync wait", "idle")

COLOURS = {
    "forward": "#1f77b4", "backward": "#ff7f0e", "recompute": "#9467bd",
    "weight_update": "#2ca02c",
    "host_to_device": "#17becf", "device_to_host": "#0e7c86", "host_call": "#7f7f7f",
    "host_link_wait": "#b3e7ee",
    "ipu_copy": "#8c564b", "all_reduce": "#d62728",
    "stream_in": "#bcbd22", "stream_out": "#8a8b0f",
    "sync_wait": "#c7c7c7", "io_tiles_copy": "#9edae5",
}
CATEGORY_COLOURS = {
    "compute": "#1f77b4", "host I/O": "#17becf", "host call": "#7f7f7f",
    "IPU copies": "#8c564b", "streaming memory": "#bcbd22", "sync wait": "#c7c7c7",
    "idle": "#f2f2f2",
}

NAMES = {
    "forward": "forward", "backward": "backward", "recompute": "recompute",
    "weight_update": "weight update", "host_to_device": "host → device",
    "device_to_host": "device → host", "host_call": "host call (per step)",
    "host_link_wait": "queued for the host link",
    "ipu_copy": "IPU-to-IPU copy", "all_reduce": "all-reduce", "stream_in": "streaming in",
    "stream_out": "streaming out", "sync_wait": "sync wait",
    "io_tiles_copy": "stream copy on the I/O tiles",
}

# Box labels: a letter per kind, followed by the micro-batch when there is one.
_LETTER = {"forward": "F", "backward": "B", "recompute": "R", "weight_update": "U"}

def box_labels(events: pd.DataFrame) -> np.ndarray:
    """Fig 4.1's box labels: "F3", "B3", "R3" for micro-batch 3, "U" for an update.

    Events that are not compute get an empty label.
    """
    kinds = events["kind"].astype(str).to_numpy()
    micro = events["micro_batch"].to_numpy()
    letters = np.array([_LETTER.get(kind, "") for kind in kinds], dtype=object)
    numbered = (micro >= 0) & np.isin(kinds, COMPUTE_KINDS)
    labels = letters.copy()
    labels[numbered] = letters[numbered] + micro[numbered].astype(str).astype(object)
    return labels


def category_times(events: pd.DataFrame, num_ipus: int) -> pd.DataFrame:
    """Share of the span each IPU spends in each category, idle included (rows sum to 1)."""
    span = max(int(events["end_ps"].max() - events["start_ps"].min()), 1) if len(events) else 1
    category = events["kind"].map(CATEGORY_OF)
    duration = events["end_ps"] - events["start_ps"]
    table = duration.groupby([events["ipu"], category]).sum().unstack(fill_value=0)
    table = table.reindex(index=range(num_ipus), columns=CATEGORIES[:-1], fill_value=0) / span
    table["idle"] = (1.0 - table.sum(axis=1)).clip(lower=0.0)
    table.index.name = "ipu"
    return table
