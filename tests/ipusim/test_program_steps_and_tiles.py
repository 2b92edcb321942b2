"""The pieces of a graph profile that need no model: an operator's cycles as program
steps (the adapter's contract), and a variable laid out on the tiles as PopLibs maps it."""
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ipusim.analysis.program_steps import (
    DO_EXCHANGE,
    ON_TILE_EXECUTE,
    SYNC,
    operator_program_steps,
)
from ipusim.analysis.tile_memory import (
    LINEAR,
    MATMUL_WEIGHTS,
    SLICEABLE,
    Variable,
    check_tiles,
    tile_bytes,
    tile_memory,
)
from ipusim.hardware.specs import MK2_GC200 as MK2
from ipusim.plan.memory import OutOfMemoryError

cycles = st.floats(min_value=0, max_value=1e6, allow_nan=False)


@given(st.lists(st.tuples(st.sampled_from([SYNC, DO_EXCHANGE, ON_TILE_EXECUTE]), cycles),
                max_size=40))
def test_an_operators_steps_keep_its_cycles_and_its_order(listed):
    """The adapter lays the operator model's own steps into the program: in their
    order, named by the run and the step, whole cycles adding up to the total."""
    steps = tuple((program, f"step{i}", "vertex", value)
                  for i, (program, value) in enumerate(listed))
    laid = operator_program_steps("model/forward/aten::mm/0", "matmul", steps)
    assert sum(step.cycles for step in laid) == round(sum(value for _, value in listed))
    assert [step.kind for step in laid] == [program for program, _ in listed]
    assert [step.name for step in laid] == [f"model/forward/aten::mm/0/step{i}"
                                            for i in range(len(listed))]
    assert all(step.cycles >= 0 and step.operation == "model/forward/aten::mm/0"
               for step in laid)
    assert all((step.vertex == "matmul") == (step.kind == ON_TILE_EXECUTE) for step in laid)


def test_a_matmuls_program_steps_are_the_operator_models():
    """A priced matmul's steps reach the program as the operator model lists them."""
    from ipusim.cost.cost_model import DEFAULT
    from ipusim.cost.operator_model import operator_cycles
    from ipusim.cost.work import Kernel, KernelKind
    price = operator_cycles(Kernel(KernelKind.MATMUL, 4, m=900, k=600, n=300), MK2, DEFAULT)
    steps = tuple((step.program.value, step.name, step.role.value, step.total)
                  for step in price.steps)
    laid = operator_program_steps("s/forward/aten::mm/0", "matmul", steps)
    assert [step.name.rsplit("/", 1)[1] for step in laid if step.kind == ON_TILE_EXECUTE] \
        == [step.name for step in price.steps if step.program.value == ON_TILE_EXECUTE]
    assert sum(step.cycles for step in laid) == round(price.total)


def test_a_linear_mapping_takes_whole_grains_and_at_least_128_bytes_a_tile_from_tile_0():
    small = tile_bytes(Variable("bias", 0, 40, 4, "weights", True), MK2.tiles)
    assert small[0] == 40 and small[1:].sum() == 0          # under 128 bytes: one tile
    spread = tile_bytes(Variable("w", 0, 4 * 1_000_000, 4, "weights", True, LINEAR), MK2.tiles)
    assert spread.sum() == 4 * 1_000_000
    assert (spread[:-1] % 8 == 0).all()                      # whole grains of 2 floats
    per_tile = -(-500_000 // MK2.tiles) * 8                  # whole grains, equal shares
    used = np.count_nonzero(spread)
    assert used == -(-4_000_000 // per_tile) == MK2.tiles - 1  # the last tile left empty
    assert set(spread[:used - 1]) == {per_tile} and spread[used - 1] <= per_tile
    medium = tile_bytes(Variable("v", 0, 1024 * 2, 2, "stash", False), MK2.tiles)
    assert set(medium[medium > 0]) == {128}                  # 128 bytes a tile, 16 tiles
    weights = tile_bytes(Variable("w", 0, 1024 * 2, 2, "weights", True, MATMUL_WEIGHTS),
                         MK2.tiles)
    assert set(weights[weights > 0]) == {256}                # poplin's 256 bytes a tile


def test_a_sliceable_table_keeps_each_column_whole_on_a_tile():
    table = Variable("emb.weight", 0, 1000 * 64 * 4, 4, "weights", True, SLICEABLE, column=1000)
    placed = tile_bytes(table, MK2.tiles)
    assert placed.sum() == 1000 * 64 * 4
    assert set(placed[placed > 0]) == {1000 * 4}             # one column of 1,000 rows a tile
    one_column = Variable("emb.weight", 0, 200_000 * 4, 4, "weights", True, SLICEABLE,
                          column=200_000)
    assert tile_bytes(one_column, MK2.tiles)[0] == 800_000   # cannot be split


def test_the_tile_check_names_the_fullest_tile_and_what_lives_there():
    variables = [Variable("emb.weight", 0, 200_000 * 4, 4, "weights", True, SLICEABLE,
                          column=200_000),
                 Variable("fc.weight", 0, 4096, 4, "weights", True, MATMUL_WEIGHTS)]
    table = tile_memory(variables, MK2, 1, {0: 0.0})
    assert table["total"].sum() < MK2.sram_bytes                 # the IPU as a whole fits
    with pytest.raises(OutOfMemoryError) as raised:
        check_tiles(table, variables, "allowOutOfMemory")
    message = str(raised.value)
    assert "tile 0 of IPU 0" in message and "emb.weight (800,000 bytes)" in message
    assert f"{MK2.sram_per_tile_bytes:,}" in message and "allowOutOfMemory" in message
    fits = [Variable("emb.weight", 0, 1000 * 64 * 4, 4, "weights", True, SLICEABLE, column=1000)]
    check_tiles(tile_memory(fits, MK2, 1, {0: 0.0}), fits, "allowOutOfMemory")
