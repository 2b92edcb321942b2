"""Serial phased execution: one phase at a time, weights streamed in and out.

Each stage is a phase. Forward phases run in order over all the
micro-batches of an iteration, each first loading its weights from
streaming memory; backward phases run in reverse, each loading its weights
and optimizer state, computing the gradients, updating the weights and
storing them back. In inference the forward phases are the whole step.
"""
from __future__ import annotations

from ipusim.schedule.builder import Copy, ProgramBuilder


def emit_phased(b: ProgramBuilder) -> None:
    """Emit one call's worth of serial phased execution into ``b``."""
    run, stages = b.run, b.stages
    last = len(stages) - 1
    per_iteration = run.gradient_accumulation
    for iteration in range(run.device_iterations):
        mbs = range(iteration * per_iteration, (iteration + 1) * per_iteration)
        for k, stage in enumerate(stages):
            b.stream("stream_in", k, stage.weight_bytes)
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
        for k in range(last, -1, -1):
            stage = stages[k]
            state = stage.weight_bytes + stage.optimizer_bytes
            # The last phase's weights are still on chip: only its optimizer state comes in.
            b.stream("stream_in", k, stage.optimizer_bytes if k == last else state)
            for mb in mbs:
                b.compute("backward", k, mb)
            b.weight_update([k])
            b.stream("stream_out", k, state)
            if k > 0 and stages[k - 1].ipu != stage.ipu:
                b.exchange([Copy(stage.ipu, stages[k - 1].activation_bytes * len(mbs), k, mbs[0])])
