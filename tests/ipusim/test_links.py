"""The replicas' links as PopLibs models and uses them: the ladder's rungs and rails,
the ring PopLibs picks for the partition, one all-reduce per gradient tensor
unless PopART merges them, the GW-Links beyond a Pod64, and streaming memory
behind the gateway. Each sourced figure is pinned here."""
from __future__ import annotations

from dataclasses import replace

import pytest

from ipusim import (
    Cost,
    Kernel,
    KernelKind,
    RunConfig,
    Stage,
    SystemSpec,
    Work,
    simulate,
    system_spec,
)
from ipusim.cost import optimizer
from ipusim.cost.collectives import (
    ALL_GATHER,
    BARLEY_TWIST_QUAD_FROM,
    BIDIRECTIONAL,
    CLOCKWISE,
    MEET_IN_MIDDLE,
    QUAD_DIRECTIONAL,
    REDUCE_SCATTER,
    ring_links,
    ring_method,
    ring_steps,
)
from ipusim.cost.cost_model import DEFAULT, PS_PER_MS, to_ps

GB = 1e9
#: The data-loading tutorial's fc1: fp32 41,772 x 100 weights (16.7 MB), and its nine
#: other parameter tensors (graphcore/tutorials, tutorials/pytorch/efficient_data_loading).
TUTORIAL = (180, 20, 6000, 48, 48, 48, 16_708_800, 400, 4000, 40)


def test_the_sourced_figures():
    system = SystemSpec()
    # PopLibs' own model of the links (graphcore/poplibs 7eac0f2,
    # lib/poplibs_test/Util.cpp:404-409): 0.85 of each link, a pair's own traffic on 4
    # links each way, 2 each way up and down a rail.
    assert DEFAULT.ipu_link_efficiency == 0.85
    assert (system.rung_links, system.rail_links) == (4, 2)
    # The GC200 datasheet: 10 links, 320 GB/s both ways: 16 GB/s each way a link.
    assert system.ipu.ipu_link_bandwidth == 16 * GB
    # PopLibs' BarleyTwist threshold (ReplicatedCollectives.cpp:449, 499 at f5f9369).
    assert BARLEY_TWIST_QUAD_FROM == 196_608
    # Two 100 Gbps GW-Links a machine (Bow-2000 datasheet), shared by its 4 IPUs.
    assert (system.gw_link_bandwidth, system.ipus_per_machine) == (25 * GB, 4)
    # Streaming memory: the gateway's measured buffer-to-tiles rates (gc-hosttraffictest).
    assert system.streaming_bandwidth() == 3.30 * GB
    assert system.streaming_bandwidth(to_device=False) == 3.76 * GB


def test_two_links_at_poplibs_efficiency_are_what_gc_iputraffictest_measured():
    """gc-iputraffictest's example (Command Line Tools guide): 423.3 Gbit/s both ways
    between two IPUs of an IPU-M2000, 26.5 GB/s each way; a rail's 2 links at 0.85
    give 27.2 GB/s, within 3%."""
    measured = 423.31207649625344e9 / 8 / 2
    rail = SystemSpec().rail_links * 16 * GB * DEFAULT.ipu_link_efficiency
    assert rail == pytest.approx(measured, rel=0.03)
    ipu = SystemSpec().ipu
    assert DEFAULT.ipu_copy_ps(27.2e6, ipu) == to_ps(1e-3)


def test_two_replicas_all_reduce_faster_than_four():
    """fc1's 16.7 MB: two replicas are the two IPUs of a pair, one clockwise ring on
    the rung's 4 links; four step along the rails' 2 each way in a bidirectional pair
    of rings. The tutorial's tables imply about 0.35 and 0.68 ms (not fitted)."""
    spec = system_spec("mk2", 4)
    two = DEFAULT.all_reduce_ps(16.7e6, 2, spec.ipu, spec)
    four = DEFAULT.all_reduce_ps(16.7e6, 4, spec.ipu, spec)
    assert two < four
    # the links alone: 2 phases of half the buffer at 4 x 16 x 0.85 GB/s; 6 steps of an
    # eighth at 2 x 16 x 0.85
    assert two == pytest.approx(to_ps(16.7e6 / (4 * 16 * GB * 0.85)), rel=0.02)
    assert four == pytest.approx(to_ps(6 * 16.7e6 / 8 / (2 * 16 * GB * 0.85)), rel=0.03)
    assert 0.30 * PS_PER_MS < two < 0.33 * PS_PER_MS
    assert 0.44 * PS_PER_MS < four < 0.48 * PS_PER_MS


@pytest.mark.parametrize("replicas, per_replica, links", [
    (2, 1, 4),     # a pair: across the rung
    (4, 1, 2),     # up one rail, down the other
    (16, 1, 2),
    (4, 2, 2),     # IPU i of replica r to IPU i of r + 1: one rail hop each
    (4, 4, 1),     # four IPUs along: two copies share each rail
    (2, 8, 0.5),
])
def test_each_ring_steps_over_its_slowest_hops_links(replicas, per_replica, links):
    assert ring_links(replicas, per_replica, 4, 2) == links


def test_multi_ipu_replicas_on_a_torus_meet_in_the_middle():
    """ReplicatedCollectives.cpp:454-458, 504-507 at f5f9369: faster than the
    clockwise ring a mesh runs."""
    for phase in (REDUCE_SCATTER, ALL_GATHER):
        assert ring_method(phase, 1e9, 8, 4, torus=True) == MEET_IN_MIDDLE
        assert ring_method(phase, 1e9, 8, 4, torus=False) == CLOCKWISE
        assert ring_method(phase, 1e9, 8, 1, torus=True) == BIDIRECTIONAL
    torus = system_spec("mk2", 32)
    mesh = replace(torus, ipu_link_topology="mesh")
    assert (DEFAULT.all_reduce_ps(1e8, 8, torus.ipu, torus, 4)
            < DEFAULT.all_reduce_ps(1e8, 8, mesh.ipu, mesh, 4))


def test_barley_twist_goes_quad_directional_from_196608_bytes_a_replica():
    for phase in (REDUCE_SCATTER, ALL_GATHER):
        below, at = 8 * (BARLEY_TWIST_QUAD_FROM - 1), 8 * BARLEY_TWIST_QUAD_FROM
        assert ring_method(phase, below, 8, barley_twist=True) == MEET_IN_MIDDLE
        assert ring_method(phase, at, 8, barley_twist=True) == QUAD_DIRECTIONAL
        assert ring_steps(phase, at, 8, barley_twist=True) == (7, at / 8 / 4)
    twisted = system_spec("mk2", 8, ipu_link_configuration="barley-twist")
    assert DEFAULT.all_reduce_ps(1e8, 8, twisted.ipu, twisted) > 0


def test_one_all_reduce_per_gradient_tensor_unless_merged():
    """Each tensor pays its own fixed costs and picks its own ring; merged
    (mergeAllReduceCollectives) they are one buffer."""
    spec = system_spec("mk2", 4)
    each = [DEFAULT.all_reduce_ps(size, 4, spec.ipu, spec) for size in TUTORIAL]
    separate = DEFAULT.gradients_all_reduce_ps(TUTORIAL, 4, spec.ipu, spec)
    merged = DEFAULT.gradients_all_reduce_ps(TUTORIAL, 4, spec.ipu, spec, merged=True)
    assert separate == sum(each)
    assert merged == DEFAULT.all_reduce_ps(sum(TUTORIAL), 4, spec.ipu, spec)
    assert merged < separate
    # the small tensors meet in the middle, fc1 runs the bidirectional pair
    assert ring_method(REDUCE_SCATTER, 180, 4) == MEET_IN_MIDDLE
    assert ring_method(REDUCE_SCATTER, 16_708_800, 4) == BIDIRECTIONAL


@pytest.mark.parametrize("merge", [False, True])
def test_a_simulated_step_charges_each_tensors_all_reduce(merge):
    spec = system_spec("mk2", 4)
    stage = Stage("s", weight_bytes=sum(TUTORIAL), weight_tensors=len(TUTORIAL),
                  weight_sizes=TUTORIAL)
    run = RunConfig(replicas=4, synthetic_data=True, merge_all_reduce=merge)
    events = simulate(Work((stage,)), run, spec, DEFAULT).events
    reduces = events[events["kind"] == "all_reduce"]
    assert len(reduces) == 4    # one collective event per IPU a step, whatever the tensors
    expected = DEFAULT.gradients_all_reduce_ps(TUTORIAL, 4, spec.ipu, spec, merged=merge)
    assert set(reduces["end_ps"] - reduces["start_ps"]) == {expected}


def test_a_stage_without_sizes_splits_its_weights_evenly():
    assert Stage("s", weight_bytes=10, weight_tensors=3).parameter_sizes == (4, 3, 3)
    assert Stage("s", weight_bytes=10).parameter_sizes == (10,)
    assert Stage("s").parameter_sizes == ()
    given = Stage("s", weight_bytes=10, weight_tensors=2, weight_sizes=(7, 3))
    assert given.parameter_sizes == (7, 3)
    # a share of the weights (sharded optimizer state) no longer adds up: split evenly
    assert replace(given, weight_bytes=6).parameter_sizes == (3, 3)


def test_merging_two_stages_keeps_each_tensor():
    a = Stage("a", weight_bytes=10, weight_tensors=2, weight_sizes=(7, 3))
    b = Stage("b", weight_bytes=5)
    assert Work((a, b)).merged().stages[0].parameter_sizes == (7, 3, 5)


def test_beyond_a_pod64_the_gw_links_are_shared_by_a_machines_ipus():
    """The cross-domain phase's rate is the machine's two GW-Links over its IPUs,
    not a host-link figure."""
    pod256 = system_spec("bow", 256)
    took = DEFAULT.all_reduce_ps(1e8, 256, pod256.ipu, pod256)
    assert DEFAULT.all_reduce_ps(1e8, 256, pod256.ipu, replace(pod256, ipus_per_host_link=1)) \
        == took
    assert DEFAULT.all_reduce_ps(1e8, 256, pod256.ipu, replace(pod256, ipus_per_machine=2)) \
        < took
    within = DEFAULT.all_reduce_ps(1e8, 64, pod256.ipu, pod256)
    domains, share = 4, 1e8 / 64
    across = to_ps(2 * (domains - 1) / domains * share / (25 * GB / 4))
    assert took == within + across + 2 * (domains - 1) * DEFAULT.ipu_sync_ps(256)


def test_the_optimizers_scalars_and_adam_without_bias_correction():
    """adamupdaterx.cpp: without bias correction the corrections are the constant 1,
    so the updater is 5 fused operations (7 with decoupled weight decay); every
    weight update negates its variable learning rate in a compute set of its own."""
    def updater(program):
        return next(op for op in program.ops if op.name == "Adam updater").operations
    assert updater(optimizer.adam()) == 9
    assert updater(optimizer.adam(bias_correction=False)) == 5
    assert updater(optimizer.adam(decoupled=True, bias_correction=False)) == 7
    for program in (optimizer.sgd(), optimizer.sgd(momentum=True),
                    optimizer.sgd(momentum=True, combined=True), optimizer.adam(),
                    optimizer.adam(lamb=True), optimizer.rmsprop()):
        negate = [op for op in program.ops if op.scalar]
        assert [op.name for op in negate] == ["negate learning rate"]
    forward = Cost(kernels=((Kernel(KernelKind.MATMUL, 4, m=64, k=64, n=64), 1),))
    stage = Stage("s", forward=forward, weight_bytes=4 << 20, weight_tensors=5)
    kernels = dict(optimizer.sgd(momentum=True).update_cost(stage).kernels)
    scalar = [(k, n) for k, n in kernels.items() if k.op == "negate learning rate"]
    assert [(k.elements, n) for k, n in scalar] == [(1, 5)]   # one element, once a tensor


def test_a_machines_ipus_share_the_host_link_into_the_gateway_not_their_own_hops():
    """gc-hosttraffictest: the host into the gateway's buffer at 7.06 GB/s, the buffer
    into one IPU's tiles at 3.30; out, the tiles at 3.76 and the buffer to the host at
    2.93. A copy holds the machine's shared hop for its bytes at the shared rate."""
    spec, cost = system_spec("mk2", 4), DEFAULT
    latency = cost.host_transfer_latency_ps
    assert cost.host_link_held_ps(10**6, spec) == latency + to_ps(10**6 / 7.06e9)
    assert cost.host_transfer_ps(10**6, spec) == latency + to_ps(10**6 / 3.30e9)
    # out of the IPU the shared hop is the slower one: the link is held throughout
    assert (cost.host_link_held_ps(10**6, spec, to_device=False)
            == cost.host_transfer_ps(10**6, spec, to_device=False))
    # a switched Pod64's links share one server's NICs: 1.56 GB/s a link, held throughout
    pod64 = system_spec("bow", 64)
    assert cost.host_link_held_ps(10**6, pod64, 64) == cost.host_transfer_ps(10**6, pod64, 64)
