"""The operator-level compute model: the tile cycles one operator takes on an IPU.

A model's operators are priced one by one from their shapes, so the same
parameters serve a CNN with five channels and BERT-Large. Everything here is
read off the tile as Graphcore's own planners describe it (graphcore/poplibs):

- Matmuls and convolutions run on the AMP. One *pass* multiplies a block of
  ``amp_input_bytes`` of input channels (16 halves or 8 floats: four 64-bit
  loads, ``CONV_UNIT_INPUT_LOAD_ELEMS_*`` in
  include/poplibs_support/TileConstants.hpp) by as many output channels as
  the tile has conv units, and streams the rows of the field through it at
  one output vector every 4 cycles (``coreCycles`` in
  lib/poplin/PerformanceEstimation.hpp). Dimensions are padded to those
  blocks, so five channels cost as much as sixteen.
- The planner spreads the blocks and rows over the tiles; each of the six
  workers of a tile pays a fixed overhead per pass (the 1x1 worker estimate:
  41 cycles for three outputs, 4 per output after that), so few rows per tile
  (small batch, small images) waste the AMP.
- Operands reach the tiles over the exchange at 4 bytes a cycle per tile
  (``exchangeBytesPerCycle`` in PopLibs' planners; 1,472 tiles x 4 B x 1.33
  GHz = the 7.8 TB/s Graphcore quotes for IPU-Exchange).
- Element-wise, normalisation and softmax run on the vector unit, 64 bits a
  cycle (4 halves or 2 floats), at the cycles per vector of
  lib/popops/popopsCycleEstimators.hpp.

Each operator also runs as a few compute sets (:data:`COMPUTE_SETS`), and
each compute set costs :attr:`CostModel.compute_set_cycles` beyond its work:
the sync that ends it, setting up its exchange, launching its vertices.
"""
from __future__ import annotations

from functools import lru_cache
from math import ceil
from typing import TYPE_CHECKING

from ipusim.hardware import IPUSpec
from ipusim.work import Kernel, KernelKind

if TYPE_CHECKING:
    from ipusim.cost_model import CostModel

#: Compute sets one operator runs as, from how PopLibs builds it: a matmul or
#: convolution regroups its operands into the AMP's layout, computes partials
#: and reduces them across the tiles that split its reduction dimension; a
#: normalisation or softmax reduces its statistics in two stages, combines
#: them and applies them twice (subtract, scale); the rest is one mapped
#: vertex per tile.
COMPUTE_SETS: dict[KernelKind, int] = {
    KernelKind.MATMUL: 3,
    KernelKind.NORMALISE: 5,
    KernelKind.ELEMENTWISE: 1,
    KernelKind.TRANSCENDENTAL: 1,
    KernelKind.DIVIDE: 1,
    KernelKind.DATA: 1,
}

#: Worker cycles per 64-bit vector, (16-bit, 32-bit), from PopLibs' popops
#: cycle estimators: add/multiply 1; exp 4 and 6; divide 21 and 10. A
#: normalisation or softmax makes four passes over its input (statistics,
#: then subtract and scale), the softmax's exponent among them.
CYCLES_PER_VECTOR: dict[KernelKind, tuple[float, float]] = {
    KernelKind.ELEMENTWISE: (1, 1),
    KernelKind.TRANSCENDENTAL: (4, 6),
    KernelKind.DIVIDE: (21, 10),
    KernelKind.NORMALISE: (4, 4),
}


def kernel_cycles(kernel: Kernel, ipu: IPUSpec, model: CostModel) -> float:
    """Cycles of ``kernel`` on one IPU: its busiest tile's work and the fixed
    cost of its compute sets."""
    work = _kernel_cycles(kernel, ipu, model.half_partials, model.amp_worker_overhead_cycles,
                          model.amp_pass_overhead_cycles)
    return work + COMPUTE_SETS[kernel.kind] * model.compute_set_cycles


@lru_cache(maxsize=65536)
def _kernel_cycles(kernel: Kernel, ipu: IPUSpec, half_partials: bool,
                   worker_overhead: float, pass_overhead: float) -> float:
    if kernel.kind is KernelKind.MATMUL:
        # The planner may take either operand as the streamed field (PopLibs
        # transposes a matmul when that maps better); price the better one.
        return min(_matmul_cycles(kernel.m, kernel.k, kernel.n, kernel, ipu, half_partials,
                                  worker_overhead, pass_overhead),
                   _matmul_cycles(kernel.n, kernel.k, kernel.m, kernel, ipu, half_partials,
                                  worker_overhead, pass_overhead))
    if kernel.kind is KernelKind.DATA:
        return exchange_cycles(kernel.bytes, ipu)
    return _vector_cycles(kernel, ipu)


def _matmul_cycles(rows: int, k: int, n: int, kernel: Kernel, ipu: IPUSpec, half_partials: bool,
                   worker_overhead: float, pass_overhead: float) -> float:
    """AMP cycles of ``groups`` (rows x k) @ (k x n) products, plus their exchange."""
    if rows == 0 or k == 0 or n == 0:
        return 0.0
    width = min(kernel.width, 4)
    k_block, n_block = ipu.amp_block(width, half_partials)
    blocks = kernel.groups * ceil(k / k_block) * ceil(n / n_block)
    if blocks >= ipu.tiles:
        passes, rows_per_tile = ceil(blocks / ipu.tiles), rows
    else:  # fewer blocks than tiles: the tiles of a block share its rows
        passes, rows_per_tile = 1, ceil(rows * blocks / ipu.tiles)
    rows_per_worker = ceil(rows_per_tile / ipu.workers)
    # The six workers run side by side, each taking one slot in six.
    per_pass = (ipu.workers * (worker_overhead + ipu.amp_cycles_per_output * rows_per_worker)
                + pass_overhead + k_block * n_block * width / 16)  # weights load 16 B a cycle
    operands = kernel.groups * (rows * k + k * n + rows * n) * kernel.width
    return passes * per_pass + exchange_cycles(operands, ipu)


def _vector_cycles(kernel: Kernel, ipu: IPUSpec) -> float:
    """Vector-unit cycles of an element-wise, transcendental or normalising operator."""
    width = min(kernel.width, 4)
    vectors = ceil(kernel.elements * width / ipu.vector_bytes_per_cycle)
    tiles = max(1, min(ipu.tiles, ceil(vectors / ipu.workers)))  # one vector a worker at least
    half, full = CYCLES_PER_VECTOR[kernel.kind]
    return ceil(vectors / tiles) * (half if width <= 2 else full)


def exchange_cycles(nbytes: float, ipu: IPUSpec) -> float:
    """Cycles to move ``nbytes`` spread over every tile through the exchange."""
    return nbytes / (ipu.tiles * ipu.exchange_bytes_per_cycle)
