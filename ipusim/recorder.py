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

COMPUTE_KINDS = ("forward", "backward", "recompute", "weight_update")
KINDS = COMPUTE_KINDS + (
    "host_to_device", "device_to_host", "host_link_wait", "ipu_copy", "all_reduce",
    "sync_wait", "host_call", "stream_in", "stream_out")

COLUMNS = ("start_ps", "end_ps", "ipu", "kind", "stage", "micro_batch", "step",
           "cycle", "bytes", "flops")
_DTYPES = {"bytes": np.float64, "flops": np.float64}  # the other columns are int64
_KIND_CODES = {kind: code for code, kind in enumerate(KINDS)}


class Recorder:
    """Collects events as plain tuples (fast) and builds the DataFrame once."""

    def __init__(self) -> None:
        self.rows: list[tuple] = []

    def __len__(self) -> int:
        return len(self.rows)

    def to_frame(self, ipus_per_replica: int = 1, instance: int = 0) -> pd.DataFrame:
        """The events as a DataFrame sorted by start time, with replica and instance.

        Built column by column and sorted as numpy arrays: far faster than
        ``DataFrame.from_records`` on millions of tuples, and the dtypes hold
        even when there are no rows.
        """
        rows = self.rows
        columns = {}
        for index, name in enumerate(COLUMNS):
            values = [row[index] for row in rows]
            if name == "kind":
                columns[name] = np.fromiter(map(_KIND_CODES.__getitem__, values), np.int8,
                                            len(values))
            else:
                columns[name] = np.array(values, dtype=_DTYPES.get(name, np.int64))
        order = np.lexsort((columns["ipu"], columns["start_ps"]))  # stable: by start, then IPU
        columns = {name: values[order] for name, values in columns.items()}
        columns["kind"] = pd.Categorical.from_codes(columns["kind"], categories=KINDS)
        frame = pd.DataFrame(columns)
        frame.insert(3, "replica", frame["ipu"] // ipus_per_replica)
        frame.insert(4, "instance", instance)
        return frame
