"""The instructions of a per-IPU program, as the schedule emits them.

Each IPU runs a flat list of these in order. They are named tuples: cheap to
build in the hundreds of thousands and readable in a debugger. Durations are
already priced by the cost model, so the system only has to keep time.
"""
from __future__ import annotations

from typing import NamedTuple

from ipusim.engine.event_kinds import IPU_COPY
from ipusim.engine.sync_groups import Group


class Busy(NamedTuple):
    """The IPU computes (or streams to its memory) for ``duration`` ps."""

    kind: str
    stage: int
    micro_batch: int
    step: int
    pipeline_cycle: int
    duration: int
    flops: float = 0.0
    nbytes: float = 0.0
    label: int = -1  # the row's interned label (recorder.label); -1: the system interns it


class HostIO(NamedTuple):
    """A host exchange: sync on GS1, stream copies over the host link, sync again.

    Every member of ``group`` runs the same HostIO; members with nothing to
    move still wait for the others (that is the cost of a wide GS1).
    """

    group: Group
    sync: int
    h2d: int
    h2d_bytes: int
    d2h: int
    d2h_bytes: int
    stage: int
    micro_batch: int
    step: int
    pipeline_cycle: int
    overlap: bool = False   # on the I/O tiles: no sync, compute waits only for its data
    prefetch: bool = False  # overlapped: also start the next micro-batch's input copy
    # How long each copy holds the machine's shared host side (its host link into the
    # gateway's buffer); -1: the whole copy. The rest is this IPU's own hop.
    h2d_link: int = -1
    d2h_link: int = -1


class Exchange(NamedTuple):
    """An IPU-to-IPU exchange on GS2: sync, then ``phase`` ps of copies.

    ``copy`` is this IPU's own outgoing copy; the phase lasts as long as the
    longest copy in the group.
    """

    group: Group
    sync: int
    phase: int
    copy: int
    nbytes: int
    stage: int
    micro_batch: int
    step: int
    pipeline_cycle: int
    kind: str = IPU_COPY
    label: int = -1  # the copy row's interned label (recorder.label); -1: the system interns it


Instruction = Busy | HostIO | Exchange
