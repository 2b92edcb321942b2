"""The operator-level compute model: the tile cycles one operator takes on an IPU.

A model's operators are priced one by one from their shapes, the way
Graphcore's own libraries plan and estimate them (graphcore/poplibs at commit
7eac0f2; ``PE`` below is lib/poplin/PerformanceEstimation.hpp, ``CM``
lib/poplin/ConvModel.cpp, ``PCE`` lib/popops/popopsCycleEstimators.cpp), so the
same parameters serve a CNN with five channels and BERT-Large:

- **Matmuls and convolutions** are planned as poplin plans them (:func:`plan_matmul`).
  A matmul is a 1x1 convolution (lib/poplin/MatMul.cpp:235-273): its rows are the
  field, its reduction dimension the input channels, its columns the output
  channels; the planner may swap the operands (ConvPlan.cpp:716-753). The
  planner splits conv groups, rows, input-channel groups and output-channel
  groups over the tiles and keeps the split whose busiest tile is quickest:
  its AMP passes (the ConvPartial1x1Out vertex estimate), the operand bytes it
  *receives* (each operand broadcast to the tiles that share it, CM:1058-1068),
  and, where the reduction dimension is split, the partial sums' exchange and
  their multi-stage reduction (CM:1077-1136, ConvReducePlan.cpp:22-26).
- **Vector operators** run popops' vertices: six workers each take a share of
  the tile's elements and pay the vertex's fixed cycles, then the cycles of the
  inner loop per 64-bit vector (PCE:63-84, 1493-1632).
- **Normalisations and softmax**, forward and backward, are the passes popnn's
  and poplin's programs make over the tensor (:data:`MULTI_PASS`); **max pooling**
  is popnn's pooling vertex; **gathers and copies** move their bytes through the
  exchange and a copy vertex.
- **Every compute set** ends in an on-chip sync and opens an exchange phase:
  :attr:`CostModel.sync_cycles` and :attr:`CostModel.exchange_overhead_cycles`.

Worker cycles become tile cycles six to one: the six workers share the tile's
pipeline, each issuing one instruction in six (the estimators multiply a
worker's cycles by ``numWorkerContexts``).
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import lru_cache
from math import ceil
from typing import TYPE_CHECKING

import numpy as np

from ipusim.cost.work import Kernel, KernelKind
from ipusim.hardware import IPUSpec

if TYPE_CHECKING:
    from ipusim.cost.cost_model import CostModel


@dataclass(frozen=True)
class OperatorCycles:
    """Where one operator's cycles go on its busiest tile.

    ``amp``: the AMP's passes with their vertex and pass overheads; ``exchange``:
    the operand, partial-sum and copied bytes the tile receives; ``sync``: the fixed cost of
    each compute set (its sync and the opening of its exchange phase);
    ``vector``: vector-unit work (element-wise ops, reductions, casts, copies)
    with its vertex overheads.
    """

    amp: float = 0.0
    exchange: float = 0.0
    sync: float = 0.0
    vector: float = 0.0
    compute_sets: int = 0

    @property
    def total(self) -> float:
        """All cycles of the operator."""
        return self.amp + self.exchange + self.sync + self.vector

    def __add__(self, other: OperatorCycles) -> OperatorCycles:
        return OperatorCycles(*(getattr(self, f.name) + getattr(other, f.name)
                                for f in fields(self)))

    def times(self, count: int) -> OperatorCycles:
        """The cycles of ``count`` runs of the operator."""
        return OperatorCycles(*(getattr(self, f.name) * count for f in fields(self)))


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

#: The passes over the whole tensor of popnn's multi-pass operators, as (add or
#: multiply passes, exp passes, compute sets), each pass a vertex on every tile:
#:
#: - normalisation forward (lib/poplin/Norms.cpp:126-249, 333-373 at 7eac0f2; popnn's
#:   group, layer and batch norms call it): one reduceMany of the sum and the sum of
#:   squares (two passes' work, two stages), the inverse standard deviation (a small
#:   compute set), then subtract, scale, gamma and beta: 6 passes, 7 compute sets;
#: - its backward (Norms.cpp:375-530, popart's GroupNormGradOpx): the whitening again
#:   (2), gamma's product (1), the statistics' gradients (a product, a reduction over
#:   twice the data, a copy, a product, an add, a scaled add, a scale: 8) and the
#:   parameters' (a product and a reduction over twice the data: 3): 14 passes, 14 sets;
#: - softmax (lib/popnn/NonLinearity.cpp:71-148): the max's reduction, the subtraction,
#:   exp, the sum's reduction, its reciprocal and the scale: 4 passes and an exp, 8 sets
#:   (log-softmax the same, with a log of the sums instead of their reciprocal);
#: - its backward (NonLinearity.cpp:152-181): a product, a reduction, a product and a
#:   subtraction: 4 passes, 5 compute sets.
MULTI_PASS: dict[KernelKind, tuple[int, int, int]] = {
    KernelKind.NORMALISE: (6, 0, 7),
    KernelKind.NORMALISE_GRAD: (14, 0, 14),
    KernelKind.SOFTMAX: (4, 1, 8),
    KernelKind.SOFTMAX_GRAD: (4, 0, 5),
}

#: Worker cycles a vector vertex pays besides its loop, for every vector kind:
#: BinaryOp1D's 29 for float (PCE:1614-1632); its 26 for half and UnaryOp1D's 17 or
#: 33 (PCE:1543-1559) are within a few cycles of it. The supervisor adds 11
#: (lib/popops/PerformanceEstimation.cpp:19-30).
VECTOR_WORKER_OVERHEAD = 29
VECTOR_SUPERVISOR_OVERHEAD = 11

#: Compute sets of the single-pass kinds: one mapped vertex per tile.
VECTOR_COMPUTE_SETS: dict[KernelKind, int] = {
    KernelKind.ELEMENTWISE: 1,
    KernelKind.TRANSCENDENTAL: 1,
    KernelKind.DIVIDE: 1,
    KernelKind.DATA: 1,
    KernelKind.GATHER: 1,
    KernelKind.POOL: 1,
    KernelKind.POOL_GRAD: 1,
    KernelKind.DROPOUT: 4,
    **{kind: sets for kind, (_, _, sets) in MULTI_PASS.items()},
}

#: Float activations zero their partials on an output group's first pass: 2 cycles and
#: zeroCyclesPerGroup a row, 8 with 16 conv units as on Mk2 (PE:410-416, 457-460).
FLOAT_ZEROING_CYCLES = 2
FLOAT_ZEROING_CYCLES_PER_ROW = 8

#: Cycles of the partials' reduce vertex (lib/poplin/PerformanceEstimation.hpp:
#: 1560-1637, the multi-input path): 32 per worker, then per accumulator's width
#: of outputs (8 halves or 4 floats) 3 cycles per partial summed.
REDUCE_WORKER_OVERHEAD = 32
REDUCE_CYCLES_PER_PARTIAL = 3
#: A cast of the reduced partials to the output type (PE:1822-1833): 26 cycles per
#: worker and one per vector.
CAST_WORKER_OVERHEAD = 26


def kernel_cycles(kernel: Kernel, ipu: IPUSpec, model: CostModel) -> float:
    """Cycles of ``kernel`` on one IPU: its busiest tile's work and its compute sets."""
    return operator_cycles(kernel, ipu, model).total


@lru_cache(maxsize=65536)
def operator_cycles(kernel: Kernel, ipu: IPUSpec, model: CostModel) -> OperatorCycles:
    """The cycles of ``kernel`` on one IPU, split by where they go."""
    if kernel.kind is KernelKind.MATMUL:
        if kernel.m == 0 or kernel.k == 0 or kernel.n == 0:
            return OperatorCycles()
        if kernel.available_memory is not None:  # the operator's own bound on its plan
            model = replace(model, available_memory_proportion=kernel.available_memory,
                            available_memory_by_ipu=())
        # The operand a convolution's kernel positions expand: (its positions' dimension,
        # its taps' dimension) in the plan, for each order of the operands.
        expanded = {"k": (("rows", "k"), ("cols", "k")), "n": (("k", "cols"), ("k", "rows"))}[
            kernel.taps_on] if kernel.taps > 1 else (None, None)
        orders = [(kernel.m, kernel.n, expanded[0]), (kernel.n, kernel.m, expanded[1])]
        if kernel.m == kernel.n and kernel.taps == 1:
            orders = orders[:1]
        planned = min((plan_matmul(kernel.groups, rows, kernel.k, cols, kernel.width, ipu, model,
                                   Convolution(*dims, kernel.taps, kernel.stride) if dims
                                   else None)
                       for rows, cols, dims in orders), key=lambda cycles: cycles.total)
        return planned + _regroup_cycles(kernel, ipu, model) if kernel.regroup else planned
    sets = VECTOR_COMPUTE_SETS[kernel.kind]
    fixed = OperatorCycles(sync=sets * compute_set_fixed_cycles(model), compute_sets=sets)
    if kernel.kind is KernelKind.DATA:
        return fixed + _copy_cycles(kernel, ipu)
    if kernel.kind is KernelKind.GATHER:
        return fixed + _gather_cycles(kernel, ipu)
    if kernel.kind in (KernelKind.POOL, KernelKind.POOL_GRAD):
        return fixed + OperatorCycles(vector=_pool_cycles(kernel, ipu))
    if kernel.kind is KernelKind.DROPOUT:
        return fixed + OperatorCycles(vector=_dropout_cycles(kernel, ipu))
    if kernel.kind in MULTI_PASS:
        passes, exps, _ = MULTI_PASS[kernel.kind]
        return fixed + OperatorCycles(vector=passes * _vector_cycles(
            kernel, ipu, KernelKind.ELEMENTWISE) + exps * _vector_cycles(
            kernel, ipu, KernelKind.TRANSCENDENTAL))
    return fixed + OperatorCycles(vector=_vector_cycles(kernel, ipu))


def compute_set_fixed_cycles(model: CostModel) -> float:
    """What a compute set costs besides its work: its sync and its exchange phase."""
    return model.sync_cycles + model.exchange_overhead_cycles


def amp_vertex_cycles(rows, in_groups, out_groups, conv_groups, width: int, ipu: IPUSpec,
                      model: CostModel, half_partials: bool,
                      weight_load_bytes_per_cycle: float | None = None):
    """Tile cycles of one ConvPartial1x1Out vertex: ``rows`` output rows (split
    over the six workers) for each pass of ``in_groups`` x ``out_groups`` weight
    blocks, per conv group (numbers, or numpy arrays of them).

    The supervisor's fixed cycles, once per vertex and per conv group, input-channel
    group and pass (PE:574-615), the first pass's state set-up that retention saves
    the others (PE:50-59), the
    weights' load into the conv units (PE:558-572), and each worker's overhead
    plus ``amp_cycles_per_output`` a row, six tile cycles to a worker cycle
    (PE:397-491). Float activations also zero their partials on the first
    input-channel pass of each output group: 2 cycles and 8 a row.
    """
    in_chans, units = ipu.amp_block(width, half_partials)
    load_rate = model.amp_weight_load_bytes_per_cycle if weight_load_bytes_per_cycle is None \
        else weight_load_bytes_per_cycle
    loads = units * in_chans * min(width, 4) / load_rate
    rows_per_worker = -(-rows // ipu.workers)
    if width <= 2:  # half inputs: the first pass also sets up the state the rest retain
        worker_overhead, in_group = (model.amp_worker_overhead_cycles,
                                     model.amp_in_group_overhead_cycles)
        vertex = (model.amp_vertex_overhead_cycles
                  + ipu.workers * model.amp_worker_retention_cycles)
        zeroing = 0
    else:
        worker_overhead, in_group = (model.amp_worker_overhead_cycles_float,
                                     model.amp_in_group_overhead_cycles_float)
        vertex = model.amp_vertex_overhead_cycles_float
        zeroing = ipu.workers * (FLOAT_ZEROING_CYCLES
                                 + FLOAT_ZEROING_CYCLES_PER_ROW * rows_per_worker)
    worker = worker_overhead + ipu.amp_cycles_per_output(width) * rows_per_worker \
        + _short_rows_cycles(rows_per_worker, width > 2)
    per_pass = model.amp_pass_overhead_cycles + loads + ipu.workers * worker
    cycles = vertex + conv_groups * (model.amp_conv_group_overhead_cycles
                                     + in_groups * in_group
                                     + out_groups * (in_groups * per_pass + zeroing))
    cycles = np.where(np.asarray(rows) > 0, cycles, 0)
    return cycles if np.ndim(cycles) else float(cycles)


#: Worker cycles ConvPartial1x1Out's estimate adds to a worker of one or two rows beyond
#: the general formula (three rows or more) the overheads above follow: its own cases
#: for one and two rows (PE:425-467). Half inputs: 31 and 40 (+2 without zeroing) less
#: the 7 retention saves, against 19 + 4 a row; float: 47 and 46 against 22 + 8 a row.
SHORT_ROWS_CYCLES = {False: (3, 8), True: (17, 8)}   # by float inputs: (one row, two rows)


def _short_rows_cycles(rows_per_worker, float_inputs: bool):
    """The extra worker cycles of a worker with one or two rows (numbers or arrays)."""
    one, two = SHORT_ROWS_CYCLES[float_inputs]
    return np.where(rows_per_worker == 1, one, np.where(rows_per_worker == 2, two, 0))


def _split_candidates(extent: int, tiles: int) -> np.ndarray:
    """Ways the planner may split a dimension of ``extent`` over at most ``tiles``:
    not at all, powers of two, as far as the tiles allow, and the splits that give
    each tile one to 32 equal shares."""
    top = min(extent, tiles)
    values = {1, top}
    power = 2
    while power < top:
        values.add(power)
        power *= 2
    values.update(split for split in (ceil(extent / share) for share in range(1, 33))
                  if split <= top)
    return np.array(sorted(values), dtype=np.int64)


@dataclass(frozen=True)
class Convolution:
    """Where a convolution's implicit GEMM counts its input more than once: the plan
    dimension (``rows``, ``k`` or ``cols``) of the field's positions and the one that
    holds each channel ``taps`` times (its kernel positions, at ``stride``)."""

    positions: str
    expanded: str
    taps: int
    stride: int

    def operand_share(self, positions) -> np.ndarray:
        """The share of its implicit-GEMM view a tile receives of the expanded operand,
        holding ``positions`` of the field (numbers or arrays): poplin exchanges the
        input field a tile's outputs need, its halo included, times its channels
        (ConvModel.cpp:1020-1044), for a square block of outputs."""
        side = np.sqrt(np.maximum(positions, 1))
        halo = ((side - 1) * self.stride + np.sqrt(self.taps)) ** 2
        return np.minimum(1.0, halo / (np.maximum(positions, 1) * self.taps))


def plan_matmul(groups: int, rows: int, k: int, n: int, width: int, ipu: IPUSpec,
                model: CostModel, conv: Convolution | None = None) -> OperatorCycles:
    """The quickest split of ``groups`` (rows x k) @ (k x n) products over the tiles, as
    poplin's planner chooses it, priced on the busiest tile. Elements wider than 4
    bytes are priced as 4: the AMP has no wider path.

    A plan must fit its temporary memory, the operands and partial sums a tile holds
    while it runs, within :attr:`CostModel.available_memory_proportion` of the tile
    (ConvPlan.cpp:1703-1704, ConvModel.cpp:2082-2088, 3531). The output channels may
    also be split serially: each serial slice runs as its own plan over all the
    tiles, one after another, so the cycles multiply (ConvModel.cpp:2075-2076); the
    quickest plan that fits is kept. Where nothing fits, poplin plans for the least
    memory instead (ConvPlan.cpp:1682-1688), and so does this. A convolution (``conv``)
    receives its expanded operand as its field with a halo.
    """
    width = min(width, 4)
    half_partials = model.half_partials and width <= 2
    units = ipu.amp_units(width, half_partials)
    n_blocks = ceil(n / units)
    budget = ipu.sram_per_tile_bytes * model.available_memory_proportion
    best: tuple[float, float, int, dict] | None = None
    for serial in _serial_candidates(n_blocks):
        # Each serial slice is planned alike, the last one padded to the others' size.
        plans = _tile_plans(groups, rows, k, ceil(n_blocks / serial) * units, width, ipu, model,
                            conv)
        total, temp = plans["total"] * serial, plans["temp"]
        fits = temp <= budget
        index = int(np.argmin(np.where(fits, total, np.inf))) if fits.any() \
            else int(np.argmin(temp))
        key = (0.0 if fits[index] else float(temp[index]), float(total[index]))
        if best is None or key < best[:2]:
            best = (*key, int(serial), {name: float(value[index])
                                        for name, value in plans.items()})
    _, _, serial, plan = best
    outputs = ceil(groups * rows * n_blocks * units / ipu.tiles)
    partial_width = 2 if half_partials else 4
    cast_vector = ipu.workers * (CAST_WORKER_OVERHEAD + ceil(outputs / ipu.workers / 4)) \
        if partial_width != width else 0.0
    sets = serial * (int(plan["stages"]) + 1) + int(partial_width != width)
    return OperatorCycles(amp=serial * plan["amp"],
                          exchange=serial * (plan["received"] + plan["reduce_exchange"]),
                          sync=sets * compute_set_fixed_cycles(model),
                          vector=serial * plan["reduce_vector"] + cast_vector,
                          compute_sets=sets)


@lru_cache(maxsize=4096)
def _serial_candidates(n_blocks: int) -> tuple[int, ...]:
    """Serial splits of ``n_blocks`` output-channel groups the planner tries: its
    divisors (equal slices) and the powers of two."""
    divisors = {d for d in range(1, int(n_blocks ** 0.5) + 1) if n_blocks % d == 0}
    divisors |= {n_blocks // d for d in divisors}
    powers = {1 << i for i in range(n_blocks.bit_length()) if 1 << i <= n_blocks}
    return tuple(sorted(divisors | powers))


def _tile_plans(groups: int, rows: int, k: int, n: int, width: int, ipu: IPUSpec,
                model: CostModel, conv: Convolution | None = None) -> dict[str, np.ndarray]:
    """Every split of the product over the tiles, priced on its busiest tile: arrays
    of its AMP, exchange, reduction and total cycles, its reduction's stages and the
    temporary bytes a tile holds."""
    half_partials = model.half_partials and width <= 2
    in_chans, units = ipu.amp_block(width, half_partials)
    partial_width = 2 if half_partials else 4
    k_blocks, n_blocks = ceil(k / in_chans), ceil(n / units)
    # Every split that fits on the tiles, as flat arrays, one entry a split.
    candidates = [_split_candidates(extent, ipu.tiles)
                  for extent in (groups, rows, k_blocks, n_blocks)]
    sparse = np.meshgrid(*candidates, indexing="ij", sparse=True)
    fits = np.nonzero(sparse[0] * sparse[1] * sparse[2] * sparse[3] <= ipu.tiles)
    g, r, kk, nn = (values[index] for values, index in zip(candidates, fits))
    g_t, r_t = -(-groups // g), -(-rows // r)
    k_t, n_t = -(-k_blocks // kk), -(-n_blocks // nn)
    amp = amp_vertex_cycles(r_t, k_t, n_t, g_t, width, ipu, model, half_partials)
    # Operands received: a tile holds 1/nn of its input slice and 1/r of its weight
    # slice already; the rest is broadcast to it (CM:1038-1068). Pairs of tiles that
    # split the output channels share an exchange bus and receive the same inputs at
    # twice the rate (lib/poplin/ExchangeEstimator.hpp:57-87).
    bus_sharing = np.where(nn % 2 == 0, 2, 1)
    input_bytes = g_t * r_t * k_t * in_chans * width
    weight_bytes = g_t * k_t * in_chans * n_t * units * width
    if conv is not None:
        per_tile = {"rows": r_t, "k": k_t * in_chans, "cols": n_t * units}
        share = conv.operand_share(per_tile[conv.positions])
        if {conv.positions, conv.expanded} == {"rows", "k"}:
            input_bytes = input_bytes * share
        else:
            weight_bytes = weight_bytes * share
    inputs = input_bytes * (1 - 1 / nn) / bus_sharing
    weights = weight_bytes * (1 - 1 / r)
    received = (inputs + weights) / ipu.exchange_bytes_per_cycle
    # A split reduction dimension leaves kk partial sums of each output: each tile's
    # partials cross the exchange and are summed in one to three stages over all the
    # tiles, each stage a compute set (ConvModel.cpp:1077-1136, 1150-1232).
    partials = g_t * r_t * n_t * units
    reduce_vector = np.zeros(len(kk))
    reduce_exchange = np.zeros(len(kk))
    stages = np.zeros(len(kk), dtype=np.int64)
    for depth in np.unique(kk):
        chosen = kk == depth
        reduce_vector[chosen], reduce_exchange[chosen], stages[chosen] = _reduction(
            reduce_stages(int(depth)), partials[chosen], partial_width, ipu)
    # Unsplit, the tile's results still cross the exchange once, into the output's
    # layout: poplin charges the first stage's exchange of the partial sums on every
    # plan (ConvModel.cpp:1088-1097), the reduction's stages only where k is split.
    unsplit = kk == 1
    reduce_exchange[unsplit] = partials[unsplit] * partial_width / ipu.exchange_bytes_per_cycle
    total = amp + received + reduce_vector + reduce_exchange \
        + (stages + 1) * compute_set_fixed_cycles(model)
    # Temporary bytes while the convolution runs: the operands the tile works on, held
    # as copies where they were exchanged to it, and its partial sums
    # (inputsConvTempMemory, weightsConvTempMemory, partialsConvTempMemory: CM:2044-2046).
    temp = np.where(nn > 1, input_bytes, 0) + np.where(r > 1, weight_bytes, 0) \
        + partials * partial_width
    return {"amp": amp, "received": received, "reduce_vector": reduce_vector,
            "reduce_exchange": reduce_exchange, "stages": stages, "total": total, "temp": temp}


def _regroup_cycles(kernel: Kernel, ipu: IPUSpec, model: CostModel) -> OperatorCycles:
    """Rearranging ``kernel.regroup`` bytes of an operand into the AMP's layout, a
    compute set of its own: the bytes cross the exchange, then a copy vertex writes
    them at 4/5 of an element a cycle (ConvModel.cpp:1305-1316, 1464-1481)."""
    per_tile = kernel.regroup / ipu.tiles
    return OperatorCycles(exchange=per_tile / ipu.exchange_bytes_per_cycle,
                          vector=ceil(per_tile * 5 / (min(kernel.width, 4) * 4)),
                          sync=compute_set_fixed_cycles(model), compute_sets=1)


@lru_cache(maxsize=4096)
def reduce_stages(depth: int) -> tuple[int, ...]:
    """How many partials each stage of poplin's reduction of ``depth`` partial sums
    adds up: one stage below 16, two below 125, three beyond, with intermediate
    depths that minimise the messages a tile receives (ConvReducePlan.cpp:10-70; the
    stage depths as estimateConvReduceCycles walks them, PerformanceEstimation.hpp:1835-1910).
    """
    if depth <= 1:
        return ()
    remaining, stages = depth, []
    count = 1 if depth < 16 else 2 if depth < 125 else 3
    for intermediate in _intermediate_depths(depth, count)[0]:
        this_stage = ceil(remaining / intermediate)
        remaining = ceil(remaining / this_stage)
        stages.append(this_stage)
    if remaining > 1:
        stages.append(remaining)
    return tuple(stages)


def _intermediate_depths(depth: int, stages: int) -> tuple[tuple[int, ...], float]:
    """The partials' depth left after each intermediate stage, and the messages per tile."""
    if stages == 1:
        return (), float(depth)
    plans = []
    lower = int(depth ** ((stages - 1) / stages))
    for following in (lower, lower + 1):
        rest, messages = _intermediate_depths(following, stages - 1)
        plans.append(((following, *rest), messages + depth / following))
    return min(plans, key=lambda plan: plan[1])


def _reduction(stages: tuple[int, ...], partials: np.ndarray, partial_width: int,
               ipu: IPUSpec) -> tuple[np.ndarray, np.ndarray, int]:
    """Vector and exchange cycles of summing each tile's ``partials`` in ``stages``, and
    the compute sets it takes. Each stage receives what the previous one left on the
    tile (the first, every partial) and runs the ReduceAdd vertex: 32 cycles a worker,
    then per accumulator's width of outputs 3 cycles a partial and 8 (half) or 7
    (float) of loop (PerformanceEstimation.hpp:1560-1637, multi-input path)."""
    accumulator = 8 if partial_width == 2 else 4
    loop = 8 if partial_width == 2 else 7
    vector = np.zeros(partials.shape)
    exchange = np.zeros(partials.shape)
    inputs = partials
    for depth in stages:
        exchange = exchange + inputs * partial_width / ipu.exchange_bytes_per_cycle
        outputs = -(-inputs // depth)
        loops = -(-outputs // accumulator)
        vector = vector + ipu.workers * (REDUCE_WORKER_OVERHEAD + (
            REDUCE_CYCLES_PER_PARTIAL * depth + loop) * -(-loops // ipu.workers))
        inputs = outputs
    return vector, exchange, len(stages)


def _vector_cycles(kernel: Kernel, ipu: IPUSpec, kind: KernelKind | None = None) -> float:
    """Tile cycles of one pass of a vector vertex (of ``kind``, the kernel's own by
    default) on its busiest tile: each worker's overhead and its share of the
    vectors at the kind's cycles per vector."""
    width = min(kernel.width, 4)
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


def _dropout_cycles(kernel: Kernel, ipu: IPUSpec) -> float:
    """Dropout over ``kernel.elements``, spread over the tiles, on the busiest tile."""
    vectors = ceil(kernel.elements * min(kernel.width, 4) / ipu.vector_bytes_per_cycle)
    per_tile = ceil(vectors / ipu.tiles)
    return (DROPOUT_SUPERVISOR + ipu.workers * DROPOUT_WORKER
            + DROPOUT_CYCLES_PER_VECTOR * per_tile
            + SET_SEED_SUPERVISOR + ipu.workers * SET_SEED_WORKER)


def _copy_cycles(kernel: Kernel, ipu: IPUSpec) -> OperatorCycles:
    """A gather, scatter, cast or copy: its bytes cross the exchange to the tiles that
    need them, and a copy vertex writes them at one 64-bit vector a cycle."""
    per_tile = kernel.bytes / ipu.tiles
    copy = VECTOR_SUPERVISOR_OVERHEAD + ipu.workers * VECTOR_WORKER_OVERHEAD \
        + ceil(per_tile / ipu.vector_bytes_per_cycle)
    return OperatorCycles(exchange=per_tile / ipu.exchange_bytes_per_cycle, vector=copy)


#: popops' MultiSlice vertex (lib/popops/PerformanceEstimation.cpp:49-122): 30 cycles
#: of prologue a worker, 19 per offset, then 2 cycles per vector of 2 halves or 2
#: floats (3 per 4 bytes).
MULTISLICE_WORKER_OVERHEAD = 30
MULTISLICE_CYCLES_PER_OFFSET = 19


def _gather_cycles(kernel: Kernel, ipu: IPUSpec) -> OperatorCycles:
    """An embedding lookup (or its gradient) as popops' multi-slice: the table's
    columns are spread over the tiles, whole vectors each, and tiles left over
    share out the indices; each worker copies its indices' vectors. The rows then
    cross the exchange to the tiles that use them."""
    width = min(kernel.width, 4)
    per_vector = {1: 4, 2: 2}.get(width, ipu.vector_bytes_per_cycle // 4)
    cycles_per_vector = 3 if width == 1 else 2
    row_vectors = max(1, ceil(kernel.n / per_vector))
    column_tiles = min(ipu.tiles, row_vectors)
    indices = ceil(kernel.m / max(1, ipu.tiles // column_tiles))
    per_worker = ceil(indices / ipu.workers)
    worker = MULTISLICE_WORKER_OVERHEAD + per_worker * (
        MULTISLICE_CYCLES_PER_OFFSET + cycles_per_vector * ceil(row_vectors / column_tiles))
    moved = kernel.m * kernel.n * width / ipu.tiles
    return OperatorCycles(exchange=moved / ipu.exchange_bytes_per_cycle,
                          vector=ipu.workers * worker)
