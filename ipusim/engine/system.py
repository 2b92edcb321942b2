"""The SimPy model of an IPU system: IPUs, host links, sync groups.

One long-lived SimPy process per IPU runs the programs handed to it, one
step (call to the model) at a time. Host links are FIFO servers shared by
the IPUs of an IPU-M2000, one per direction (they are full duplex). Syncs
are :class:`~ipusim.engine.sync_groups.Barrier` objects shared by their members.
"""
from __future__ import annotations

from collections.abc import Sequence

import simpy

from ipusim.engine.event_kinds import (
    DEVICE_TO_HOST,
    HOST_LINK_WAIT,
    HOST_TO_DEVICE,
    IO_TILES_COPY,
    SYNC_WAIT,
)
from ipusim.engine.gc_pause import cyclic_gc_paused
from ipusim.engine.program import Busy, Exchange, HostIO, Instruction
from ipusim.engine.recorder import PENDING, SYNC_WAIT_LABEL, Recorder, label
from ipusim.engine.sync_groups import Barrier, Group
from ipusim.hardware import SystemSpec


class HostLink:
    """One machine's host side: a FIFO server each way, reserved in arrival order.

    A copy holds it for ``held`` ps (its bytes at the shared hop's rate), then
    runs on to ``duration`` on the IPU's own hop between the gateway's buffer and
    its tiles, while the next copy starts; ``held`` < 0 holds it throughout.
    """

    def __init__(self) -> None:
        self.h2d_free_at = 0
        self.d2h_free_at = 0

    def reserve_h2d(self, now: int, duration: int, held: int = -1) -> tuple[int, int]:
        start = max(now, self.h2d_free_at)
        self.h2d_free_at = start + (duration if held < 0 else held)
        return start, start + duration

    def reserve_d2h(self, now: int, duration: int, held: int = -1) -> tuple[int, int]:
        start = max(now, self.d2h_free_at)
        self.d2h_free_at = start + (duration if held < 0 else held)
        return start, start + duration


class _IOTiles:
    """What one IPU's I/O tiles have in flight during a call."""

    __slots__ = ("input_ready", "outputs_sent")

    def __init__(self) -> None:
        self.input_ready: int | None = None  # when the input fetched ahead arrives
        self.outputs_sent = 0                # when the last output reaches the host


class Environment(simpy.Environment):
    """SimPy's environment, whose clock can also move on over an empty schedule."""

    def idle_until(self, time: int) -> None:
        """What ``run(until=time)`` does when no event is scheduled, the clock moved
        to ``time``, without the event it would schedule, stop on and leave behind
        (a replayed call's clock moves on so; see :mod:`ipusim.engine.step_replay`)."""
        if self._queue:
            raise RuntimeError("idle_until() with events scheduled: run(until=...) them")
        if time <= self._now:
            raise ValueError(f"until ({time}) must be greater than the current simulation "
                             f"time ({self._now})")
        self._now = time


class System:
    """A simulated IPU system that keeps its clock across calls."""

    def __init__(self, spec: SystemSpec, recorder: Recorder | None = None):
        self.spec = spec
        self.env = Environment()
        self.recorder = recorder if recorder is not None else Recorder()
        self.host_links = [HostLink() for _ in range(spec.num_host_links)]
        self._barriers: dict[Group, Barrier] = {}
        self._barrier_by_id: dict[int, Barrier] = {}
        self._inbox = [simpy.Store(self.env) for _ in range(spec.num_ipus)]
        for ipu in range(spec.num_ipus):
            self.env.process(self._ipu(ipu))

    @property
    def now_ps(self) -> int:
        """The simulated clock."""
        return self.env.now

    def run(self, programs: Sequence[Sequence[Instruction]]) -> int:
        """Run one program per IPU (IPUs beyond ``len(programs)`` stay idle).

        Returns the simulated time at which the last IPU finished.
        """
        if len(programs) > self.spec.num_ipus:
            raise ValueError(
                f"{len(programs)} IPU programs for a system of num_ipus={self.spec.num_ipus}")
        self._barrier_by_id.clear()  # ids of the last call's groups may be reused
        done = [self.env.event() for _ in programs]
        for ipu, (program, finished) in enumerate(zip(programs, done)):
            self._inbox[ipu].put((program, finished))
        with cyclic_gc_paused():  # else it rescans the growing event record again and again
            self.env.run(until=simpy.AllOf(self.env, done))
        return self.env.now

    def wait_until(self, time_ps: int, ipus: Sequence[int], step: int) -> None:
        """Hold ``ipus`` idle until ``time_ps``: a sync with something outside the
        system (another instance's clock), recorded as sync_wait."""
        if time_ps <= self.env.now:
            return
        for ipu in ipus:
            self.recorder.record(self.env.now, time_ps, ipu, SYNC_WAIT, step=step)
        self.env.run(until=time_ps)

    def _barrier(self, group: Group) -> Barrier:
        # Hashing a 64-IPU group on every sync is slow; the group objects of
        # the programs being run are alive, so their ids are unique keys.
        barrier = self._barrier_by_id.get(id(group))
        if barrier is None:
            barrier = self._barriers.get(group)
            if barrier is None:
                barrier = self._barriers[group] = Barrier(self.env, len(group))
            self._barrier_by_id[id(group)] = barrier
        return barrier

    def _ipu(self, ipu: int):
        """The process of one IPU: take a program, run it, report, repeat.

        This loop is the simulator's hot path. Busy time (compute, the copy
        phase of an exchange, this IPU's own stream copies) only moves
        ``busy_until`` on: nothing else can touch the IPU until its next sync,
        and a barrier takes the arrival time, so the clock catches up only
        where a shared host link is reserved or a lone IPU syncs. The
        syncs are yielded here (no nested generators) and a row is six ints
        appended to this IPU's pending list in :data:`~ipusim.engine.recorder.PENDING_LAYOUT`
        order (start, end, label, micro-batch, step, cycle), labelled by the instruction's
        interned label, packed into typed columns every few thousand rows.
        """
        env = self.env
        timeout = env.timeout
        columns = self.recorder.columns(ipu)
        pending = columns.pending
        record = pending.extend
        link = self.host_links[self.spec.host_link_of(ipu)]
        while True:
            program, finished = yield self._inbox[ipu].get()
            busy_until = env.now
            io = _IOTiles()
            for ins in program:
                kind = type(ins)
                if kind is Busy:
                    start, busy_until = busy_until, busy_until + ins.duration
                    code = ins.label
                    if code < 0:  # built by hand, not by the schedule
                        code = label(ins.kind, ins.stage, ins.nbytes, ins.flops)
                    record((start, busy_until, code, ins.micro_batch, ins.step, ins.pipeline_cycle))
                    if len(pending) >= PENDING:
                        columns.pack()
                    continue
                if len(pending) >= PENDING:
                    columns.pack()
                if kind is HostIO and ins.overlap:
                    now = env.now
                    if busy_until > now:
                        yield timeout(busy_until - now)
                        now = busy_until
                    busy_until = self._overlapped_copies(ipu, link, ins, now, io)
                    continue
                # An exchange and a host exchange both open with a sync of their group.
                # Only the barrier sees the IPU arrive, so it arrives at busy_until
                # without a timeout to catch the clock up first.
                arrived, group = busy_until, ins.group
                if len(group) > 1:
                    yield self._barrier(group).wait(ins.sync, arrived)
                elif arrived + ins.sync > env.now:
                    yield timeout(arrived + ins.sync - env.now)
                now = env.now
                if now > arrived:
                    record((arrived, now, SYNC_WAIT_LABEL, -1, ins.step, ins.pipeline_cycle))
                if kind is Exchange:
                    if ins.copy:
                        code = ins.label
                        if code < 0:
                            code = label(ins.kind, ins.stage, ins.nbytes)
                        record((now, now + ins.copy, code, ins.micro_batch, ins.step,
                                ins.pipeline_cycle))
                    busy_until = now + ins.phase
                    continue
                busy_until = self._stream_copies(ipu, link, ins, now)
                if len(group) > 1:  # the end-of-exchange sync
                    arrived = busy_until
                    yield self._barrier(group).wait(0, arrived)
                    busy_until = env.now
                    if busy_until > arrived:
                        record((arrived, busy_until, SYNC_WAIT_LABEL, -1, ins.step,
                                ins.pipeline_cycle))
            busy_until = max(busy_until, io.outputs_sent)  # a call returns with its outputs
            if busy_until > env.now:
                yield timeout(busy_until - env.now)
            finished.succeed()
            program = ins = None  # the next call's programs replace this one's

    def _overlapped_copies(self, ipu: int, link: HostLink, ins: HostIO, now: int,
                           io: _IOTiles) -> int:
        """Stream copies on the I/O tiles: the compute tiles wait only until this
        micro-batch's input is in (fetched ahead during the last one, or now),
        then go on while the next input and the outputs move. Returns when the
        compute tiles can go on."""
        ready = now
        if ins.h2d:
            if io.input_ready is None:  # nothing fetched ahead: fetch it now
                start, ready = link.reserve_h2d(now, ins.h2d, ins.h2d_link)
                self._record_copy(start, ready, ipu, IO_TILES_COPY, ins, ins.h2d_bytes)
            else:
                ready, io.input_ready = max(now, io.input_ready), None
            if ready > now:
                self._record_copy(now, ready, ipu, HOST_LINK_WAIT, ins)
            if ins.prefetch:  # the next micro-batch has the same shapes
                start, io.input_ready = link.reserve_h2d(ready, ins.h2d, ins.h2d_link)
                self._record_copy(start, io.input_ready, ipu, IO_TILES_COPY, ins, ins.h2d_bytes,
                                  micro_batch=ins.micro_batch + 1)
        if ins.d2h:
            start, end = link.reserve_d2h(ready, ins.d2h, ins.d2h_link)
            self._record_copy(start, end, ipu, IO_TILES_COPY, ins, ins.d2h_bytes)
            io.outputs_sent = max(io.outputs_sent, end)
        return ready

    def _stream_copies(self, ipu: int, link: HostLink, ins: HostIO, now: int) -> int:
        """Reserve this IPU's stream copies on its host link at ``now``; return when they end."""
        end = first = now
        if ins.h2d:
            first, end = link.reserve_h2d(now, ins.h2d, ins.h2d_link)
            self._record_copy(first, end, ipu, HOST_TO_DEVICE, ins, ins.h2d_bytes)
        if ins.d2h:
            start, end_out = link.reserve_d2h(now, ins.d2h, ins.d2h_link)
            self._record_copy(start, end_out, ipu, DEVICE_TO_HOST, ins, ins.d2h_bytes)
            first = min(first, start) if ins.h2d else start
            end = max(end, end_out)
        if first > now:  # queued behind other IPUs' copies on the shared link
            self._record_copy(now, first, ipu, HOST_LINK_WAIT, ins)
        return end

    def _record_copy(self, start: int, end: int, ipu: int, kind: str, ins: HostIO,
                     nbytes: float = 0, micro_batch: int | None = None) -> None:
        """Record a host copy (or a wait for the link) of ``ins``: its stage, micro-batch
        (``ins``'s unless given), step and cycle."""
        self.recorder.record(start, end, ipu, kind, stage=ins.stage,
                             micro_batch=ins.micro_batch if micro_batch is None else micro_batch,
                             step=ins.step, pipeline_cycle=ins.pipeline_cycle, nbytes=nbytes)
