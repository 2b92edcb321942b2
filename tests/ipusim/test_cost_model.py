"""The cost model: a roofline with efficiencies, and link transfer costs, in integer ps."""
import pytest

from ipusim import PROFILES, Cost, CostModel, Stage, system_spec
from ipusim.cost.collectives import ALL_GATHER, REDUCE_SCATTER, ring_method, ring_steps
from ipusim.cost.cost_model import PS_PER_S, to_ps
from ipusim.cost.optimizer import DEFAULT_PROGRAM

SPEC = system_spec("mk2", 4)
IPU = SPEC.ipu
COST = CostModel(flops_efficiency=0.5, host_transfer_latency_ps=7, ipu_link_efficiency=0.5,
                 ipu_sync_hop_ps=11)


def test_to_ps_rounds_to_integer_picoseconds():
    assert to_ps(1e-6) == 10**6
    assert to_ps(1.4e-12) == 1
    assert isinstance(to_ps(0.5), int)
    assert PS_PER_S == 10**12


def test_compute_is_flop_bound_or_memory_bound_plus_operator_overhead():
    """A hand-written cost's FLOPs at the efficiency given, its bytes through the tiles'
    64-bit vector paths, each operator one compute set's sync and exchange phase."""
    flop_bound = Cost(flops=62.5e12 * 0.5 * 1e-6)           # 1 us of arithmetic
    vector_path = IPU.tiles * 8 * IPU.clock_hz               # bytes a second
    memory_bound = Cost(bytes=vector_path * 2e-6)            # 2 us of traffic
    assert COST.compute_ps(flop_bound, IPU) == 10**6
    assert COST.compute_ps(memory_bound, IPU) == 2 * 10**6
    both = Cost(flops=flop_bound.flops, bytes=memory_bound.bytes, ops=7, time_ps=5)
    # 7 operators of 90 + 100 cycles: 1,330 cycles at 1.33 GHz = 1 us
    assert COST.compute_ps(both, IPU) == 5 + 10**6 + 2 * 10**6
    assert COST.compute_ps(Cost(), IPU) == 0


def test_fp16_uses_the_fp16_peak():
    work = Cost(flops=1e9)
    fp32 = CostModel(precision="fp32").compute_ps(work, IPU)
    fp16 = CostModel(precision="fp16").compute_ps(work, IPU)
    assert fp32 == pytest.approx(fp16 * IPU.fp16_flops / IPU.fp32_flops, abs=4)


def test_a_stream_copy_runs_at_its_slower_hop():
    assert COST.host_transfer_ps(0, SPEC) == 0
    # gc-hosttraffictest: host to the gateway's buffer 7.06 GB/s, the buffer to the tiles 3.30;
    # back, the tiles to the buffer 3.76 and the buffer to the host 2.93.
    assert COST.host_transfer_ps(10**6, SPEC) == 7 + to_ps(10**6 / 3.30e9)
    assert COST.host_transfer_ps(10**6, SPEC, to_device=False) == 7 + to_ps(10**6 / 2.93e9)


def test_ipu_copy_uses_a_rails_ipu_links():
    """A copy between neighbouring IPUs runs on its slowest hop, a rail's 2 links
    (PopLibs' IPU model, lib/poplibs_test/Util.cpp:406-409)."""
    assert COST.ipu_copy_ps(0, IPU) == 0
    assert COST.ipu_copy_ps(1.6e7, IPU) == to_ps(1.6e7 / (2 * IPU.ipu_link_bandwidth * 0.5))
    assert COST.ipu_copy_ps(1.6e7, IPU, SPEC) == COST.ipu_copy_ps(1.6e7, IPU)


def test_all_reduce_is_free_for_one_replica_or_no_bytes():
    assert COST.all_reduce_ps(10**8, 1, IPU) == 0
    assert COST.all_reduce_ps(0, 4, IPU) == 0


@pytest.mark.parametrize("phase, nbytes, replicas, per_replica, torus, expected", [
    # PopLibs' choice (ReplicatedCollectives.cpp:434-523 at f5f9369), worked out by hand.
    (REDUCE_SCATTER, 1e9, 2, 1, True, ("clockwise", 1, 5e8)),        # two replicas: one ring
    (REDUCE_SCATTER, 1e9, 4, 4, False, ("clockwise", 3, 2.5e8)),     # multi-IPU, on a mesh
    (REDUCE_SCATTER, 1e9, 4, 4, True, ("meet-in-middle", 2, 2.5e8)),  # multi-IPU, on a torus
    (ALL_GATHER, 1e9, 8, 2, True, ("meet-in-middle", 4, 1.25e8)),
    (REDUCE_SCATTER, 1e9, 4, 1, True, ("bidirectional", 3, 1.25e8)),  # >= 1,245,184 bytes
    (REDUCE_SCATTER, 1e6, 4, 1, True, ("meet-in-middle", 2, 2.5e5)),  # below it
    (ALL_GATHER, 2e6, 4, 1, True, ("meet-in-middle", 2, 5e5)),       # 2e6 / 4 < 622,592
    (ALL_GATHER, 3e6, 4, 1, True, ("bidirectional", 3, 3.75e5)),
    (REDUCE_SCATTER, 1e9, 64, 1, True, ("meet-in-middle", 32, 1e9 / 64)),  # past 16 replicas
])
def test_the_ring_poplibs_picks(phase, nbytes, replicas, per_replica, torus, expected):
    method, steps, step_bytes = expected
    assert ring_method(phase, nbytes, replicas, per_replica, torus) == method
    assert ring_steps(phase, nbytes, replicas, per_replica, torus) == (steps, step_bytes)


@pytest.mark.parametrize("replicas, per_replica, link_seconds", [
    (4, 1, 6 * 1.25e8 / 16e9),   # a bidirectional pair: 3 + 3 steps of an eighth, a rail each way
    (2, 1, 2 * 5e8 / 32e9),      # one ring: a half each phase, across the rung's 4 links
    (4, 4, 4 * 2.5e8 / 8e9),     # a torus: 2 + 2 steps of a quarter, 2 copies sharing a rail
    (8, 2, 8 * 1.25e8 / 16e9),   # 4 + 4 steps of an eighth, one copy a rail
    (64, 1, 64 * 1e9 / 64 / 16e9),  # meeting in the middle: 32 + 32 steps of a 64th
])
def test_an_all_reduce_sends_its_steps_over_the_slowest_hops_links(replicas, per_replica,
                                                                    link_seconds):
    """1 GB over IPU-Links at 16 GB/s x 0.5 each: a rail's 2 (8 GB/s each), the rung's
    4; the steps' syncs and compute sets add well under a percent."""
    took = COST.all_reduce_ps(10**9, replicas, IPU, ipus_per_replica=per_replica)
    assert took == pytest.approx(to_ps(link_seconds), rel=5e-3)
    assert took > to_ps(link_seconds)


def test_streaming_memory_transfer():
    """Streaming memory sits behind the gateway: by default the rates gc-hosttraffictest
    measured between its buffer and the tiles, 3.30 GB/s in and 3.76 out."""
    assert COST.streaming_ps(0, SPEC) == 0
    assert COST.streaming_ps(2 * 10**7, SPEC) == 7 + to_ps(2 * 10**7 / 3.30e9)
    assert COST.streaming_ps(2 * 10**7, SPEC, to_device=False) == 7 + to_ps(2 * 10**7 / 3.76e9)
    given = system_spec("mk2", 4, streaming_memory_bandwidth=20e9)
    assert COST.streaming_ps(2 * 10**7, given, to_device=False) == 7 + to_ps(10**-3)


def test_weight_update_derives_from_weight_bytes_unless_given():
    # PopTorch's default SGD: w *= 1 - lr * wd, then w -= lr * g, over 25 fp32 weights:
    # 2 operations an element, 1 + 1 and 2 + 1 tensors of 4 bytes read and written; and
    # its variable learning rate negated once, one fp32 read and written.
    sgd = DEFAULT_PROGRAM
    assert sgd.update_cost(Stage("s", weight_bytes=100)) == Cost(flops=51.0, bytes=508.0, ops=3)
    assert sgd.update_cost(Stage("s")) == Cost()
    given = Cost(flops=1.0)
    assert sgd.update_cost(Stage("s", weight_bytes=100, update=given)) is given


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
