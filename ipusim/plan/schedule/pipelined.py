"""Pipelined execution, as PopART schedules it.

With F forward stages a training pipeline has P = 2F - 1 stages: forward
stages 0 .. F-1, then backward stages F-1 .. 0, the last forward stage fused
with the first backward one. Inference has P = F. With N micro-batches a
pipeline run takes N + P - 1 cycles (P - 1 ramp-up, N - P + 1 main, P - 1
ramp-down); in cycle c pipeline stage j works on micro-batch c - j. Every
cycle runs host-to-device fragments, the stages' compute (stages sharing an
IPU run one after the other), device-to-host, then the inter-IPU copies on
GS2. Training flushes the pipeline before the weight update.
"""
from __future__ import annotations

from ipusim.engine.event_kinds import BACKWARD, FORWARD, RECOMPUTE
from ipusim.plan.pipeline_stages import PipelineStage, pipeline_stages
from ipusim.plan.schedule.builder import Copy, ProgramBuilder

__all__ = ["PipelineStage", "emit_pipelined", "pipeline_stages"]


def emit_pipelined(b: ProgramBuilder) -> None:
    """Emit one call's worth of pipelined execution into ``b``."""
    run, stages, plan = b.run, b.stages, b.plan
    pipeline, runs, per_run = plan.pipeline, plan.pipeline_runs, plan.micro_batches_per_run
    last = len(stages) - 1
    for r in range(runs):
        b.load_offloaded_weights()
        base = r * per_run
        for pipeline_cycle in range(per_run + len(pipeline) - 1):
            if pipeline_cycle < per_run:
                b.host_input(base + pipeline_cycle, pipeline_cycle)
            copies = []
            for j, ps in enumerate(pipeline):
                m = pipeline_cycle - j
                if not 0 <= m < per_run:
                    continue
                k, ipu = ps.stage, stages[ps.stage].ipu
                if ps.forward:
                    b.compute(FORWARD, k, base + m, pipeline_cycle)
                    if k < last and stages[k + 1].ipu != ipu:
                        copies.append(Copy(ipu, stages[k].activation_bytes, k, base + m))
                if ps.backward:
                    if run.recompute and not ps.forward:
                        b.compute(RECOMPUTE, k, base + m, pipeline_cycle)
                    b.compute(BACKWARD, k, base + m, pipeline_cycle)
                    if k > 0 and stages[k - 1].ipu != ipu:
                        copies.append(Copy(ipu, stages[k - 1].activation_bytes, k, base + m))
            out = pipeline_cycle - last
            if 0 <= out < per_run:
                b.host_output(base + out, pipeline_cycle)
            b.exchange(copies, pipeline_cycle)
        if run.training:
            b.weight_update()
