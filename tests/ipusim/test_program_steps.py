"""Operators as the program steps PopLibs builds: the transforms' estimates worked by
hand, which operands poplin rearranges, and the steps as the reports show them."""
from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

import ipusim
from ipusim import Cost, Kernel, KernelKind, Stage, Work
from ipusim.cost.cost_model import CALIBRATED_MK2
from ipusim.cost.matmul_program import rearrangements
from ipusim.cost.operator_model import operator_cycles
from ipusim.cost.program import OperatorCycles, ProgramKind, Role, Step, Unit, compute_set
from ipusim.cost.transforms import rearrange_cycles, transpose_cycles
from ipusim.hardware.specs import element_bytes

MK2 = ipusim.MK2_GC200


@pytest.mark.parametrize("atom, per_byte", [(2, 5271 / 1024), (4, 3200 / 1024),
                                            (8, 451 / 1024), (32, 451 / 1024),
                                            (12, 3200 / 1024), (6, 5271 / 1024)])
def test_a_rearrangement_copy_is_poplins_regression(atom, per_byte):
    """587 cycles and 5.15, 3.125 or 0.44 cycles a byte by the atom it moves
    (lib/poplin/ConvModel.cpp:1571-1590)."""
    assert rearrange_cycles(1000, atom) == pytest.approx(587 + per_byte * 1000)
    assert rearrange_cycles(0, atom) == 0


def test_the_transpose_vertex_is_popsparses_estimate_in_each_case():
    """lib/popsparse/PerformanceEstimation.hpp:873-911: blocks of several grains, one
    grain wide, one grain; 7 of supervisor, six workers."""
    # 8 x 16 floats: 4 row grains of 2, 8 column grains; 12 blocks over 6 workers.
    assert transpose_cycles(8, 16, 12, 4, 6) == 7 + 6 * (29 + 2 * (18 + 4 * (12 + 3 * 6)))
    # one grain of columns (4 halves), 4 row grains: 3 blocks, one a worker
    assert transpose_cycles(16, 4, 3, 2, 6) == 7 + 6 * (27 + 1 * (15 + 20 + 4 * 2))
    # a single grain each way: one a worker, then more
    assert transpose_cycles(2, 2, 6, 4, 6) == 7 + 6 * (17 + 12)
    assert transpose_cycles(2, 2, 24, 4, 6) == 7 + 6 * (17 + 20 + 2 * 3)
    assert transpose_cycles(8, 8, 0, 4, 6) == 0


def test_element_bytes_are_at_most_four():
    assert [element_bytes(width) for width in (1, 2, 4, 8)] == [1, 2, 4, 4]


def test_poplin_rearranges_what_its_planner_says():
    """A weight update rearranges both operands; padded or expanded input channels the
    activations and the weights; padded output channels the weights; whole groups
    nothing (ConvModel.cpp:1363-1404)."""
    def names(kernel, cols):
        return [name for name, _, _ in rearrangements(kernel, cols, MK2, CALIBRATED_MK2)]
    assert names(Kernel(KernelKind.MATMUL, 2, m=1024, k=1024, n=1024), 1024) == []
    conv1 = Kernel(KernelKind.MATMUL, 4, m=16 * 126 * 126, k=9, n=5, taps=9)
    assert names(conv1, 5) == ["actsRearranged", "weightsRearranged"]
    padded_out = Kernel(KernelKind.MATMUL, 2, m=512, k=1024, n=100)
    assert names(padded_out, 100) == ["weightsRearranged"]
    assert names(padded_out, 512) == []          # with the operands swapped, whole groups
    weight_update = Kernel(KernelKind.MATMUL, 2, m=64, k=4096, n=64 * 9, taps=9,
                           taps_on="n")
    assert names(weight_update, 64) == ["actsRearranged", "weightsRearranged"]
    # Their bytes: the input field times its channels, the weights k x n.
    (_, acts, atom), (_, weights, _) = rearrangements(conv1, 5, MK2, CALIBRATED_MK2)
    assert acts == 16 * 126 * 126 * 1 * 4 and atom == 4
    assert weights == 9 * 5 * 4


def test_a_matmuls_steps_are_its_transforms_convolve_and_reduction():
    kernel = Kernel(KernelKind.MATMUL, 4, m=900, k=600, n=300, regroup=600 * 300 * 4)
    cycles = operator_cycles(kernel, MK2, CALIBRATED_MK2)
    executes = [step.name for step in cycles.steps
                if step.program is ProgramKind.ON_TILE_EXECUTE]
    assert executes[:2] == ["Transpose", "weightsRearranged"]
    assert "Convolve" in executes and executes[-1].startswith("Reduce")
    for step in cycles.steps:   # every compute set opens with a sync and an exchange
        if step.program is ProgramKind.ON_TILE_EXECUTE:
            index = cycles.steps.index(step)
            assert [s.program for s in cycles.steps[index - 2:index]] == [
                ProgramKind.SYNC, ProgramKind.DO_EXCHANGE]
    roles = cycles.by_role()
    convolve = next(step for step in cycles.steps if step.name == "Convolve")
    assert roles[Role.VERTEX] == convolve.total and convolve.unit is Unit.AMP
    assert roles[Role.GLUE] > 0
    assert sum(roles.values()) == pytest.approx(cycles.total)


def test_fp32_partials_are_cast_at_the_slower_of_reading_and_writing():
    """estimateCastCycles (PerformanceEstimation.hpp:1822-1833): a worker reads the
    partials two floats a vector and writes four halves, so reading sets the pace."""
    kernel = Kernel(KernelKind.MATMUL, 2, m=1472 * 8, k=64, n=16)
    cycles = operator_cycles(kernel, MK2, CALIBRATED_MK2)
    cast = next(step for step in cycles.steps if step.name == "Cast")
    outputs = math.ceil(1472 * 8 * 16 / MK2.tiles)
    assert cast.cycles == 6 * (26 + math.ceil(math.ceil(outputs / 6) / 2))
    assert cast.glue
    half = operator_cycles(kernel, MK2, replace(CALIBRATED_MK2, half_partials=True))
    assert "Cast" not in [step.name for step in half.steps]


def test_a_compute_set_is_a_sync_an_exchange_phase_and_its_vertices():
    steps = compute_set("Map", 500, CALIBRATED_MK2, MK2, received_bytes=400, count=3)
    assert [step.program for step in steps] == [ProgramKind.SYNC, ProgramKind.DO_EXCHANGE,
                                                ProgramKind.ON_TILE_EXECUTE]
    assert steps[0].cycles == CALIBRATED_MK2.sync_cycles
    assert steps[1].cycles == CALIBRATED_MK2.exchange_overhead_cycles + 400 / 4
    cycles = OperatorCycles(steps)
    assert cycles.compute_sets == 3 and cycles.total == 3 * (90 + 200 + 500)
    assert cycles.times(2).total == 2 * cycles.total
    glue = Step(ProgramKind.ON_TILE_EXECUTE, "Reduce0", 10, Unit.VECTOR, glue=True)
    assert glue.role is Role.GLUE and steps[2].role is Role.VERTEX


def _timeline():
    conv = Kernel(KernelKind.MATMUL, 4, m=16 * 126 * 126, k=9, n=5, taps=9,
                  op="aten::convolution")
    norm = Kernel(KernelKind.NORMALISE, 4, elements=1 << 16, op="aten::native_group_norm")
    stage = Stage("s", forward=Cost(kernels=((conv, 1), (norm, 2))))
    return ipusim.simulate(Work((stage,)), ipusim.RunConfig(training=False),
                           ipusim.system_spec("mk2", 1))


def test_the_breakdown_lists_each_operators_steps_and_their_roles():
    table = _timeline().operator_breakdown()
    for row in table.itertuples(index=False):
        assert sum(cycles for *_, cycles in row.steps) == pytest.approx(row.total_cycles)
        assert row.vertex_cycles + row.glue_cycles + row.exchange_cycles + row.sync_cycles \
            == pytest.approx(row.total_cycles)
    norm = table[table["kind"] == "normalise"].iloc[0]
    assert len(norm.steps) == 3 * 7 and norm.compute_sets == 7 * 2   # two runs of 7 sets
    assert {role for _, _, role, _ in norm.steps} == {"sync", "exchange", "vertex"}


def test_the_profile_and_the_report_show_the_steps(tmp_path):
    from ipusim.report.autoreport import write_autoreport
    from ipusim.report.html import write_html
    timeline = _timeline()
    write_autoreport(tmp_path, timeline)
    profile = json.loads((tmp_path / "profile.json").read_text())
    conv = next(op for op in profile["operators"] if op["op"] == "aten::convolution")
    assert [step["name"] for step in conv["steps"]
            if step["program"] == "OnTileExecute"][:2] == ["actsRearranged",
                                                          "weightsRearranged"]
    assert sum(step["cycles"] for step in conv["steps"]) == pytest.approx(conv["total_cycles"])
    page = write_html(timeline, tmp_path / "page.html").read_text()
    assert "program steps" in page and "OnTileExecute" in page and "actsRearranged" in page
