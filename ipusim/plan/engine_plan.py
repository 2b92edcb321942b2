"""The engine plan: what an engine's work, run and system fix once, before any call.

A :class:`Simulation` builds one :class:`EnginePlan` when it is created: the
stages as the schedule runs them (merged, and priced on the system's compute
tiles), the IPUs the engine spans, the pipeline's depth and how many
micro-batches go through it. The schedules, the memory model and the figures
read these numbers here instead of working them out again.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, NamedTuple

from ipusim.cost.cost_model import DEFAULT, CostModel
from ipusim.cost.work import Cost, Execution, Stage, Work
from ipusim.engine import replicas
from ipusim.plan.pipeline_stages import PipelineStage, pipeline_stages

if TYPE_CHECKING:
    import numpy as np

    from ipusim.hardware import IPUSpec, SystemSpec
    from ipusim.plan.run_config import RunConfig


class StagePrices(NamedTuple):
    """A stage's costs and their durations on this system, per micro-batch. The
    backward includes the optimizer's adds into the gradient accumulators, whose
    share of it is ``accumulate_ps``."""

    forward: Cost
    backward: Cost
    recompute: Cost
    update: Cost
    forward_ps: int
    backward_ps: int
    recompute_ps: int
    update_ps: int
    accumulate_ps: int = 0


def price(stage: Stage, run: RunConfig, ipu: IPUSpec, cost: CostModel) -> StagePrices:
    """What one micro-batch of ``stage`` costs on ``ipu`` (its compute tiles).

    With the optimizer state sharded, each replica updates its share of the
    weights: a derived update is priced on that share (its fixed costs
    whole), a given one divided by the shards.
    """
    shards = run.optimizer_shards
    cost = cost.on_ipu(stage.ipu)
    share = (stage if shards == 1 or stage.update is not None
             else replace(stage, weight_bytes=-(-stage.weight_bytes // shards)))
    update = run.optimizer.update_cost(share, run.accumulating)
    update_ps = cost.compute_ps(update, ipu)
    if stage.update is not None:
        update_ps = -(-update_ps // shards)
    # With gradient accumulation, each micro-batch's backward also adds its gradients
    # into the accumulators.
    accumulate = run.optimizer.accumulate_cost(stage, run.accumulating)
    backward = stage.backward + accumulate
    return StagePrices(stage.forward, backward, stage.recompute_cost, update,
                       cost.compute_ps(stage.forward, ipu), cost.compute_ps(backward, ipu),
                       cost.compute_ps(stage.recompute_cost, ipu), update_ps,
                       cost.compute_ps(accumulate, ipu))


@dataclass(frozen=True)
class EnginePlan:
    """One engine's shape, worked out once from its work, run and system.

    ``work`` holds the stages as the schedule runs them (consecutive stages
    on one IPU merged, except in phased execution) and ``prices`` what each
    costs per micro-batch. A pipeline run is one fill and flush of the
    pipeline: a device iteration in training, a whole call in inference.
    """

    run: RunConfig
    work: Work
    prices: tuple[StagePrices, ...]
    cost: CostModel
    ipus_per_replica: int
    num_ipus: int                 # replicas x IPUs per replica
    forward_stages: int           # F
    pipeline: tuple[PipelineStage, ...]  # the P pipeline stages; empty unless pipelined
    pipeline_runs: int            # pipeline runs per call
    micro_batches_per_run: int
    micro_batches_per_step: int   # per replica and call
    returned_micro_batches: range  # those of a call whose outputs go back to the host

    @classmethod
    def build(cls, work: Work, run: RunConfig, system: SystemSpec,
              cost: CostModel = DEFAULT) -> EnginePlan:
        """The plan of ``work`` run as ``run`` on ``system``, priced with ``cost``."""
        scheduled = run.scheduled(
            work, lambda stage: run.optimizer.update_cost(stage, run.accumulating),
            lambda stage: run.optimizer.accumulate_cost(stage, run.accumulating))
        compute_ipu = run.compute_ipu(system.ipu)
        forward_stages = len(scheduled.stages)
        pipelined = run.execution is Execution.PIPELINED
        if run.training:
            runs, per_run = run.device_iterations, run.gradient_accumulation
        else:
            runs, per_run = 1, run.device_iterations
        return cls(
            run=run, work=scheduled,
            prices=tuple(price(stage, run, compute_ipu, cost) for stage in scheduled.stages),
            cost=cost,
            ipus_per_replica=scheduled.ipus_per_replica,
            num_ipus=run.ipus(scheduled),
            forward_stages=forward_stages,
            pipeline=(tuple(pipeline_stages(forward_stages, run.training)) if pipelined else ()),
            pipeline_runs=runs, micro_batches_per_run=per_run,
            micro_batches_per_step=run.micro_batches_per_step,
            returned_micro_batches=run.returned_micro_batches)

    @property
    def stages(self) -> tuple[Stage, ...]:
        """The stages as the schedule runs them."""
        return self.work.stages

    @property
    def pipeline_depth(self) -> int:
        """P: pipeline stages of a pipelined run (0 when the run is not pipelined)."""
        return len(self.pipeline)

    @property
    def items_per_call(self) -> int:
        """Samples one call to the model processes over the engine's replicas."""
        return self.run.replicas * self.micro_batches_per_step * self.work.micro_batch_size

    def replica_of(self, ipu: int | np.ndarray) -> int | np.ndarray:
        """The replica whose IPUs include ``ipu`` (an index, or an array of them): replica r
        has IPUs r x IPUs per replica on."""
        return replicas.replica_of(ipu, self.ipus_per_replica)

    def ipu_of(self, replica: int | np.ndarray, index: int | np.ndarray) -> int | np.ndarray:
        """IPU ``index`` of ``replica`` (indices, or arrays of them): the inverse of
        :meth:`replica_of`."""
        return replicas.ipu_of(replica, index, self.ipus_per_replica)
