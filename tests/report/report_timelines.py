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
QUICK_CALLS = dataclasses.replace(CALIBRATED_MK2, engine_run_ps=250 * 10**6)  # a 0.3 ms host call
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


def layer_stage(index: int, width: int = 512, roofline: bool = False) -> Stage:
    """A measured-looking stage on IPU ``index``: two fp16 matmuls, a GELU and a layer norm
    forward, their gradients backward; with ``roofline``, a hand-written cost instead (FLOPs
    and bytes, no operators) of about the same time."""
    rows = 4 * 128  # micro-batch 4, sequence 128
    matmul = Kernel(KernelKind.MATMUL, 2, m=rows, k=width, n=4 * width)
    down = Kernel(KernelKind.MATMUL, 2, m=rows, k=4 * width, n=width)
    gelu = Kernel(KernelKind.TRANSCENDENTAL, 2, elements=rows * 4 * width)
    norm = Kernel(KernelKind.NORMALISE, 2, elements=rows * width)
    flops = 2 * 2 * rows * width * 4 * width
    if roofline:
        # The roofline runs at the calibrated fp32 efficiency: a sixteenth of the FLOPs
        # takes about as long as the operators.
        forward, backward = Cost(flops=flops / 16, bytes=8 * rows * width, ops=4), \
            Cost(flops=flops / 8, bytes=16 * rows * width, ops=8)
    else:
        forward = Cost(flops=flops, kernels=((matmul, 1), (down, 1), (gelu, 1), (norm, 1)))
        backward = Cost(flops=2 * flops, kernels=((matmul, 2), (down, 2), (gelu, 2), (norm, 2)))
    return Stage(f"layer{index}", index, forward, backward, activation_bytes=rows * width * 2,
                 stash_bytes=4 * rows * width * 2, weight_bytes=8 * width * width * 2,
                 weight_tensors=4, optimizer_bytes=16 * width * width * 2)


def operator_pipeline_run(roofline: tuple[int, ...] = (), micro_batches: int = 8, steps: int = 1,
                          training: bool = True, replicas: int = 1, recompute: bool = False):
    """Four stages of measured operators (the stages in ``roofline`` hand-written instead),
    pipelined over 4 IPUs a replica (recomputing the forward before the backward with
    ``recompute``)."""
    work = Work(tuple(layer_stage(k, roofline=k in roofline) for k in range(4)),
                micro_batch_size=4, input_bytes_per_sample=4096, output_bytes_per_sample=16)
    batching = ({"gradient_accumulation": micro_batches} if training
                else {"device_iterations": micro_batches})
    run = RunConfig(execution=Execution.PIPELINED, training=training, replicas=replicas,
                    recompute=recompute, **batching)
    return simulate(work, run, system_spec("mk2", 4 * replicas), steps=steps)
