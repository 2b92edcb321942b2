"""Phased execution: one phase at a time, weights streamed in and out.

Each stage is a phase. Forward phases run in order over all the
micro-batches of an iteration, each first loading its weights from
streaming memory; backward phases run in reverse, each loading its weights
and optimizer state, computing the gradients, updating the weights and
storing them back. In inference the forward phases are the whole step.

Serial phased execution does each of these in turn. Parallel phased
execution alternates the phases between two groups of IPUs and plays
ping-pong: while one group computes a phase, the other streams in the state
of the next one, and a backward phase hands its gradients on before it
updates and stores its own weights. The overlap needs host I/O that does not
sync the idle group (SinglePipeline or ReplicaAndLadder); under Full every
host exchange of the computing group waits for the streaming one.
"""
from __future__ import annotations

from ipusim.schedule.builder import Copy, ProgramBuilder
from ipusim.work import Execution


class _Streams:
    """Which phases' state is on chip already, so nothing is streamed twice."""

    def __init__(self, b: ProgramBuilder):
        self.b, self.loaded = b, set()

    def load(self, k: int, nbytes: int) -> None:
        if k not in self.loaded:
            self.b.stream("stream_in", k, nbytes)
            self.loaded.add(k)


def emit_phased(b: ProgramBuilder) -> None:
    """Emit one call's worth of phased execution (serial or parallel) into ``b``."""
    run, stages = b.run, b.stages
    parallel = run.execution is Execution.PARALLEL_PHASED
    last = len(stages) - 1

    def elsewhere(k: int, other: int) -> bool:
        """Whether phase ``other`` exists and runs on another IPU than phase ``k``."""
        return parallel and 0 <= other <= last and stages[other].ipu != stages[k].ipu

    per_iteration = run.gradient_accumulation
    for iteration in range(run.device_iterations):
        mbs = range(iteration * per_iteration, (iteration + 1) * per_iteration)
        forward = _Streams(b)
        for k, stage in enumerate(stages):
            forward.load(k, stage.weight_bytes)
            if elsewhere(k, k + 1):
                forward.load(k + 1, stages[k + 1].weight_bytes)
            for mb in mbs:
                if k == 0:
                    b.host_input(mb)
                b.compute("forward", k, mb)
                if k == last:
                    b.host_output(mb)
            if k < last and stages[k + 1].ipu != stage.ipu:
                b.exchange([Copy(stage.ipu, stage.activation_bytes * len(mbs), k, mbs[0])])
        if not run.training:
            continue

        def state(k: int) -> int:
            # The last phase's weights are still on chip: only its optimizer state comes in.
            return stages[k].optimizer_bytes + (stages[k].weight_bytes if k < last else 0)

        backward = _Streams(b)
        for k in range(last, -1, -1):
            stage = stages[k]
            backward.load(k, state(k))
            if elsewhere(k, k - 1):
                backward.load(k - 1, state(k - 1))
            for mb in mbs:
                b.compute("backward", k, mb)
            hand_on = k > 0 and stages[k - 1].ipu != stage.ipu
            copy = [Copy(stage.ipu, stages[k - 1].activation_bytes * len(mbs), k, mbs[0])]
            if hand_on and parallel:  # the next phase starts while this one updates
                b.exchange(copy)
            b.weight_update([k])
            b.stream("stream_out", k, stage.weight_bytes + stage.optimizer_bytes)
            if hand_on and not parallel:
                b.exchange(copy)
