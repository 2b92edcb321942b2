"""The program builder: emits one replica's schedule into every replica's IPUs.

The schedules (sharded, pipelined, phased) speak in logical IPUs of one
replica; the builder maps them to physical IPUs (replica r's IPU i is the
plan's ``ipu_of(r, i)``), prices every instruction with the cost model
and adds the sync groups the sync pattern asks for.
"""
from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

from ipusim.cost.cost_model import CostModel
from ipusim.cost.work import Cost
from ipusim.engine.event_kinds import (
    ALL_REDUCE,
    BACKWARD,
    FORWARD,
    HOST_CALL,
    IPU_COPY,
    RECOMPUTE,
    STREAM_IN,
    STREAM_OUT,
    WEIGHT_UPDATE,
)
from ipusim.engine.program import Busy, Exchange, HostIO, Instruction
from ipusim.engine.recorder import label
from ipusim.engine.sync_groups import gs1_group, gs2_group
from ipusim.hardware import SystemSpec
from ipusim.plan.engine_plan import EnginePlan


@lru_cache(maxsize=1024)
def _gradients_all_reduce_ps(cost: CostModel, sizes: tuple[int, ...], replicas: int,
                             spec: SystemSpec, ipus_per_replica: int, merged: bool) -> int:
    """:meth:`CostModel.gradients_all_reduce_ps`, worked out once a step shape."""
    return cost.gradients_all_reduce_ps(sizes, replicas, spec.ipu, spec, ipus_per_replica,
                                        merged)


class Copy(NamedTuple):
    """Bytes one logical IPU sends another in an exchange."""

    src: int
    nbytes: int
    stage: int
    micro_batch: int


class ProgramBuilder:
    """Accumulates the per-IPU programs of one step."""

    def __init__(self, plan: EnginePlan, spec: SystemSpec, step: int, folded: bool = False):
        run, cost = plan.run, plan.cost
        self.plan = plan
        self.work = plan.work
        self.run = run
        self.spec = spec
        self.cost = cost
        self.step = step
        self.stages = plan.stages
        self.ipus_per_replica = plan.ipus_per_replica
        self.num_ipus = plan.num_ipus
        # Folded (see ipusim.plan.folding): programs for replica 0 only, its syncs among its
        # own IPUs.
        self.folded = folded
        self.simulated_ipus = self.ipus_per_replica if folded else self.num_ipus
        self.programs: list[list[Instruction]] = [[] for _ in range(self.simulated_ipus)]
        self.prices = plan.prices
        self._gs2 = gs2_group(self.simulated_ipus)
        self._ipu_sync = cost.ipu_sync_ps(run.total_replicas * plan.ipus_per_replica)
        # The hot path emits millions of instructions: what repeats is worked out once.
        # Each logical IPU's physical IPUs, one per simulated replica, and their programs.
        replicas = 1 if folded else run.replicas
        self._physical = [[plan.ipu_of(replica, logical) for replica in range(replicas)]
                          for logical in range(self.ipus_per_replica)]
        self._programs_of = [[self.programs[ipu] for ipu in ipus] for ipus in self._physical]
        self._passes = {(kind, index): (work, duration, label(kind, index, work.bytes, work.flops),
                                        self._programs_of[self.stages[index].ipu])
                        for index, price in enumerate(self.prices)
                        for kind, work, duration in (
                            (FORWARD, price.forward, price.forward_ps),
                            (BACKWARD, price.backward, price.backward_ps),
                            (RECOMPUTE, price.recompute, price.recompute_ps))}
        self._copy_ps: dict[int, int] = {}

    # Compute ---------------------------------------------------------------
    def compute(self, kind: str, stage: int, micro_batch: int, pipeline_cycle: int = -1) -> None:
        """One pass of ``kind`` (forward, backward, recompute) of a stage, in every replica."""
        work, duration, code, programs = self._passes[kind, stage]
        ins = Busy(kind, stage, micro_batch, self.step, pipeline_cycle, duration, work.flops,
                   work.bytes,
                   code)
        for program in programs:
            program.append(ins)

    def busy(self, logical_ipu: int, kind: str, stage: int, micro_batch: int, pipeline_cycle: int,
             duration: int, work: Cost = Cost(), nbytes: float | None = None) -> None:
        """The IPU is busy for ``duration`` ps, in every replica."""
        nbytes = work.bytes if nbytes is None else nbytes
        ins = Busy(kind, stage, micro_batch, self.step, pipeline_cycle, duration, work.flops,
                   nbytes,
                   label(kind, stage, nbytes, work.flops))
        for program in self._programs_of[logical_ipu]:
            program.append(ins)

    def weight_update(self, stages: list[int] | None = None, pipeline_cycle: int = -1) -> None:
        """All-reduce the gradients across replicas, then update the stages' weights.

        With the optimizer state sharded across replicas the all-reduce is a
        reduce-scatter and, after each replica updates its share, an
        all-gather of the weights: the same bytes over the IPU-Links.

        ``stages`` defaults to every stage; phased execution updates one phase at a time.
        """
        indices = range(len(self.stages)) if stages is None else stages
        if self.run.total_replicas > 1:
            # Each IPU's gradients, one all-reduce each unless PopART merges them: one
            # collective event whose time is their sum.
            sizes: list[tuple[int, ...]] = [()] * self.ipus_per_replica
            for index in indices:
                stage = self.stages[index]
                sizes[stage.ipu] += stage.parameter_sizes
            times = [_gradients_all_reduce_ps(self.cost, s, self.run.total_replicas,
                                              self.spec, self.ipus_per_replica,
                                              self.run.merge_all_reduce)
                     for s in sizes]
            self._collective(ALL_REDUCE, max(times), times, [sum(s) for s in sizes],
                             pipeline_cycle)
        for index in indices:
            price, offloaded = self.prices[index], self._offloaded_state(index)
            self.stream(STREAM_IN, index, offloaded, pipeline_cycle)
            self.busy(self.stages[index].ipu, WEIGHT_UPDATE, index, -1, pipeline_cycle,
                      price.update_ps, price.update)
            self.stream(STREAM_OUT, index, offloaded, pipeline_cycle)

    def load_offloaded_weights(self) -> None:
        """Weights kept in streaming memory come on chip before an iteration's forward."""
        if self.run.offload.weights:
            for index, stage in enumerate(self.stages):
                self.stream(STREAM_IN, index, stage.weight_bytes, -1)

    def _offloaded_state(self, index: int) -> int:
        """Bytes of a stage's update state that live in streaming memory.

        None in phased execution: its phases stream all their state already.
        """
        if self.run.execution.phased:
            return 0
        stage, offload = self.stages[index], self.run.offload
        accumulating = self.run.gradient_accumulation > 1
        return ((stage.weight_bytes if offload.weights else 0)
                + (stage.optimizer_bytes // self.run.optimizer_shards if offload.optimizer else 0)
                + (stage.weight_bytes if offload.accumulators and accumulating else 0))

    def stream(self, kind: str, index: int, nbytes: int, pipeline_cycle: int = -1) -> None:
        """Move ``nbytes`` of a stage's state between SRAM and streaming memory:
        into the IPU (``STREAM_IN``) or out (``STREAM_OUT``)."""
        if nbytes:
            self.busy(self.stages[index].ipu, kind, index, -1, pipeline_cycle,
                      self.cost.streaming_ps(nbytes, self.spec, kind != STREAM_OUT),
                      nbytes=nbytes)

    # Host ------------------------------------------------------------------
    def host_call(self) -> None:
        """The host's round trip that starts every call: all IPUs wait for it."""
        overhead = self.cost.host_call_ps
        self._collective(HOST_CALL, overhead, [overhead] * self.ipus_per_replica,
                         [0] * self.ipus_per_replica, -1, sync=0)

    def host_input(self, micro_batch: int, pipeline_cycle: int = -1) -> None:
        """Stream one micro-batch's inputs to the first stage's IPU."""
        self._host_io(self.stages[0].ipu, 0, micro_batch, pipeline_cycle,
                      h2d_bytes=self.work.input_bytes)

    def host_output(self, micro_batch: int, pipeline_cycle: int = -1) -> None:
        """Stream one micro-batch's outputs back, if the output mode returns them."""
        if micro_batch in self.plan.returned_micro_batches:
            last = len(self.stages) - 1
            self._host_io(self.stages[last].ipu, last, micro_batch, pipeline_cycle,
                          d2h_bytes=self.work.output_bytes)

    def host_write(self, logical_ipu: int, nbytes: int) -> None:
        """Stream ``nbytes`` of tensors the host writes into the engine (Poplar's
        weightsFromHost program: PopTorch's copies of weights or named buffers to the
        device) to a logical IPU of every replica, charged to the IPU's first stage."""
        stage = next(index for index, s in enumerate(self.stages) if s.ipu == logical_ipu)
        self._host_io(logical_ipu, stage, -1, -1, h2d_bytes=nbytes)

    def _host_io(self, logical_ipu: int, stage: int, micro_batch: int, pipeline_cycle: int,
                 h2d_bytes: int = 0, d2h_bytes: int = 0) -> None:
        if self.run.synthetic_data or (h2d_bytes == 0 and d2h_bytes == 0):
            return
        pattern, n = self.run.sync_pattern, self.num_ipus
        active = set(self._physical[logical_ipu])
        streaming = self.run.total_replicas * self.ipus_per_replica  # share the host servers
        h2d = self.cost.host_transfer_ps(h2d_bytes, self.spec, streaming)
        d2h = self.cost.host_transfer_ps(d2h_bytes, self.spec, streaming, to_device=False)
        # How long each holds the machine's shared host link (the rest is the IPU's own hop).
        held = {"h2d_link": self.cost.host_link_held_ps(h2d_bytes, self.spec, streaming),
                "d2h_link": self.cost.host_link_held_ps(d2h_bytes, self.spec, streaming,
                                                        to_device=False)}
        if self.run.overlap_inputs if h2d_bytes else self.run.overlap_outputs:
            # The I/O tiles meet the host alone: no sync holds the compute tiles.
            prefetch = h2d_bytes > 0 and micro_batch < self.plan.micro_batches_per_step - 1
            for ipu in active:
                self.programs[ipu].append(HostIO((ipu,), 0, h2d, h2d_bytes, d2h, d2h_bytes, stage,
                                                 micro_batch, self.step, pipeline_cycle, True,
                                                 prefetch, **held))
            return
        groups = {gs1_group(pattern, ipu, n) for ipu in active}
        if self.folded:
            groups = {tuple(i for i in group if i < self.simulated_ipus) for group in groups}
        for group in sorted(groups):
            # One instruction for the IPUs that stream, one shared by those that only wait.
            moving = HostIO(group, self.cost.host_sync_ps, h2d, h2d_bytes, d2h, d2h_bytes,
                            stage, micro_batch, self.step, pipeline_cycle, **held)
            waiting = moving._replace(h2d=0, h2d_bytes=0, d2h=0, d2h_bytes=0)
            for ipu in group:
                self.programs[ipu].append(moving if ipu in active else waiting)

    # IPU to IPU ------------------------------------------------------------
    def exchange(self, copies: list[Copy], pipeline_cycle: int = -1) -> None:
        """An exchange on GS2: every IPU syncs, then the copies run in parallel."""
        nbytes = [0] * self.ipus_per_replica
        first: list[Copy | None] = [None] * self.ipus_per_replica
        for copy in copies:
            nbytes[copy.src] += copy.nbytes
            first[copy.src] = first[copy.src] or copy
        times = [self._ipu_copy_ps(b) for b in nbytes]
        phase = max(times, default=0)
        for logical in range(self.ipus_per_replica):
            tag = first[logical]
            stage, mb = (tag.stage, tag.micro_batch) if tag else (-1, -1)
            ins = Exchange(self._gs2, self._ipu_sync, phase, times[logical], nbytes[logical],
                           stage, mb, self.step, pipeline_cycle, IPU_COPY,
                           label(IPU_COPY, stage, nbytes[logical]))
            for program in self._programs_of[logical]:
                program.append(ins)

    def _ipu_copy_ps(self, nbytes: int) -> int:
        duration = self._copy_ps.get(nbytes)
        if duration is None:
            duration = self._copy_ps[nbytes] = self.cost.ipu_copy_ps(nbytes, self.spec.ipu,
                                                                     self.spec)
        return duration

    def _collective(self, kind: str, phase: int, times: list[int], nbytes: list[int],
                    pipeline_cycle: int, sync: int | None = None) -> None:
        sync = self._ipu_sync if sync is None else sync
        for logical in range(self.ipus_per_replica):
            ins = Exchange(self._gs2, sync, phase, times[logical], nbytes[logical],
                           -1, -1, self.step, pipeline_cycle, kind,
                           label(kind, -1, nbytes[logical]))
            for program in self._programs_of[logical]:
                program.append(ins)
