"""The copies PopLibs puts around a convolution or matmul: rearrangements and transposes.

Before the AMP can run, each operand must sit on the tiles that use it, in the
grouped layout the AMP loads (its input channels in groups of the pass's width,
its output channels in groups of the conv units). An operand laid out otherwise
is *rearranged*: its bytes cross the exchange and a copy program writes them in
the new order (poplin's ``preRegroup`` and ``actsRearranged`` /
``weightsRearranged`` steps); an operand laid out for the forward pass is
*transposed* for a backward pass (``Transpose`` steps, poplar_rt's transpose
vertices). Both estimates below come from graphcore/poplibs at 7eac0f2.
"""
from __future__ import annotations

from math import ceil

from ipusim.hardware.specs import element_bytes

#: A rearrangement copy on one tile (lib/poplin/ConvModel.cpp:1571-1590, poplin's
#: estimate of its transforms' copies, "based on regression analysis of 10k random
#: tests"): 587 cycles, then per byte of the tile's share 5.1484 cycles where the
#: copy moves 2-byte atoms, 3.125 for 4-byte atoms and 0.4404 for atoms of 8 bytes
#: or more (the coefficients are given scaled by 1024: 5271, 3200 and 451).
REARRANGE_FIXED_CYCLES = 587
REARRANGE_CYCLES_PER_BYTE = {8: 451 / 1024, 4: 3200 / 1024, 2: 5271 / 1024}

#: poplar_rt's supervisor transpose vertex as PopSparse's planner estimates it
#: (lib/popsparse/PerformanceEstimation.hpp:873-911): 7 supervisor cycles and, per
#: worker, for blocks of several grains each way 29 of set-up, then per 2-D
#: transposition 18 and, per grain of source rows, 12 plus ``cycles_per_grain`` for
#: each grain of columns beyond two; for blocks one grain wide, 27 and per
#: transposition 15 + 20 plus the grain's cycles per row grain beyond two; for
#: blocks of one grain, 17 and 12 (one transposition a worker) or 20 and the
#: grain's cycles per transposition beyond two. A grain is 2 floats (3 cycles) or
#: 4 halves (4 cycles).
TRANSPOSE_SUPERVISOR = 7
TRANSPOSE_GRAIN = {4: (2, 3), 2: (4, 4)}   # element bytes: (grain, cycles per grain)


def rearrange_cycles(bytes_per_tile: float, atom_bytes: int) -> float:
    """The copy program of a rearrangement that writes ``bytes_per_tile`` on the
    busiest tile in atoms of ``atom_bytes`` (poplin's regression above)."""
    if bytes_per_tile <= 0:
        return 0.0
    atom = 8 if atom_bytes % 8 == 0 else 4 if atom_bytes % 4 == 0 else 2
    return REARRANGE_FIXED_CYCLES + REARRANGE_CYCLES_PER_BYTE[atom] * bytes_per_tile


def transpose_cycles(rows: int, cols: int, transpositions: int, width: int,
                     workers: int) -> float:
    """Tile cycles of transposing ``transpositions`` blocks of ``rows`` x ``cols``
    elements of ``width`` bytes on one tile, shared among its ``workers``: the
    supervisor transpose vertex's estimate (above), blocks rounded up to its grain."""
    if transpositions <= 0:
        return 0.0
    grain, per_grain = TRANSPOSE_GRAIN[2 if element_bytes(width) <= 2 else 4]
    row_grains, col_grains = max(1, ceil(rows / grain)), max(1, ceil(cols / grain))
    per_worker = ceil(transpositions / workers)
    if row_grains == 1 and col_grains == 1:
        worker = 17 + (12 if per_worker == 1 else 20 + (per_worker - 2) * per_grain)
    elif col_grains == 1:
        worker = 27 + per_worker * (15 + 20 + per_grain * (row_grains - 2))
    else:
        worker = 29 + per_worker * (18 + row_grains * (12 + per_grain * (col_grains - 2)))
    return TRANSPOSE_SUPERVISOR + workers * worker
