"""Every kind of event the simulator records, in one table.

A kind's row says where the reports draw it (its lane), which slice of an
IPU's time it counts towards (its category, the same in the per-IPU figures
and the utilisation chart), its colour, its label and the letter on its box
in the timeline. Adding a kind is adding a row to :data:`EVENT_KINDS`.
"""
from __future__ import annotations

from dataclasses import dataclass

# Lanes: the rows of an IPU the timeline and the Chrome trace draw events in.
COMPUTE_LANE = "compute"
HOST_LANE = "host I/O"
EXCHANGE_LANE = "exchange / streaming"
SYNC_LANE = "sync"
LANES = (COMPUTE_LANE, HOST_LANE, EXCHANGE_LANE, SYNC_LANE)


@dataclass(frozen=True)
class Category:
    """A slice of an IPU's time: a column of :func:`ipusim.analysis.metrics.per_ipu` and a bar of
    the utilisation chart. ``column`` is None for time that overlaps the compute tiles'
    (copies on the I/O tiles), which neither counts."""

    name: str
    colour: str
    column: str | None


COMPUTE_TIME = Category("compute", "#1f77b4", "compute(us)")
HOST_IO_TIME = Category("host I/O", "#17becf", "host_io(us)")
HOST_CALL_TIME = Category("host call", "#7f7f7f", "host_call(us)")
IPU_COPY_TIME = Category("IPU copies", "#8c564b", "ipu_copy(us)")
STREAMING_TIME = Category("streaming memory", "#bcbd22", "streaming(us)")
SYNC_WAIT_TIME = Category("sync wait", "#c7c7c7", "sync_wait(us)")
IO_TILES_TIME = Category("I/O tiles (overlapped)", "#9edae5", None)
IDLE = Category("idle", "#f2f2f2", None)
# The compute tiles' time, in the utilisation chart's stacking order; idle is what is left.
COUNTED = (COMPUTE_TIME, HOST_IO_TIME, HOST_CALL_TIME, IPU_COPY_TIME, STREAMING_TIME,
           SYNC_WAIT_TIME)


@dataclass(frozen=True)
class EventKind:
    """One kind of event: its name in the event table and how the reports show it."""

    name: str
    lane: str
    category: Category
    colour: str
    label: str        # as a legend or a tooltip names it
    letter: str = ""  # on its box in the timeline ("F3": forward of micro-batch 3)

    @property
    def compute(self) -> bool:
        """Whether it is the compute tiles computing (a box numbered by its micro-batch)."""
        return self.category is COMPUTE_TIME


FORWARD = "forward"
BACKWARD = "backward"
RECOMPUTE = "recompute"
WEIGHT_UPDATE = "weight_update"
HOST_TO_DEVICE = "host_to_device"
DEVICE_TO_HOST = "device_to_host"
HOST_LINK_WAIT = "host_link_wait"
IPU_COPY = "ipu_copy"
ALL_REDUCE = "all_reduce"
SYNC_WAIT = "sync_wait"
HOST_CALL = "host_call"
STREAM_IN = "stream_in"
STREAM_OUT = "stream_out"
IO_TILES_COPY = "io_tiles_copy"

# In the recorder's code order: a kind's position is its code in the event table.
EVENT_KINDS = (
    EventKind(FORWARD, COMPUTE_LANE, COMPUTE_TIME, "#1f77b4", "forward", "F"),
    EventKind(BACKWARD, COMPUTE_LANE, COMPUTE_TIME, "#ff7f0e", "backward", "B"),
    EventKind(RECOMPUTE, COMPUTE_LANE, COMPUTE_TIME, "#9467bd", "recompute", "R"),
    EventKind(WEIGHT_UPDATE, COMPUTE_LANE, COMPUTE_TIME, "#2ca02c", "weight update", "U"),
    EventKind(HOST_TO_DEVICE, HOST_LANE, HOST_IO_TIME, "#17becf", "host → device"),
    EventKind(DEVICE_TO_HOST, HOST_LANE, HOST_IO_TIME, "#0e7c86", "device → host"),
    # An IPU queued behind others' copies on its shared host link is held up by host I/O too.
    EventKind(HOST_LINK_WAIT, HOST_LANE, HOST_IO_TIME, "#b3e7ee", "queued for the host link"),
    EventKind(IPU_COPY, EXCHANGE_LANE, IPU_COPY_TIME, "#8c564b", "IPU-to-IPU copy"),
    EventKind(ALL_REDUCE, EXCHANGE_LANE, IPU_COPY_TIME, "#d62728", "all-reduce"),
    EventKind(SYNC_WAIT, SYNC_LANE, SYNC_WAIT_TIME, "#c7c7c7", "sync wait"),
    EventKind(HOST_CALL, HOST_LANE, HOST_CALL_TIME, "#7f7f7f", "host call (per step)"),
    EventKind(STREAM_IN, EXCHANGE_LANE, STREAMING_TIME, "#bcbd22", "streaming in"),
    EventKind(STREAM_OUT, EXCHANGE_LANE, STREAMING_TIME, "#8a8b0f", "streaming out"),
    EventKind(IO_TILES_COPY, HOST_LANE, IO_TILES_TIME, "#9edae5", "stream copy on the I/O tiles"),
)

KIND = {kind.name: kind for kind in EVENT_KINDS}
KINDS = tuple(kind.name for kind in EVENT_KINDS)
COMPUTE_KINDS = tuple(kind.name for kind in EVENT_KINDS if kind.compute)
# The stream copies that occupy a host link (not the waits for it, nor the I/O tiles' copies).
HOST_TRANSFER_KINDS = (HOST_TO_DEVICE, DEVICE_TO_HOST)


def kinds_of(category: Category) -> tuple[str, ...]:
    """The kinds whose time counts towards ``category``."""
    return tuple(kind.name for kind in EVENT_KINDS if kind.category is category)
