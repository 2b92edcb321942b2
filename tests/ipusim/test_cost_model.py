"""The cost model: a roofline with efficiencies, and link transfer costs, in integer ps."""
import pytest

from ipusim import PROFILES, Cost, CostModel, Stage, system_spec
from ipusim.cost.cost_model import PS_PER_S, to_ps

SPEC = system_spec("mk2", 4)
IPU = SPEC.ipu
COST = CostModel(flops_efficiency=0.5, memory_efficiency=0.5, op_overhead_cycles=1330,
                 host_link_efficiency=0.5, host_transfer_latency_ps=7, ipu_link_efficiency=0.5,
                 ipu_sync_hop_ps=11)


def test_to_ps_rounds_to_integer_picoseconds():
    assert to_ps(1e-6) == 10**6
    assert to_ps(1.4e-12) == 1
    assert isinstance(to_ps(0.5), int)
    assert PS_PER_S == 10**12


def test_compute_is_flop_bound_or_memory_bound_plus_operator_overhead():
    flop_bound = Cost(flops=62.5e12 * 0.5 * 1e-6)           # 1 us of arithmetic
    memory_bound = Cost(bytes=47.5e12 * 0.5 * 2e-6)          # 2 us of SRAM traffic
    assert COST.compute_ps(flop_bound, IPU) == 10**6
    assert COST.compute_ps(memory_bound, IPU) == 2 * 10**6
    both = Cost(flops=flop_bound.flops, bytes=memory_bound.bytes, ops=3, time_ps=5)
    assert COST.compute_ps(both, IPU) == 5 + 3 * 10**6 + 2 * 10**6  # 1330 cycles at 1.33 GHz = 1 us
    assert COST.compute_ps(Cost(), IPU) == 0


def test_fp16_uses_the_fp16_peak():
    work = Cost(flops=1e9)
    fp32 = CostModel(precision="fp32").compute_ps(work, IPU)
    fp16 = CostModel(precision="fp16").compute_ps(work, IPU)
    assert fp32 == pytest.approx(fp16 * IPU.fp16_flops / IPU.fp32_flops, abs=4)


def test_host_transfer_is_latency_plus_bytes_over_the_effective_bandwidth():
    assert COST.host_transfer_ps(0, SPEC) == 0
    rate = SPEC.host_link_bandwidth * 0.5
    assert COST.host_transfer_ps(10**6, SPEC) == 7 + to_ps(10**6 / rate)


def test_ipu_copy_uses_one_ipu_link():
    assert COST.ipu_copy_ps(0, IPU) == 0
    assert COST.ipu_copy_ps(1.6e7, IPU) == to_ps(1.6e7 / (IPU.ipu_link_bandwidth * 0.5))


def test_all_reduce_is_free_for_one_replica_and_grows_with_replicas():
    assert COST.all_reduce_ps(10**8, 1, IPU) == 0
    assert COST.all_reduce_ps(0, 4, IPU) == 0
    times = [COST.all_reduce_ps(10**8, r, IPU) for r in (2, 4, 8, 16)]
    assert times == sorted(times) and len(set(times)) == 4
    # A sync (two hops for four IPUs) is paid 2(n-1) times; the volume 2(n-1)/n of the buffer.
    big, small = COST.all_reduce_ps(10**9, 4, IPU), COST.all_reduce_ps(10**8, 4, IPU)
    assert big - 6 * 22 == pytest.approx(10 * (small - 6 * 22), abs=10)


def test_streaming_memory_transfer():
    assert COST.streaming_ps(0, SPEC) == 0
    expected = 7 + to_ps(2 * 10**7 / SPEC.streaming_memory_bandwidth)
    assert COST.streaming_ps(2 * 10**7, SPEC) == expected


def test_weight_update_derives_from_weight_bytes_unless_given():
    cost = CostModel(update_flops_per_weight_byte=2.0, update_bytes_per_weight_byte=3.0)
    assert cost.update_cost(Stage("s", weight_bytes=100)) == Cost(flops=200.0, bytes=300.0, ops=1)
    assert cost.update_cost(Stage("s")) == Cost()
    given = Cost(flops=1.0)
    assert cost.update_cost(Stage("s", weight_bytes=100, update=given)) is given


def test_costs_add():
    a, b = Cost(1.0, 2.0, 3, 4), Cost(10.0, 20.0, 30, 40)
    assert a + b == Cost(11.0, 22.0, 33, 44)


def test_every_duration_is_an_integer():
    for value in (COST.compute_ps(Cost(flops=1.234e9, bytes=5.67e8, ops=3), IPU),
                  COST.host_transfer_ps(12345, SPEC), COST.ipu_copy_ps(777, IPU),
                  COST.all_reduce_ps(999, 3, IPU), COST.streaming_ps(4321, SPEC),
                  COST.ipu_sync_ps(4)):
        assert isinstance(value, int)


def test_profiles_are_cost_models():
    assert set(PROFILES) >= {"default", "calibrated-mk2"}
    assert all(isinstance(p, CostModel) for p in PROFILES.values())


def test_the_ring_all_reduce_moves_2_n_minus_1_over_n_of_the_buffer():
    """A 1 GB buffer over 4 replicas: each IPU sends 1.5 GB, half round the
    ring each way over all ten links at once, 2 x 10 x 16 GB/s x 0.5, after
    2(n - 1) = 6 steps, each ending in a sync of two hops of 11 ps: worked out by
    hand, not by the cost model."""
    expected = 6 * 2 * 11 + round(1.5e9 / 160e9 * 1e12)   # 9,375,000,132 ps
    assert COST.all_reduce_ps(10**9, 4, IPU) == expected == 9_375_000_132
