"""A model's variables laid out on the tiles, and the memory of each tile.

An IPU fails on its fullest tile, not on its total: each of its tiles has its own
SRAM (624 KiB on Mk2), and a tensor lives where its tile mapping puts it. This
module lays each variable out as PopLibs maps it and adds up each tile:

- **Linear mapping** (``poputil::mapTensorLinearly``, poputil/TileMapping.cpp at
  poplibs 7eac0f2): the tensor's elements are cut into grains of the vector width
  (8 bytes: 2 floats, 4 halves), each tile taking an equal number of whole grains
  and at least 128 bytes, from tile 0 on. Activations, stashes, gradients,
  optimizer state and the parameters of other layers are laid out this way.
- **Matmul and convolution weights** as poplin lays them out, with at least
  256 bytes a tile (ConvUtil.cpp's ``mapActivationsOrWeights``). Their grain is
  the plan's channel grouping, which the operator model does not record; the
  vector width stands for it.
- **A sliceable tensor** (an embedding table, ``popops::createSliceableTensor``
  without a plan): its columns are spread over the tiles and each tile holds
  every row of its columns, so a column is a grain that never splits: a table
  one column wide lives on one tile.

Besides the variables, every tile holds the runtime's code (:class:`MemoryModel`'s
bytes per tile), a share of the operators' vertex code (spread evenly: the
operator model records no per-tile vertex placement) and its exchange buffers
(the model's share of the data it holds).

Variables that are not always live share their memory over time: a tile holds its
always-live variables and, of the others, the most that are live at once
(:mod:`ipusim.analysis.liveness` gives them per program step).
"""
from __future__ import annotations

from dataclasses import dataclass
from math import ceil

import numpy as np
import pandas as pd

from ipusim.hardware import IPUSpec
from ipusim.plan.memory import MB, MemoryModel, OutOfMemoryError

VECTOR_BYTES = 8       # a tile's vector width: 64 bits
LINEAR_MIN_BYTES = 128  # mapTensorLinearly's least bytes a tile
WEIGHTS_MIN_BYTES = 256  # poplin's least weight bytes a tile
#: The layouts a variable may have.
LINEAR, MATMUL_WEIGHTS, SLICEABLE = "linear", "matmul_weights", "sliceable"
#: What a tile's memory holds besides its variables.
CODE, EXCHANGE = "code", "exchange"


@dataclass(frozen=True)
class Variable:
    """One tensor of the compiled graph on one IPU of a replica.

    ``bytes``: its size; ``width``: bytes per element; ``layout``: how PopLibs maps it
    (:data:`LINEAR`, :data:`MATMUL_WEIGHTS`, :data:`SLICEABLE`); ``column``: for a
    sliceable tensor, the elements of one column (its rows), kept whole on a tile;
    ``category``: ``weights``, ``optimizer``, ``accumulators``, ``gradients``,
    ``stash`` or ``activations``; ``always_live``: whether it lives through the
    whole program (weights, optimizer state, accumulators); ``stage``: the model
    stage it belongs to; ``module``: the module path of the layer that owns it
    (empty when not known).
    """

    name: str
    ipu: int
    bytes: int
    width: int
    category: str
    always_live: bool
    layout: str = LINEAR
    column: int = 1
    stage: int = -1
    module: str = ""

    @property
    def elements(self) -> int:
        """Its elements (its bytes over its width, rounded up)."""
        return ceil(self.bytes / self.width)

    def grain(self) -> tuple[int, int]:
        """Elements of one grain (never split over tiles) and the least a tile takes."""
        if self.layout == SLICEABLE:
            return max(self.column, 1), max(self.column, 1)
        least = WEIGHTS_MIN_BYTES if self.layout == MATMUL_WEIGHTS else LINEAR_MIN_BYTES
        vector = max(VECTOR_BYTES // self.width, 1)
        return vector, ceil(least / self.width)


def tile_bytes(variable: Variable, tiles: int) -> np.ndarray:
    """Bytes of ``variable`` on each of ``tiles`` tiles, as PopLibs' linear mapping lays
    it out: whole grains, an equal number a tile (at least the least a tile takes),
    from tile 0 on."""
    grain, least = variable.grain()
    elements = variable.elements
    out = np.zeros(tiles, dtype=np.int64)
    if not elements:
        return out
    grains = ceil(elements / grain)
    per_tile = max(ceil(grains / tiles), ceil(least / grain)) * grain
    used = min(ceil(elements / per_tile), tiles)
    out[:used] = per_tile
    out[used - 1] = elements - per_tile * (used - 1)
    return out * variable.width


def tile_memory(variables: list[Variable], ipu: IPUSpec, ipus: int, code_bytes: dict[int, float],
                not_always_live: dict[int, np.ndarray] | None = None,
                model: MemoryModel = MemoryModel()) -> pd.DataFrame:
    """Each tile's memory, one row per (ipu, tile): its always-live ``variables`` by
    category, ``not_always_live``: the most bytes of the other variables it holds at once
    (per IPU, bytes per tile, from the liveness of the program steps; none when not
    given, as when a model is checked before it runs), its code (the runtime's and
    ``code_bytes[ipu]`` of vertex code spread over the tiles), its exchange buffers,
    ``total`` and the tile's ``capacity``.
    """
    categories = sorted({v.category for v in variables})
    frames = []
    for index in range(ipus):
        columns = {name: np.zeros(ipu.tiles) for name in categories}
        for variable in variables:
            if variable.ipu == index:
                columns[variable.category] += tile_bytes(variable, ipu.tiles)
        frame = pd.DataFrame(columns)
        frame["not_always_live"] = (np.zeros(ipu.tiles) if not_always_live is None
                                    else not_always_live[index])
        frame[CODE] = model.code_bytes_per_tile + code_bytes.get(index, 0.0) / ipu.tiles
        frame[EXCHANGE] = frame.drop(columns=[CODE]).sum(axis=1) * model.exchange_fraction
        frame["total"] = frame.sum(axis=1)
        frame["capacity"] = float(ipu.sram_per_tile_bytes)
        frame.insert(0, "tile", np.arange(ipu.tiles))
        frame.insert(0, "ipu", index)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def check_tiles(table: pd.DataFrame, variables: list[Variable], setting: str) -> None:
    """Raise :class:`OutOfMemoryError` when a tile of ``table`` (:func:`tile_memory`) holds
    more than its SRAM: the fullest tile, its bytes by category and the largest
    variables on it, as Poplar names them; ``setting`` is how the user allows it anyway."""
    over = table[table["total"] > table["capacity"]]
    if over.empty:
        return
    worst = over.loc[(over["total"] / over["capacity"]).idxmax()]
    ipu, tile = int(worst["ipu"]), int(worst["tile"])
    tiles = int((table["ipu"] == ipu).sum())
    held = sorted(((int(tile_bytes(v, tiles)[tile]), v.name) for v in variables
                   if v.ipu == ipu), reverse=True)
    largest = ", ".join(f"{name} ({size:,} bytes)" for size, name in held[:3] if size)
    parts = ", ".join(f"{name} {worst[name]:,.0f}" for name in table.columns
                      if name not in ("ipu", "tile", "total", "capacity") and worst[name])
    raise OutOfMemoryError(
        f"Out of memory on tile {tile} of IPU {ipu}: it needs {worst['total']:,.0f} bytes "
        f"({parts}) but a tile has {worst['capacity']:,.0f} bytes of SRAM; "
        f"{len(over)} tile(s) are over. Largest there: {largest or 'none'}. The IPU as a "
        f"whole holds {table.loc[table['ipu'] == ipu, 'total'].sum() / MB:,.1f} MB: the "
        f"fullest tile, not the total, does not fit. {setting} simulates it anyway.")
