"""Where each kind of event is drawn, in what colour, under which label.

The timeline, the utilisation chart and the Chrome trace read one table,
:mod:`ipusim.engine.event_kinds`, for each kind's lane (the row of an IPU it is drawn
in), category (the slice of time it counts towards), colour and label, so the
three views and the per-IPU figures always agree. The mappings below are views
of that table, keyed by kind or category name.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ipusim.analysis.metrics import category_times
from ipusim.engine.event_kinds import COMPUTE_KINDS, COUNTED, EVENT_KINDS, IDLE, KIND, LANES

__all__ = ["CATEGORIES", "CATEGORY_COLOURS", "CATEGORY_OF", "COLOURS", "LANES", "LANE_OF",
           "NAMES", "box_labels", "category_times"]

LANE_OF = {kind.name: kind.lane for kind in EVENT_KINDS}
CATEGORY_OF = {kind.name: kind.category.name for kind in EVENT_KINDS}
COLOURS = {kind.name: kind.colour for kind in EVENT_KINDS}
NAMES = {kind.name: kind.label for kind in EVENT_KINDS}
# The compute tiles' time, which the utilisation chart stacks; copies on the
# I/O tiles overlap it and are left out of the shares.
CATEGORIES = tuple(category.name for category in COUNTED + (IDLE,))
CATEGORY_COLOURS = {category.name: category.colour for category in COUNTED + (IDLE,)}


def box_labels(events: pd.DataFrame) -> np.ndarray:
    """Fig 4.1's box labels: "F3", "B3", "R3" for micro-batch 3, "U" for an update.

    Events that are not compute get an empty label.
    """
    kinds = events["kind"].astype(str).to_numpy()
    micro = events["micro_batch"].to_numpy()
    letters = np.array([KIND[kind].letter for kind in kinds], dtype=object)
    numbered = (micro >= 0) & np.isin(kinds, COMPUTE_KINDS)
    labels = letters.copy()
    labels[numbered] = letters[numbered] + micro[numbered].astype(str).astype(object)
    return labels
