"""The operator-level compute model: shapes and dtypes to cycles, as the tile works."""
from __future__ import annotations

from dataclasses import replace

import pytest

import ipusim
from ipusim import Cost, Kernel, KernelKind
from ipusim.cost_model import CALIBRATED_MK2, PS_PER_S
from ipusim.operator_model import COMPUTE_SETS, exchange_cycles, kernel_cycles

HALF = replace(CALIBRATED_MK2, half_partials=True)
NO_OVERHEAD = replace(CALIBRATED_MK2, compute_set_cycles=0)


def matmul(m: int, k: int, n: int, width: int = 2, groups: int = 1) -> Kernel:
    return Kernel(KernelKind.MATMUL, width, m=m, k=k, n=n, groups=groups)


def work(kernel: Kernel, model=NO_OVERHEAD, ipu=ipusim.MK2_GC200) -> float:
    return kernel_cycles(kernel, ipu, model)


@pytest.mark.parametrize("ipu", [ipusim.MK2_GC200, ipusim.BOW, ipusim.MK1_GC2])
def test_the_amp_geometry_gives_the_published_peaks(ipu):
    """Input channels x conv units / cycles per output, over every tile at the
    clock, is the datasheet's FP16 and FP32 peak."""
    def peak(width, half_partials):
        return 2 * ipu.tiles * ipu.clock_hz * ipu.amp_macs_per_cycle(width, half_partials)
    assert peak(2, True) == pytest.approx(ipu.fp16_flops, rel=0.02)
    assert peak(4, False) == pytest.approx(ipu.fp32_flops, rel=0.02)


def test_a_large_half_matmul_nears_the_16_bit_peak():
    kernel = matmul(4096, 4096, 4096)
    cycles = work(kernel, replace(HALF, compute_set_cycles=0))
    ipu = ipusim.MK2_GC200
    achieved = 2 * 4096 ** 3 / (cycles / ipu.clock_hz)
    assert 0.6 * ipu.fp16_flops < achieved < ipu.fp16_flops


def amp(kernel: Kernel, model=NO_OVERHEAD) -> float:
    """The AMP's share of a matmul: its cycles less moving its operands."""
    operands = (kernel.m * kernel.k + kernel.k * kernel.n + kernel.m * kernel.n) * kernel.width
    return work(kernel, model) - exchange_cycles(operands, ipusim.MK2_GC200)


def test_channels_are_padded_to_the_amp_blocks():
    """Five output channels keep the AMP as busy as sixteen do; seventeen take two passes."""
    assert amp(matmul(100_000, 64, 5)) == pytest.approx(amp(matmul(100_000, 64, 8)))
    half = replace(NO_OVERHEAD, half_partials=True)
    assert amp(matmul(100_000, 64, 5), half) == pytest.approx(amp(matmul(100_000, 64, 16), half))
    assert amp(matmul(100_000, 64, 17), half) > 1.5 * amp(matmul(100_000, 64, 16), half)


def test_half_runs_four_times_and_fp32_partials_half_that():
    big_half, big_float = matmul(8192, 2048, 2048, width=2), matmul(8192, 2048, 2048, width=4)
    half = replace(NO_OVERHEAD, half_partials=True)
    assert work(big_float, half) / work(big_half, half) == pytest.approx(4, rel=0.15)
    assert work(big_half, NO_OVERHEAD) / work(big_half, half) == pytest.approx(2, rel=0.15)
    # Mk1 has 8 conv units for half inputs whichever the partials.
    assert work(big_half, NO_OVERHEAD, ipusim.MK1_GC2) == work(big_half, half, ipusim.MK1_GC2)


def test_few_rows_per_tile_waste_the_amp():
    """Per multiply-accumulate, a batch-16 matmul with 16 outputs costs far more
    than a batch-16k one: each tile gets a few rows, and pays a pass for them."""
    small, large = matmul(16, 4096, 16), matmul(16384, 4096, 16)
    assert work(small) / 16 > 5 * work(large) / 16384


def test_the_planner_streams_the_longer_dimension():
    assert work(matmul(16, 1024, 65536)) == work(matmul(65536, 1024, 16))


def test_vector_operators_run_at_64_bits_a_cycle():
    elements = 1472 * 4 * 1000
    half = Kernel(KernelKind.ELEMENTWISE, 2, elements=elements)
    single = Kernel(KernelKind.ELEMENTWISE, 4, elements=elements)
    assert work(half) == 1000 and work(single) == 2000
    exp = Kernel(KernelKind.TRANSCENDENTAL, 2, elements=elements)
    assert work(exp) == 4 * work(half)


def test_every_operator_pays_for_its_compute_sets():
    tiny = Kernel(KernelKind.ELEMENTWISE, 4, elements=2)
    norm = Kernel(KernelKind.NORMALISE, 4, elements=2)
    model = CALIBRATED_MK2
    assert kernel_cycles(tiny, ipusim.MK2_GC200, model) == 1 + model.compute_set_cycles
    assert kernel_cycles(norm, ipusim.MK2_GC200, model) == \
        4 + COMPUTE_SETS[KernelKind.NORMALISE] * model.compute_set_cycles


def test_a_cost_with_kernels_is_priced_by_them_and_counted():
    kernel = matmul(1024, 1024, 1024)
    cost = Cost(flops=2 * 1024 ** 3, kernels=((kernel, 3),))
    ipu = ipusim.MK2_GC200
    expected = 3 * kernel_cycles(kernel, ipu, CALIBRATED_MK2) / ipu.clock_hz
    assert CALIBRATED_MK2.compute_ps(cost, ipu) == round(expected * PS_PER_S)
    # Adding costs merges their kernels: the same kernel is counted, not repeated.
    assert (cost + cost).kernels == ((kernel, 6),)


def test_a_hand_written_cost_keeps_the_roofline():
    cost = Cost(flops=1e9, bytes=1e6, ops=10)
    ipu = ipusim.MK2_GC200
    model = CALIBRATED_MK2
    flop_s = 1e9 / (ipu.fp32_flops * model.flops_efficiency)
    overhead_s = 10 * model.op_overhead_cycles / ipu.clock_hz
    assert model.compute_ps(cost, ipu) == round((flop_s + overhead_s) * PS_PER_S)


def test_a_faster_clock_runs_the_same_cycles_faster():
    cost = Cost(kernels=((matmul(4096, 1024, 1024), 1),))
    mk2 = CALIBRATED_MK2.compute_ps(cost, ipusim.MK2_GC200)
    bow = CALIBRATED_MK2.compute_ps(cost, ipusim.BOW)
    assert mk2 / bow == pytest.approx(1.85 / 1.33, rel=1e-3)


def test_bad_kernels_are_refused():
    with pytest.raises(ValueError, match="width"):
        Kernel(KernelKind.MATMUL, 3, m=1, k=1, n=1)
    with pytest.raises(ValueError, match="groups"):
        Kernel(KernelKind.MATMUL, 2, m=1, k=1, n=1, groups=0)
    with pytest.raises(ValueError, match="m must not be negative"):
        Kernel(KernelKind.MATMUL, 2, m=-1, k=1, n=1)
