"""The operator-level compute model: the program steps one operator runs on an IPU.

A model's operators are priced one by one from their shapes, the way
Graphcore's own libraries plan and estimate them (graphcore/poplibs at commit
7eac0f2; ``PE`` below is lib/poplin/PerformanceEstimation.hpp, ``CM``
lib/poplin/ConvModel.cpp, ``PCE`` lib/popops/popopsCycleEstimators.cpp), so the
same parameters serve a CNN with five channels and BERT-Large:

- **Matmuls and convolutions** are the program poplin builds around its plan
  (:mod:`ipusim.cost.matmul_program`, :mod:`ipusim.cost.matmul_plan`): operand
  rearrangements and transposes, the convolve, the partials' reduction.
- **Vector operators** run popops' vertices: six workers each take a share of
  the tile's elements and pay the vertex's fixed cycles, then the cycles of the
  inner loop per 64-bit vector (PCE:63-84, 1493-1632).
- **Normalisations and softmax**, forward and backward, are the passes popnn's
  and poplin's programs make over the tensor (:data:`MULTI_PASS`); **max pooling**
  is popnn's pooling vertex; **gathers and copies** move their bytes through the
  exchange and a copy vertex.
- **Every operator is a list of program steps** (:mod:`ipusim.cost.program`): each
  compute set a sync, an exchange phase and its vertices (:attr:`TileFigures.sync_cycles`
  and :attr:`TileFigures.exchange_overhead_cycles` are the first two's fixed costs).

Worker cycles become tile cycles six to one: the six workers share the tile's
pipeline, each issuing one instruction in six (the estimators multiply a
worker's cycles by ``numWorkerContexts``).
"""
from __future__ import annotations

from dataclasses import replace
from functools import lru_cache
from math import ceil
from typing import TYPE_CHECKING

from ipusim.cost.matmul_program import matmul_program
from ipusim.cost.program import OperatorCycles, Step, compute_set
from ipusim.cost.work import Kernel, KernelKind
from ipusim.hardware import IPUSpec
from ipusim.hardware.specs import element_bytes

if TYPE_CHECKING:
    from ipusim.cost.tile_figures import TileFigures


#: Worker cycles per 64-bit vector of each vector kind, (16-bit, 32-bit): the
#: inner loop's cycles plus its loop overhead. Add and multiply: 1 cycle and 2 of
#: loop for the natural-width asm codelets (PCE:63-84, popopsCycleEstimators.hpp:
#: 310-311, 371-372); exp: 4 per 4 halves and 6 per 2 floats, the table's own
#: figures (popopsCycleEstimators.hpp:142-144: its entries unroll, so no loop
#: overhead is added, PCE:1497-1498; the 4 of loop PCE:1506 adds is the other
#: path's); divide: 21 per 4 halves and 10 per 2 floats (.hpp:348-349), which also
#: stands for sqrt (23, 10) and rsqrt (19, 8) (.hpp:193-194, 209-210).
CYCLES_PER_VECTOR: dict[KernelKind, tuple[float, float]] = {
    KernelKind.ELEMENTWISE: (3, 3),
    KernelKind.TRANSCENDENTAL: (4, 6),
    KernelKind.DIVIDE: (21, 10),
}

#: popnn's and poplin's multi-pass operators as their compute sets, each a vertex on
#: every tile: (name, add or multiply passes over the whole tensor, exp passes). A
#: set with no pass works on the per-group statistics: one vertex over a few elements.
#:
#: - normalisation forward (lib/poplin/Norms.cpp:126-249, 333-373 at 7eac0f2; popnn's
#:   group, layer and batch norms call it): one reduceMany of the sum and the sum of
#:   squares (two passes' work, two stages), the inverse standard deviation, then
#:   subtract, scale, gamma and beta: 6 passes, 7 compute sets;
#: - its backward (Norms.cpp:375-530, popart's GroupNormGradOpx): the whitening again
#:   (2), gamma's product (1), the statistics' gradients (a product, a reduction over
#:   twice the data in two stages, a copy, a product, an add, a scaled add, a scale: 8)
#:   and the parameters' (a product and a two-stage reduction over twice the data: 3):
#:   14 passes, 14 sets;
#: - softmax (lib/popnn/NonLinearity.cpp:71-148): the max's two-stage reduction, the
#:   subtraction, exp, the sum's two-stage reduction, its reciprocal and the scale: 4
#:   passes and an exp, 8 sets (log-softmax the same, with a log of the sums instead
#:   of their reciprocal);
#: - its backward (NonLinearity.cpp:152-181): a product, a two-stage reduction, a
#:   product and a subtraction: 4 passes, 5 compute sets.
MULTI_PASS: dict[KernelKind, tuple[tuple[str, int, int], ...]] = {
    KernelKind.NORMALISE: (
        ("Norm/Statistics/Reduce", 2, 0), ("Norm/Statistics/Reduce1", 0, 0),
        ("Norm/InvStdDev", 0, 0), ("Norm/Whiten/Subtract", 1, 0), ("Norm/Whiten/Scale", 1, 0),
        ("Norm/Gamma", 1, 0), ("Norm/Beta", 1, 0)),
    KernelKind.NORMALISE_GRAD: (
        ("NormGrad/Whiten/Subtract", 1, 0), ("NormGrad/Whiten/Scale", 1, 0),
        ("NormGrad/GammaProduct", 1, 0), ("NormGrad/Statistics/Product", 1, 0),
        ("NormGrad/Statistics/Reduce", 2, 0), ("NormGrad/Statistics/Reduce1", 0, 0),
        ("NormGrad/Statistics/Copy", 1, 0), ("NormGrad/Statistics/Product1", 1, 0),
        ("NormGrad/Statistics/Add", 1, 0), ("NormGrad/Statistics/ScaledAdd", 1, 0),
        ("NormGrad/Statistics/Scale", 1, 0), ("NormGrad/Parameters/Product", 1, 0),
        ("NormGrad/Parameters/Reduce", 2, 0), ("NormGrad/Parameters/Reduce1", 0, 0)),
    KernelKind.SOFTMAX: (
        ("Softmax/Max/Reduce", 1, 0), ("Softmax/Max/Reduce1", 0, 0),
        ("Softmax/Subtract", 1, 0), ("Softmax/Exp", 0, 1), ("Softmax/Sum/Reduce", 1, 0),
        ("Softmax/Sum/Reduce1", 0, 0), ("Softmax/Reciprocal", 0, 0), ("Softmax/Scale", 1, 0)),
    KernelKind.SOFTMAX_GRAD: (
        ("SoftmaxGrad/Product", 1, 0), ("SoftmaxGrad/Reduce", 1, 0),
        ("SoftmaxGrad/Reduce1", 0, 0), ("SoftmaxGrad/Product1", 1, 0),
        ("SoftmaxGrad/Subtract", 1, 0)),
}

#: Worker cycles a vector vertex pays besides its loop, for every vector kind:
#: BinaryOp1D's 29 for float (PCE:1614-1632); its 26 for half and UnaryOp1D's 17 or
#: 33 (PCE:1543-1559) are within a few cycles of it. The supervisor adds 11
#: (lib/popops/PerformanceEstimation.cpp:19-30).
VECTOR_WORKER_OVERHEAD = 29
VECTOR_SUPERVISOR_OVERHEAD = 11

#: The vertex each single-pass kind runs, one compute set on every tile: the step's name.
VECTOR_STEP_NAMES: dict[KernelKind, str] = {
    KernelKind.ELEMENTWISE: "Map",
    KernelKind.TRANSCENDENTAL: "Map",
    KernelKind.DIVIDE: "Map",
    KernelKind.DATA: "Copy",
    KernelKind.GATHER: "MultiSlice",
    KernelKind.POOL: "MaxPool",
    KernelKind.POOL_GRAD: "MaxPoolGrad",
}


def kernel_cycles(kernel: Kernel, ipu: IPUSpec, model: TileFigures) -> float:
    """Cycles of ``kernel`` on one IPU: its busiest tile's work and its compute sets."""
    return operator_cycles(kernel, ipu, model).total


@lru_cache(maxsize=65536)
def operator_cycles(kernel: Kernel, ipu: IPUSpec, model: TileFigures) -> OperatorCycles:
    """The program steps of ``kernel`` on one IPU, each priced on its busiest tile."""
    if kernel.kind is KernelKind.MATMUL:
        if kernel.available_memory is not None:  # the operator's own bound on its plan
            model = replace(model, available_memory_proportion=kernel.available_memory,
                            available_memory_by_ipu=())
        return matmul_program(kernel, ipu, model)
    if kernel.kind is KernelKind.DROPOUT:
        return OperatorCycles(_dropout_steps(kernel, ipu, model))
    if kernel.kind in MULTI_PASS:
        steps: tuple[Step, ...] = ()
        for name, passes, exps in MULTI_PASS[kernel.kind]:
            cycles = passes * _vector_cycles(kernel, ipu, KernelKind.ELEMENTWISE) \
                + exps * _vector_cycles(kernel, ipu, KernelKind.TRANSCENDENTAL) \
                if passes or exps else _vector_cycles(Kernel(kernel.kind, kernel.width,
                                                             elements=1), ipu,
                                                      KernelKind.ELEMENTWISE)
            steps += compute_set(name, cycles, model, ipu)
        return OperatorCycles(steps)
    name = VECTOR_STEP_NAMES[kernel.kind]
    received = 0.0
    if kernel.kind is KernelKind.DATA:
        received, cycles = _copy_cycles(kernel, ipu)
    elif kernel.kind is KernelKind.GATHER:
        received, cycles = _gather_cycles(kernel, ipu)
    elif kernel.kind in (KernelKind.POOL, KernelKind.POOL_GRAD):
        cycles = _pool_cycles(kernel, ipu)
    else:
        cycles = _vector_cycles(kernel, ipu)
    return OperatorCycles(compute_set(name, cycles, model, ipu, received_bytes=received))


def _vector_cycles(kernel: Kernel, ipu: IPUSpec, kind: KernelKind | None = None) -> float:
    """Tile cycles of one pass of a vector vertex (of ``kind``, the kernel's own by
    default) on its busiest tile: each worker's overhead and its share of the
    vectors at the kind's cycles per vector."""
    width = element_bytes(kernel.width)
    vectors = ceil(kernel.elements * width / ipu.vector_bytes_per_cycle)
    tiles = max(1, min(ipu.tiles, ceil(vectors / ipu.workers)))  # one vector a worker at least
    half, full = CYCLES_PER_VECTOR[kind or kernel.kind]
    per_worker = ceil(ceil(vectors / tiles) / ipu.workers)
    return VECTOR_SUPERVISOR_OVERHEAD + ipu.workers * (
        VECTOR_WORKER_OVERHEAD + per_worker * (half if width <= 2 else full))


#: popnn's pooling vertex estimate, getPoolingCycles (lib/popnn/PerformanceEstimation.hpp:
#: 127-245 at 7eac0f2), per worker: a fixed 41 cycles (with the output's, the start
#: positions' and the work list's unpacking at the planner's 2 each; 51 for the
#: gradient, which unpacks two more pointers and sets up 6 more), 4 and one per
#: output it zeroes, 15 per output row and, per row and kernel position (a work
#: item), 28 plus the repeat loop along the row: 4 + 3 per further output for the
#: maximum, 7 + 5 for the gradient (MaxPoolingGrad). Six worker cycles to a tile
#: cycle, and 13 of supervisor around them.
POOL_WORKER_FIXED = (41, 51)
POOL_CYCLES_PER_ROW = 15
POOL_CYCLES_PER_ITEM = 28
POOL_LOOP = ((4, 3), (7, 5))   # (set-up, per further output) of the max and the gradient
POOL_SUPERVISOR = 13


def _pool_cycles(kernel: Kernel, ipu: IPUSpec) -> float:
    """Max pooling (or its gradient) on its busiest tile: ``kernel.m`` output rows of
    ``kernel.n`` outputs, ``kernel.k`` kernel positions, its rows spread over the
    tiles and each tile's over its six workers. Channels are not vectorised: a
    PyTorch tensor keeps them outermost (an assumption for channel counts that
    popnn would group)."""
    gradient = kernel.kind is KernelKind.POOL_GRAD
    rows = ceil(ceil(kernel.m / ipu.tiles) / ipu.workers)
    setup, per_output = POOL_LOOP[gradient]
    item = POOL_CYCLES_PER_ITEM + setup + per_output * max(kernel.n - 1, 0)
    worker = POOL_WORKER_FIXED[gradient] + 4 + rows * kernel.n \
        + rows * (POOL_CYCLES_PER_ROW + kernel.k * item)
    return POOL_SUPERVISOR + ipu.workers * worker


#: poprand's dropout (lib/poprand/RandomGen.cpp:520-585 at 7eac0f2): the hardware seeds
#: saved, the seed set from PopART's, the Dropout vertex drawing and applying the mask,
#: the seeds restored: four compute sets. The vertex: 6 cycles of supervisor, 24 a
#: worker, 2 per 64-bit vector of the tile's elements; SetSeed: 14 and 27 a worker
#: (lib/poprand/poprandCycleEstimators.cpp:125-146).
DROPOUT_SUPERVISOR, DROPOUT_WORKER, DROPOUT_CYCLES_PER_VECTOR = 6, 24, 2
SET_SEED_SUPERVISOR, SET_SEED_WORKER = 14, 27


def _dropout_steps(kernel: Kernel, ipu: IPUSpec, model: TileFigures) -> tuple[Step, ...]:
    """Dropout over ``kernel.elements``, spread over the tiles, on the busiest tile:
    its four compute sets. Reading and restoring the hardware seeds have no
    published estimate: their sets cost their sync and exchange phase alone."""
    vectors = ceil(kernel.elements * element_bytes(kernel.width) / ipu.vector_bytes_per_cycle)
    per_tile = ceil(vectors / ipu.tiles)
    dropout = DROPOUT_SUPERVISOR + ipu.workers * DROPOUT_WORKER \
        + DROPOUT_CYCLES_PER_VECTOR * per_tile
    set_seed = SET_SEED_SUPERVISOR + ipu.workers * SET_SEED_WORKER
    return (compute_set("Dropout/GetSeeds", 0.0, model, ipu, glue=True)
            + compute_set("Dropout/SetSeed", set_seed, model, ipu, glue=True)
            + compute_set("Dropout", dropout, model, ipu)
            + compute_set("Dropout/RestoreSeeds", 0.0, model, ipu, glue=True))


def _copy_cycles(kernel: Kernel, ipu: IPUSpec) -> tuple[float, float]:
    """A gather, scatter, cast or copy: the bytes that cross the exchange to the
    busiest tile, and the cycles of the copy vertex writing them at one 64-bit
    vector a cycle."""
    per_tile = kernel.bytes / ipu.tiles
    copy = VECTOR_SUPERVISOR_OVERHEAD + ipu.workers * VECTOR_WORKER_OVERHEAD \
        + ceil(per_tile / ipu.vector_bytes_per_cycle)
    return per_tile, copy


#: popops' MultiSlice vertex (lib/popops/PerformanceEstimation.cpp:49-122): 30 cycles
#: of prologue a worker, 19 per offset, then 2 cycles per vector of 2 halves or 2
#: floats (3 per 4 bytes).
MULTISLICE_WORKER_OVERHEAD = 30
MULTISLICE_CYCLES_PER_OFFSET = 19


def _gather_cycles(kernel: Kernel, ipu: IPUSpec) -> tuple[float, float]:
    """An embedding lookup (or its gradient) as popops' multi-slice: the table's
    columns are spread over the tiles, whole vectors each, and tiles left over
    share out the indices; each worker copies its indices' vectors. The rows then
    cross the exchange to the tiles that use them: the bytes the busiest tile
    receives, and the vertex's cycles."""
    width = element_bytes(kernel.width)
    per_vector = {1: 4, 2: 2}.get(width, ipu.vector_bytes_per_cycle // 4)
    cycles_per_vector = 3 if width == 1 else 2
    row_vectors = max(1, ceil(kernel.n / per_vector))
    column_tiles = min(ipu.tiles, row_vectors)
    indices = ceil(kernel.m / max(1, ipu.tiles // column_tiles))
    per_worker = ceil(indices / ipu.workers)
    worker = MULTISLICE_WORKER_OVERHEAD + per_worker * (
        MULTISLICE_CYCLES_PER_OFFSET + cycles_per_vector * ceil(row_vectors / column_tiles))
    return kernel.m * kernel.n * width / ipu.tiles, ipu.workers * worker
