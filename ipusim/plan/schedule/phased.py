"""Phased execution: one phase at a time, weights streamed in and out.

Each stage is a phase. Forward phases run in order over all the
micro-batches of an iteration, each first loading its weights from
streaming memory; backward phases run in reverse, each loading its weights
and optimizer state, computing the gradients, updating the weights and
storing them back. In inference the forward phases are the whole step.
What an IPU still holds from the last phase it ran is not streamed again.
With ``stash_off_chip`` (PopTorch's tensor liveness off chip) a training
phase streams the activations it keeps for the backward out after its
forward pass and back in before its backward pass, so one phase's stash at a
time is on chip.

Serial phased execution does each of these in turn. Parallel phased
execution alternates the phases between two groups of IPUs and plays
ping-pong: while one group computes a phase, the other streams in the state
of the next one, and a backward phase hands its gradients on before it
updates and stores its own weights. The overlap needs host I/O that does not
sync the idle group (SinglePipeline or ReplicaAndLadder); under Full every
host exchange of the computing group waits for the streaming one.
"""
from __future__ import annotations

from ipusim.cost.work import Execution
from ipusim.engine.event_kinds import BACKWARD, FORWARD, STREAM_IN, STREAM_OUT
from ipusim.plan.schedule.builder import Copy, ProgramBuilder


class _OnChip:
    """Which phase's state each IPU holds, so that none is streamed in twice.

    An IPU keeps the weights (and, once loaded, the optimizer state) of the
    last phase it ran until another phase replaces them; storing state back
    to streaming memory leaves the on-chip copy in place. Nothing is assumed
    to survive from one call to the next.
    """

    def __init__(self, b: ProgramBuilder):
        self.b = b
        self.phase: dict[int, int] = {}          # IPU -> the phase whose state it holds
        self.with_optimizer: dict[int, bool] = {}

    def load(self, k: int, optimizer: bool) -> None:
        """Stream in what phase ``k`` needs that its IPU does not hold yet."""
        stage = self.b.stages[k]
        held = self.phase.get(stage.ipu) == k
        nbytes = 0 if held else stage.weight_bytes
        if optimizer and not (held and self.with_optimizer[stage.ipu]):
            nbytes += stage.optimizer_bytes
        self.b.stream(STREAM_IN, k, nbytes)
        self.with_optimizer[stage.ipu] = optimizer or (held and self.with_optimizer[stage.ipu])
        self.phase[stage.ipu] = k


def emit_phased(b: ProgramBuilder) -> None:
    """Emit one call's worth of phased execution (serial or parallel) into ``b``."""
    run, stages = b.run, b.stages
    parallel = run.execution is Execution.PARALLEL_PHASED
    last = len(stages) - 1
    on_chip = _OnChip(b)

    def elsewhere(k: int, other: int) -> bool:
        """Whether phase ``other`` exists and runs on another IPU than phase ``k``."""
        return parallel and 0 <= other <= last and stages[other].ipu != stages[k].ipu

    per_iteration = run.gradient_accumulation
    for iteration in range(run.device_iterations):
        mbs = range(iteration * per_iteration, (iteration + 1) * per_iteration)
        for k, stage in enumerate(stages):
            on_chip.load(k, optimizer=False)
            if elsewhere(k, k + 1):  # the other group loads the next phase meanwhile
                on_chip.load(k + 1, optimizer=False)
            for mb in mbs:
                if k == 0:
                    b.host_input(mb)
                b.compute(FORWARD, k, mb)
                if k == last:
                    b.host_output(mb)
            if run.training and run.stash_off_chip:
                b.stream(STREAM_OUT, k, stage.stash_bytes * len(mbs))
            if k < last and stages[k + 1].ipu != stage.ipu:
                b.exchange([Copy(stage.ipu, stage.activation_bytes * len(mbs), k, mbs[0])])
        if not run.training:
            continue
        for k in range(last, -1, -1):
            stage = stages[k]
            on_chip.load(k, optimizer=True)
            if elsewhere(k, k - 1):
                on_chip.load(k - 1, optimizer=True)
            if run.stash_off_chip:
                b.stream(STREAM_IN, k, stage.stash_bytes * len(mbs))
            for mb in mbs:
                b.compute(BACKWARD, k, mb)
            # The gradients of phase k - 1's outputs, when they cross to another IPU.
            gradients = ([Copy(stage.ipu, stages[k - 1].activation_bytes * len(mbs), k, mbs[0])]
                         if k > 0 and stages[k - 1].ipu != stage.ipu else [])
            if gradients and parallel:  # the next phase starts while this one updates
                b.exchange(gradients)
            b.weight_update([k])
            b.stream(STREAM_OUT, k, stage.weight_bytes + stage.optimizer_bytes)
            if gradients and not parallel:
                b.exchange(gradients)
