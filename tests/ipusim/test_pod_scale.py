"""From Pod16 to Pod64 and beyond: where the host links end, what a Pod16 keeps,
and how Pod64s all-reduce over GW-Links.

A Pod16 attaches each machine's host link directly to its server; a Pod64 is
switched, and its 16 machines share the host servers' NICs (one dual-port
100 GbE server by default). Beyond a Pod64's IPU-Link domain the all-reduce adds
a ring over the machines' GW-Links. Simulated time is exact, so the figures are too.
"""
from dataclasses import replace

import pytest

from ipusim import (
    DEFAULT,
    Cost,
    CostModel,
    RunConfig,
    Stage,
    SystemSpec,
    Work,
    simulate,
    system_spec,
)
from ipusim.cost.cost_model import to_ps
from ipusim.engine.event_kinds import HOST_TO_DEVICE

IMAGES = 18 * 150_528  # a ResNet-50 micro-batch of 8-bit 224x224 images


def test_a_pod16_keeps_each_machines_own_host_link():
    pod16 = system_spec("bow", 16)
    assert pod16.host_link_share() == pod16.host_link_bandwidth == 12.5e9
    rate = pod16.gateway_to_ipu_bandwidth
    assert DEFAULT.host_transfer_ps(IMAGES, pod16, 16) == (
        DEFAULT.host_transfer_latency_ps + to_ps(IMAGES / rate))


def test_sixteen_machines_on_one_host_server_share_its_nic():
    pod64 = system_spec("bow", 64)
    assert pod64.num_host_links == 16
    assert pod64.host_link_share(64) == 25e9 / 16  # two 100 GbE ports over 16 links
    # 1.56 GB/s is below the 3.3 GB/s a copy reaches alone (gateway to tiles): the NIC binds.
    assert pod64.host_link_share(64) < pod64.gateway_to_ipu_bandwidth
    assert DEFAULT.host_transfer_ps(IMAGES, pod64, 64) == (
        DEFAULT.host_transfer_latency_ps + to_ps(IMAGES / (25e9 / 16)))
    assert DEFAULT.host_transfer_ps(IMAGES, pod64, 64) > DEFAULT.host_transfer_ps(
        IMAGES, system_spec("bow", 16), 16)


@pytest.mark.parametrize("spec, ipus", [
    (system_spec("bow", 64), 16),                          # a quarter of a Pod64 in use
    (system_spec("bow", 64, ipus_per_host_server=16), 64),  # four host servers
    (system_spec("bow", 64, host_server_bandwidth=8 * 12.5e9), 64),  # four dual-port NICs
])
def test_where_the_nic_share_exceeds_a_links_rate_a_copy_costs_what_it_does_on_a_pod16(spec, ipus):
    assert spec.host_link_share(ipus) >= spec.gateway_to_ipu_bandwidth
    assert DEFAULT.host_transfer_ps(IMAGES, spec, ipus) == DEFAULT.host_transfer_ps(
        IMAGES, system_spec("bow", 16), 16)


def test_the_share_counts_the_links_in_use_and_never_exceeds_a_link():
    pod64 = system_spec("bow", 64)
    assert pod64.host_link_share() == pod64.host_link_share(64) == 25e9 / 16
    assert pod64.host_link_share(32) == 25e9 / 8
    assert pod64.host_link_share(4) == pod64.host_link_bandwidth  # one link: its own 12.5 GB/s
    assert pod64.host_link_share(1000) == pod64.host_link_share(64)


def test_poprun_instances_on_one_link_divide_its_nic_share_too():
    pod64 = system_spec("bow", 64)
    per_instance = pod64.per_instance(4, 1)
    assert per_instance.host_server_bandwidth == pod64.host_server_bandwidth / 4
    assert per_instance.host_link_share(64) == pod64.host_link_share(64) / 4


def simulated_copy_ps(replicas: int, spec: SystemSpec, cost: CostModel = DEFAULT) -> int:
    """The duration of one micro-batch's input copy when ``replicas`` one-IPU replicas stream."""
    work = Work((Stage("s", 0, Cost(time_ps=10**9), Cost(time_ps=2 * 10**9)),),
                micro_batch_size=18, input_bytes_per_sample=150_528)
    run = RunConfig(replicas=replicas, gradient_accumulation=2, synthetic_data=False)
    events = simulate(work, run, spec, cost).events
    copies = events[events["kind"] == HOST_TO_DEVICE]
    durations = set((copies["end_ps"] - copies["start_ps"]).tolist())
    assert len(durations) == 1
    return durations.pop()


def test_a_simulated_pod64_streams_each_copy_at_its_nic_share():
    pod16, pod64 = system_spec("bow", 16), system_spec("bow", 64)
    assert simulated_copy_ps(16, pod16) == DEFAULT.host_transfer_ps(IMAGES, pod16, 16)
    assert simulated_copy_ps(64, pod64) == DEFAULT.host_transfer_ps(IMAGES, pod64, 64)
    assert simulated_copy_ps(64, pod64) > simulated_copy_ps(16, pod16)


def test_the_host_sync_is_graphcores_measured_one():
    # gc-hostsynclatencytest: 4,095 syncs (each with 32 delays of 5 cycles) in 1,485 us.
    assert DEFAULT.host_sync_ps == to_ps(1485e-6 / 4095) == 362_637


def test_the_new_fields_are_overrides_and_are_checked():
    spec = system_spec("mk2", 64, ipus_per_host_server=32, host_server_bandwidth=5e9,
                       direct_attach_ipus=4)
    assert (spec.ipus_per_host_server, spec.host_server_bandwidth, spec.direct_attach_ipus) == (
        32, 5e9, 4)
    assert replace(spec, num_ipus=4).host_link_share() == spec.host_link_bandwidth
    for bad, message in [({"ipus_per_host_server": 0}, "ipus_per_host_server must be a positive"),
                         ({"direct_attach_ipus": 1.5}, "direct_attach_ipus must be a positive"),
                         ({"host_server_bandwidth": 0}, "host_server_bandwidth must be positive"),
                         ({"host_server_bandwidth": float("nan")},
                          "host_server_bandwidth must be positive"),
                         ({"ipus_per_link_domain": 0}, "ipus_per_link_domain must be a positive"),
                         ({"gw_link_bandwidth": -1}, "gw_link_bandwidth must be positive")]:
        with pytest.raises(ValueError, match=message):
            SystemSpec(**bad)


GRADS = 51 * 10**6  # ResNet-50's fp16 gradients


def test_within_one_ipu_link_domain_the_all_reduce_is_the_ring_over_the_ipu_links():
    pod64 = system_spec("bow", 64)
    for replicas, per_replica in [(4, 1), (16, 1), (64, 1), (16, 4)]:
        assert DEFAULT.all_reduce_ps(GRADS, replicas, pod64.ipu, pod64, per_replica) == (
            DEFAULT.all_reduce_ps(GRADS, replicas, pod64.ipu, ipus_per_replica=per_replica))


def test_beyond_a_pod64_the_domains_reduce_over_the_gw_links():
    pod256 = system_spec("bow", 256)
    ring = DEFAULT.all_reduce_ps(GRADS, 64, pod256.ipu)  # inside each Pod64
    # Four domains: each IPU's 1/64 share goes 2 x 3/4 of the way round, at 25 GB/s
    # of GW-Links a machine shared by its 4 IPUs, in 6 steps that each end in a sync.
    across = 6 * DEFAULT.ipu_sync_ps(256) + to_ps(1.5 * GRADS / 64 / (25e9 / 4))
    assert DEFAULT.all_reduce_ps(GRADS, 256, pod256.ipu, pod256, 1) == ring + across
    # 64 four-IPU replicas: 16 a domain, each IPU's 1/16 share crosses.
    ring = DEFAULT.all_reduce_ps(GRADS, 16, pod256.ipu, ipus_per_replica=4)
    across = 6 * DEFAULT.ipu_sync_ps(256) + to_ps(1.5 * GRADS / 16 / (25e9 / 4))
    assert DEFAULT.all_reduce_ps(GRADS, 64, pod256.ipu, pod256, 4) == ring + across


def test_a_pod256_all_reduce_takes_longer_than_a_pod64s():
    pod64, pod256 = system_spec("bow", 64), system_spec("bow", 256)
    assert (DEFAULT.all_reduce_ps(GRADS, 256, pod256.ipu, pod256, 1)
            > DEFAULT.all_reduce_ps(GRADS, 64, pod64.ipu, pod64, 1))


def test_a_simulated_pod256_charges_the_gw_link_phase():
    work = Work((Stage("s", 0, Cost(time_ps=10**9), Cost(time_ps=2 * 10**9),
                       weight_bytes=GRADS),))
    run = RunConfig(replicas=256, gradient_accumulation=2, synthetic_data=True)
    pod256 = system_spec("bow", 256)
    events = simulate(work, run, pod256, DEFAULT).events
    reduces = events[events["kind"] == "all_reduce"]
    durations = set((reduces["end_ps"] - reduces["start_ps"]).tolist())
    assert durations == {DEFAULT.all_reduce_ps(GRADS, 256, pod256.ipu, pod256, 1)}
