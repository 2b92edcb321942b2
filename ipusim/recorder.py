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

import pandas as pd

COMPUTE_KINDS = ("forward", "backward", "recompute", "weight_update")
KINDS = COMPUTE_KINDS + (
    "host_to_device", "device_to_host", "ipu_copy", "all_reduce",
    "sync_wait", "host_call", "stream_in", "stream_out")

COLUMNS = ("start_ps", "end_ps", "ipu", "kind", "stage", "micro_batch", "step",
           "cycle", "bytes", "flops")


class Recorder:
    """Collects events as plain tuples (fast) and builds the DataFrame once."""

    def __init__(self) -> None:
        self.rows: list[tuple] = []

    def __len__(self) -> int:
        return len(self.rows)

    def to_frame(self, ipus_per_replica: int = 1, instance: int = 0) -> pd.DataFrame:
        """The events as a DataFrame sorted by start time, with replica and instance."""
        frame = pd.DataFrame.from_records(self.rows, columns=COLUMNS)
        frame["kind"] = pd.Categorical(frame["kind"], categories=KINDS)
        frame.insert(3, "replica", frame["ipu"] // ipus_per_replica)
        frame.insert(4, "instance", instance)
        return frame.sort_values(["start_ps", "ipu"], kind="stable").reset_index(drop=True)
