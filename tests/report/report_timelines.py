"""Timelines the report tests build: small, exact (fixed stage times), quick to simulate."""
import dataclasses
from functools import partial

from ipusim import (
    Cost,
    Execution,
    Kernel,
    KernelKind,
    RunConfig,
    Stage,
    SyncPattern,
    Work,
    simulate,
    system_spec,
)
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


def operator_run():
    """A 2-stage pipeline whose passes list their operators, as the shim measures them."""
    def cost(*ops):
        return Cost(kernels=tuple(ops), ops=len(ops))

    matmul = Kernel(KernelKind.MATMUL, 2, m=512, k=1024, n=1024, op="aten::addmm")
    relu = Kernel(KernelKind.ELEMENTWISE, 2, elements=1 << 19, bytes=1 << 21, op="aten::relu")
    grad = Kernel(KernelKind.MATMUL, 2, m=1024, k=512, n=1024, op="aten::mm")
    stages = tuple(Stage(f"s{k}", k, cost((matmul, 1), (relu, 2)), cost((grad, 2), (relu, 1)),
                         activation_bytes=1 << 20, weight_bytes=1 << 21) for k in range(2))
    run = RunConfig(gradient_accumulation=6, execution=Execution.PIPELINED)
    return simulate(Work(stages, micro_batch_size=8, input_bytes_per_sample=4096),
                    run, system_spec("mk2", 2), steps=2)
