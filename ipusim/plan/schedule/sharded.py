"""Sharded execution: one stage at a time, micro-batch after micro-batch.

A single-IPU model is the one-stage case. Each micro-batch streams in, runs
forward stage by stage (activations copied to the next stage's IPU), streams
its outputs back, then runs backward in reverse, each stage recomputing its
forward first when recomputation is on; after the gradient accumulation
count of micro-batches the weights are updated.
"""
from __future__ import annotations

from ipusim.engine.event_kinds import BACKWARD, FORWARD, RECOMPUTE
from ipusim.plan.schedule.builder import Copy, ProgramBuilder


def emit_sharded(b: ProgramBuilder) -> None:
    """Emit one call's worth of sharded execution into ``b``."""
    stages, run = b.stages, b.run
    last = len(stages) - 1
    for iteration in range(run.device_iterations):
        b.load_offloaded_weights()
        for g in range(run.gradient_accumulation):
            mb = iteration * run.gradient_accumulation + g
            b.host_input(mb)
            for k, stage in enumerate(stages):
                b.compute(FORWARD, k, mb)
                if k < last and stages[k + 1].ipu != stage.ipu:
                    b.exchange([Copy(stage.ipu, stage.activation_bytes, k, mb)])
            b.host_output(mb)
            if not run.training:
                continue
            for k in range(last, -1, -1):
                if run.recompute:
                    b.compute(RECOMPUTE, k, mb)
                b.compute(BACKWARD, k, mb)
                if k > 0 and stages[k - 1].ipu != stages[k].ipu:
                    b.exchange([Copy(stages[k].ipu, stages[k - 1].activation_bytes, k, mb)])
        if run.training:
            b.weight_update()
