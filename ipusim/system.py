"""The SimPy model of an IPU system: IPUs, host links, sync groups.

One long-lived SimPy process per IPU runs the programs handed to it, one
step (call to the model) at a time. Host links are FIFO servers shared by
the IPUs of an IPU-M2000, one per direction (they are full duplex). Syncs
are :class:`~ipusim.sync_groups.Barrier` objects shared by their members.
"""
from __future__ import annotations

from collections.abc import Sequence

import simpy

from ipusim.hardware import SystemSpec
from ipusim.program import Busy, Exchange, HostIO, Instruction
from ipusim.recorder import Recorder
from ipusim.sync_groups import Barrier, Group


class HostLink:
    """One host link: a FIFO server each way, reserved in arrival order."""

    def __init__(self) -> None:
        self.h2d_free_at = 0
        self.d2h_free_at = 0

    def reserve_h2d(self, now: int, duration: int) -> tuple[int, int]:
        start = max(now, self.h2d_free_at)
        self.h2d_free_at = start + duration
        return start, self.h2d_free_at

    def reserve_d2h(self, now: int, duration: int) -> tuple[int, int]:
        start = max(now, self.d2h_free_at)
        self.d2h_free_at = start + duration
        return start, self.d2h_free_at


class System:
    """A simulated IPU system that keeps its clock across calls."""

    def __init__(self, spec: SystemSpec, recorder: Recorder | None = None):
        self.spec = spec
        self.env = simpy.Environment()
        self.recorder = recorder if recorder is not None else Recorder()
        self.host_links = [HostLink() for _ in range(spec.num_host_links)]
        self._barriers: dict[Group, Barrier] = {}
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
        done = [self.env.event() for _ in programs]
        for ipu, (program, finished) in enumerate(zip(programs, done)):
            self._inbox[ipu].put((program, finished))
        self.env.run(until=simpy.AllOf(self.env, done))
        return self.env.now

    def wait_until(self, time_ps: int, ipus: Sequence[int], step: int) -> None:
        """Hold ``ipus`` idle until ``time_ps``: a sync with something outside the
        system (another instance's clock), recorded as sync_wait."""
        if time_ps <= self.env.now:
            return
        for ipu in ipus:
            self.recorder.rows.append((self.env.now, time_ps, ipu, "sync_wait", -1, -1, step, -1,
                                       0, 0.0))
        self.env.run(until=time_ps)

    def _barrier(self, group: Group) -> Barrier:
        barrier = self._barriers.get(group)
        if barrier is None:
            barrier = self._barriers[group] = Barrier(self.env, len(group))
        return barrier

    def _ipu(self, ipu: int):
        """The process of one IPU: take a program, run it, report, repeat."""
        env = self.env
        record = self.recorder.rows.append
        link = self.host_links[self.spec.host_link_of(ipu)]
        while True:
            program, finished = yield self._inbox[ipu].get()
            for ins in program:
                kind = type(ins)
                if kind is Busy:
                    start = env.now
                    yield env.timeout(ins.duration)
                    record((start, env.now, ipu, ins.kind, ins.stage, ins.micro_batch, ins.step,
                            ins.cycle, ins.nbytes, ins.flops))
                elif kind is Exchange:
                    yield from self._sync(ipu, ins.group, ins.sync, ins.step, ins.cycle)
                    start = env.now
                    if ins.copy:
                        record((start, start + ins.copy, ipu, ins.kind, ins.stage, ins.micro_batch,
                                ins.step, ins.cycle, ins.nbytes, 0.0))
                    if ins.phase:
                        yield env.timeout(ins.phase)
                else:
                    yield from self._host_io(ipu, link, ins)
            finished.succeed()

    def _sync(self, ipu: int, group: Group, delay: int, step: int, cycle: int):
        """Wait for the group and the sync itself; record the time as sync_wait."""
        env = self.env
        arrived = env.now
        if len(group) > 1:
            yield self._barrier(group).wait(delay)
        elif delay:
            yield env.timeout(delay)
        if env.now > arrived:
            self.recorder.rows.append(
                (arrived, env.now, ipu, "sync_wait", -1, -1, step, cycle, 0, 0.0))

    def _host_io(self, ipu: int, link: HostLink, ins: HostIO):
        """GS1 sync, this IPU's stream copies, then the end-of-exchange sync."""
        env = self.env
        record = self.recorder.rows.append
        yield from self._sync(ipu, ins.group, ins.sync, ins.step, ins.cycle)
        end = env.now
        if ins.h2d:
            start, end = link.reserve_h2d(env.now, ins.h2d)
            record((start, end, ipu, "host_to_device", ins.stage, ins.micro_batch, ins.step,
                    ins.cycle, ins.h2d_bytes, 0.0))
        if ins.d2h:
            start, end_out = link.reserve_d2h(env.now, ins.d2h)
            record((start, end_out, ipu, "device_to_host", ins.stage, ins.micro_batch, ins.step,
                    ins.cycle, ins.d2h_bytes, 0.0))
            end = max(end, end_out)
        if end > env.now:
            yield env.timeout(end - env.now)
        if len(ins.group) > 1:
            yield from self._sync(ipu, ins.group, 0, ins.step, ins.cycle)
