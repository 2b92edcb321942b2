"""How poplin plans a matmul or convolution over the tiles, and what its busiest tile costs.

A matmul is a 1x1 convolution (lib/poplin/MatMul.cpp:235-273 at graphcore/poplibs
7eac0f2): its rows are the field, its reduction dimension the input channels, its
columns the output channels; the planner may swap the operands (ConvPlan.cpp:716-753).
:func:`plan_matmul` splits conv groups, rows, input-channel groups and
output-channel groups over the tiles and keeps the split whose busiest tile is
quickest: its AMP passes (the ConvPartial1x1Out vertex estimate, :func:`amp_vertex_cycles`),
the operand bytes it *receives* (each operand broadcast to the tiles that share it,
CM:1058-1068), and, where the reduction dimension is split, the partial sums'
exchange and their multi-stage reduction (CM:1077-1136, ConvReducePlan.cpp:22-26).
``PE`` below is lib/poplin/PerformanceEstimation.hpp, ``CM`` lib/poplin/ConvModel.cpp.

The plan is numbers (:class:`MatmulPlan`); :mod:`ipusim.cost.matmul_program` turns
it into the program steps PopLibs builds.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from math import ceil
from typing import TYPE_CHECKING

import numpy as np

from ipusim.cost.program import compute_set_fixed_cycles
from ipusim.hardware.specs import element_bytes

if TYPE_CHECKING:
    from ipusim.cost.tile_figures import TileFigures
    from ipusim.hardware import IPUSpec

#: Float activations zero their partials on an output group's first pass: 2 cycles and
#: zeroCyclesPerGroup a row, 8 with 16 conv units as on Mk2 (PE:410-416, 457-460).
FLOAT_ZEROING_CYCLES = 2
FLOAT_ZEROING_CYCLES_PER_ROW = 8

#: Cycles of the partials' reduce vertex (lib/poplin/PerformanceEstimation.hpp:
#: 1560-1637, the multi-input path): 32 per worker, then per accumulator's width
#: of outputs (8 halves or 4 floats) 3 cycles per partial summed.
REDUCE_WORKER_OVERHEAD = 32
REDUCE_CYCLES_PER_PARTIAL = 3
#: A cast of the reduced partials to the output type (estimateCastCycles,
#: PE:1822-1833): 26 cycles per worker besides its loop.
CAST_WORKER_OVERHEAD = 26


def amp_vertex_cycles(rows, in_groups, out_groups, conv_groups, width: int, ipu: IPUSpec,
                      model: TileFigures, half_partials: bool,
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
    loads = units * in_chans * element_bytes(width) / load_rate
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


@dataclass(frozen=True)
class MatmulPlan:
    """The split poplin keeps for a product, priced on its busiest tile.

    ``serial`` slices of the output channels run one after another, each the same
    plan over all the tiles: its operands' ``received`` cycles, its Convolve's
    ``amp`` cycles and its reduction's ``stages`` (each stage's exchange and vector
    cycles); an unsplit reduction dimension still sends the results into the
    output's layout (``out_exchange``). ``cast`` converts the partials to the
    output's type once at the end; ``tiles_used`` is how many tiles the plan
    spreads over.
    """

    serial: int
    amp: float
    received: float
    stages: tuple[tuple[float, float], ...]
    out_exchange: float
    cast: float
    tiles_used: int


def plan_matmul(groups: int, rows: int, k: int, n: int, width: int, ipu: IPUSpec,
                model: TileFigures, conv: Convolution | None = None) -> MatmulPlan:
    """The quickest split of ``groups`` (rows x k) @ (k x n) products over the tiles, as
    poplin's planner chooses it, priced on the busiest tile. Elements wider than 4
    bytes are priced as 4: the AMP has no wider path.

    A plan must fit its temporary memory, the operands and partial sums a tile holds
    while it runs, within :attr:`TileFigures.available_memory_proportion` of the tile
    (ConvPlan.cpp:1703-1704, ConvModel.cpp:2082-2088, 3531). The output channels may
    also be split serially: each serial slice runs as its own plan over all the
    tiles, one after another, so the cycles multiply (ConvModel.cpp:2075-2076); the
    quickest plan that fits is kept. Where nothing fits, poplin plans for the least
    memory instead (ConvPlan.cpp:1682-1688), and so does this. A convolution (``conv``)
    receives its expanded operand as its field with a halo.
    """
    width = element_bytes(width)
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
            best = (*key, int(serial), {name: value[index] for name, value in plans.items()})
    _, _, serial, plan = best
    partial_width = 2 if half_partials else 4
    depth = int(plan["k_split"])
    stages = tuple((float(exchange[0]), float(vector[0])) for exchange, vector in _reduction(
        reduce_stages(depth), np.array([plan["partials"]]), partial_width, ipu))
    outputs = ceil(groups * rows * n_blocks * units / ipu.tiles)
    # The cast reads the partials a 64-bit vector at a time and writes the output's
    # type: its per-worker loop is the slower of the two (PE:1822-1833).
    partials_per_vector = ipu.vector_bytes_per_cycle // partial_width
    cast = ipu.workers * (CAST_WORKER_OVERHEAD + ceil(ceil(outputs / ipu.workers)
                                                      / partials_per_vector)) \
        if partial_width != width else 0.0
    return MatmulPlan(serial=serial, amp=float(plan["amp"]), received=float(plan["received"]),
                      stages=stages,
                      out_exchange=0.0 if depth > 1 else float(plan["reduce_exchange"]),
                      cast=cast, tiles_used=int(plan["tiles_used"]))


@lru_cache(maxsize=4096)
def _serial_candidates(n_blocks: int) -> tuple[int, ...]:
    """Serial splits of ``n_blocks`` output-channel groups the planner tries: its
    divisors (equal slices) and the powers of two."""
    divisors = {d for d in range(1, int(n_blocks ** 0.5) + 1) if n_blocks % d == 0}
    divisors |= {n_blocks // d for d in divisors}
    powers = {1 << i for i in range(n_blocks.bit_length()) if 1 << i <= n_blocks}
    return tuple(sorted(divisors | powers))


def _tile_plans(groups: int, rows: int, k: int, n: int, width: int, ipu: IPUSpec,
                model: TileFigures, conv: Convolution | None = None) -> dict[str, np.ndarray]:
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
        for exchange, vector in _reduction(reduce_stages(int(depth)), partials[chosen],
                                           partial_width, ipu):
            reduce_exchange[chosen] += exchange
            reduce_vector[chosen] += vector
            stages[chosen] += 1
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
    return {"amp": amp, "received": received, "reduce_exchange": reduce_exchange,
            "total": total, "temp": temp, "k_split": kk, "partials": partials,
            "tiles_used": g * r * kk * nn}




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
               ipu: IPUSpec) -> list[tuple[np.ndarray, np.ndarray]]:
    """Exchange and vector cycles of each stage of summing each tile's ``partials`` in
    ``stages``, one compute set a stage. Each stage receives what the previous one
    left on the tile (the first, every partial) and runs the ReduceAdd vertex: 32
    cycles a worker, then per accumulator's width of outputs 3 cycles a partial and
    8 (half) or 7 (float) of loop (PerformanceEstimation.hpp:1560-1637, multi-input
    path)."""
    accumulator = 8 if partial_width == 2 else 4
    loop = 8 if partial_width == 2 else 7
    inputs, out = partials, []
    for depth in stages:
        exchange = inputs * partial_width / ipu.exchange_bytes_per_cycle
        outputs = -(-inputs // depth)
        loops = -(-outputs // accumulator)
        vector = ipu.workers * (REDUCE_WORKER_OVERHEAD + (
            REDUCE_CYCLES_PER_PARTIAL * depth + loop) * -(-loops // ipu.workers))
        out.append((exchange, vector))
        inputs = outputs
    return out
