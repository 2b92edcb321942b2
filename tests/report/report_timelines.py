"""Timelines the report tests build: small, exact (fixed stage times), quick to simulate."""
import dataclasses
from functools import partial

from ipusim import Cost, Execution, RunConfig, Stage, SyncPattern, Work, simulate, system_spec
from ipusim.cost.cost_model import CALIBRATED_MK2

# The hand-written runs here are built to show one bottleneck; a short host round
# trip per call (instead of the calibrated one) keeps it from masking that one.
QUICK_CALLS = dataclasses.replace(CALIBRATED_MK2, call_overhead_ps=300 * 10**6)
simulate = partial(simulate, cost_model=QUICK_CALLS)


US = 10**6  # picoseconds


def stages(count: int, forward_us: float = 50, backward_us: float = 100) -> tuple[Stage, ...]:
    """``count`` identical stages with fixed times, one per IPU."""
    return tuple(Stage(f"block{k}", k, Cost(time_ps=int(forward_us * US), ops=1),
                       Cost(time_ps=int(backward_us * US), ops=1),
                       activation_bytes=65536, stash_bytes=1 << 20, weight_bytes=4 << 20,
                       optimizer_bytes=8 << 20) for k in range(count))


def pipeline_run(micro_batches: int = 8, replicas: int = 1, steps: int = 1, **run_fields):
    """A 4-stage pipelined training run (Fig 4.1's shape: 4 IPUs, G micro-batches)."""
    work = Work(stages(4), micro_batch_size=4, input_bytes_per_sample=4096,
                output_bytes_per_sample=16)
    run = RunConfig(gradient_accumulation=micro_batches, replicas=replicas,
                    execution=Execution.PIPELINED, **run_fields)
    return simulate(work, run, system_spec("mk2", 4 * replicas), steps=steps)


def replicated_run():
    """A single-IPU model on 4 replicas sharing a host link, SinglePipeline, 3 steps."""
    work = Work(stages(1), micro_batch_size=16, input_bytes_per_sample=16384,
                output_bytes_per_sample=40)
    run = RunConfig(replicas=4, device_iterations=4, sync_pattern=SyncPattern.SINGLE_PIPELINE)
    return simulate(work, run, system_spec("mk2", 4), steps=3)
