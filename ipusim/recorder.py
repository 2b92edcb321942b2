"""The event record: one tuple per simulated event, a DataFrame at the end.

Columns of :meth:`Recorder.to_frame` (times in integer picoseconds):

=============  =============================================================
start_ps       when the event began
end_ps         when it ended
ipu            physical IPU index in the system
replica        replica the IPU belongs to
instance       host process (poprun instance) that owns the engine
kind           one of :data:`KINDS`
stage          model stage (after merging), -1 when not tied to one
micro_batch    micro-batch index within the step, -1 when not tied to one
step           call to the model (0, 1, ...)
cycle          pipeline cycle within the device iteration, -1 outside pipelines
bytes          bytes moved (copies) or touched (compute)
flops          floating-point operations
=============  =============================================================
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from ipusim._gc import cyclic_gc_paused

COMPUTE_KINDS = ("forward", "backward", "recompute", "weight_update")
KINDS = COMPUTE_KINDS + (
    "host_to_device", "device_to_host", "host_link_wait", "ipu_copy", "all_reduce",
    "sync_wait", "host_call", "stream_in", "stream_out", "io_tiles_copy")

COLUMNS = ("start_ps", "end_ps", "ipu", "kind", "stage", "micro_batch", "step",
           "cycle", "bytes", "flops")
_DTYPES = {"bytes": np.float64, "flops": np.float64}  # the other columns are int64
_CHUNK = 1 << 16  # rows converted at a time by Recorder.to_frame


class Recorder:
    """Collects events as plain tuples (fast) and builds the DataFrame once."""

    def __init__(self) -> None:
        self.rows: list[tuple] = []

    def __len__(self) -> int:
        return len(self.rows)

    def to_frame(self, ipus_per_replica: int = 1, instance: int = 0) -> pd.DataFrame:
        """The events as a DataFrame sorted by start time, with replica and instance.

        The tuples become 2-D object arrays (a single C pass each) a chunk of
        a few megabytes at a time, and each column is cast from them into
        its typed array: several times faster than ``DataFrame.from_records``
        on millions of tuples, and the dtypes hold even when there are no rows.
        """
        with cyclic_gc_paused():
            return self._frame(ipus_per_replica, instance)

    def _frame(self, ipus_per_replica: int, instance: int) -> pd.DataFrame:
        rows, n = self.rows, len(self.rows)
        columns = {name: np.empty(n, np.int8 if name == "kind" else _DTYPES.get(name, np.int64))
                   for name in COLUMNS}
        for first in range(0, n, _CHUNK):
            table = np.array(rows[first:first + _CHUNK], dtype=object).reshape(-1, len(COLUMNS))
            part = slice(first, first + len(table))
            for index, name in enumerate(COLUMNS):
                if name == "kind":
                    codes = pd.Categorical(table[:, index], categories=KINDS).codes
                    if (codes < 0).any():
                        unknown = sorted(set(table[codes < 0, index]))
                        raise ValueError(f"event kinds {unknown} are not among {KINDS}")
                    columns[name][part] = codes
                else:
                    columns[name][part] = table[:, index]
        order = _by_start_then_ipu(columns["start_ps"], columns["ipu"])
        columns = {name: values[order] for name, values in columns.items()}
        columns["kind"] = pd.Categorical.from_codes(columns["kind"], categories=KINDS)
        frame = pd.DataFrame(columns)
        frame.insert(3, "replica", frame["ipu"] // ipus_per_replica)
        frame.insert(4, "instance", instance)
        return frame


def _by_start_then_ipu(start: np.ndarray, ipu: np.ndarray) -> np.ndarray:
    """The stable order by start time, then IPU.

    One stable sort of ``start * num_ipus + ipu`` (numpy's timsort, fast on
    the nearly sorted record) where that key cannot overflow; ``lexsort`` else.
    """
    if len(start) == 0:
        return np.arange(0)
    width = int(ipu.max()) + 1
    if int(ipu.min()) >= 0 and int(start.min()) >= 0 and \
            int(start.max()) < np.iinfo(np.int64).max // width:
        return np.argsort(start * width + ipu, kind="stable")
    return np.lexsort((ipu, start))
