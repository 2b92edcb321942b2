"""Hardware presets (DESIGN.md §4) and overriding their figures through ``system_spec``."""
import dataclasses
import re

import pytest

from ipusim import (
    BOW,
    MK1_GC2,
    MK2_GC200,
    PRESETS,
    Cost,
    CostModel,
    IPUSpec,
    SystemSpec,
    system_spec,
)

KIB, MB, GB, TFLOPS = 1024, 1e6, 1e9, 1e12


def test_mk2_gc200_figures():
    ipu = MK2_GC200
    assert ipu.tiles == 1472
    assert ipu.sram_per_tile_bytes == 624 * KIB
    assert ipu.sram_bytes == 1472 * 624 * KIB
    assert 890 * MB < ipu.sram_bytes < 950 * MB  # "~900 MB"
    assert ipu.clock_hz == 1.33e9
    assert ipu.fp16_flops == 250 * TFLOPS
    assert ipu.fp32_flops == 62.5 * TFLOPS
    assert ipu.memory_bandwidth == 47.5e12
    assert ipu.ipu_links == 10
    assert 2 * ipu.ipu_links * ipu.ipu_link_bandwidth == 320 * GB  # both directions


def test_mk1_gc2_figures():
    ipu = MK1_GC2
    assert ipu.tiles == 1216
    assert ipu.sram_per_tile_bytes == 256 * KIB
    assert ipu.sram_bytes == 1216 * 256 * KIB
    assert ipu.clock_hz == 1.6e9
    assert ipu.fp32_flops == 31.1 * TFLOPS
    assert ipu.fp16_flops == 124.5 * TFLOPS


def test_bow_figures():
    assert BOW.tiles == 1472
    assert BOW.sram_bytes == MK2_GC200.sram_bytes
    assert BOW.clock_hz == 1.85e9
    assert BOW.fp16_flops == 350 * TFLOPS


def test_presets_by_name():
    assert PRESETS["mk2"] is PRESETS["gc200"] is MK2_GC200
    assert PRESETS["mk1"] is PRESETS["gc2"] is MK1_GC2
    assert PRESETS["bow"] is BOW
    assert system_spec("MK2").ipu == MK2_GC200
    assert system_spec("bow", 4).ipu == BOW


def test_default_system_is_one_mk2_ipu_m2000_host_link_per_four_ipus():
    spec = SystemSpec()
    assert spec.ipu is MK2_GC200
    assert spec.num_ipus == 1
    assert spec.ipus_per_host_link == 4
    sixteen = system_spec("mk2", 16)
    assert sixteen.num_host_links == 4
    assert [sixteen.host_link_of(i) for i in (0, 3, 4, 15)] == [0, 0, 1, 3]
    assert system_spec("mk2", 5).num_host_links == 2


def test_overrides_reach_the_ipu_and_the_system():
    spec = system_spec("mk2", 8, clock_hz=1.2e9, tiles=1000, host_link_bandwidth=8e9,
                       ipus_per_host_link=2)
    assert spec.num_ipus == 8
    assert spec.ipu.clock_hz == 1.2e9
    assert spec.ipu.tiles == 1000
    assert spec.ipu.sram_bytes == 1000 * 624 * KIB
    assert spec.host_link_bandwidth == 8e9
    assert spec.num_host_links == 4
    assert spec.ipu.name == MK2_GC200.name
    assert MK2_GC200.clock_hz == 1.33e9  # the preset itself is untouched


def test_overrides_change_the_simulated_times():
    cost = CostModel()
    base = system_spec("mk2")
    fast_clock = system_spec("mk2", clock_hz=2 * MK2_GC200.clock_hz)
    overhead_only = Cost(ops=1000)
    assert cost.compute_ps(overhead_only, fast_clock.ipu) * 2 == pytest.approx(
        cost.compute_ps(overhead_only, base.ipu), abs=2)
    flop_bound = Cost(flops=1e12)
    more_flops = system_spec("mk2", fp32_flops=2 * MK2_GC200.fp32_flops)
    assert cost.compute_ps(flop_bound, more_flops.ipu) * 2 == pytest.approx(
        cost.compute_ps(flop_bound, base.ipu), abs=2)
    slow_link = system_spec("mk2", gateway_to_ipu_bandwidth=base.gateway_to_ipu_bandwidth / 2)
    assert cost.host_transfer_ps(10**8, slow_link) > cost.host_transfer_ps(10**8, base)


def test_poprun_instances_on_one_ipu_m2000_share_its_host_link():
    pod = system_spec("mk2", 16)  # four IPUs per host link
    assert pod.per_instance(1, 16) is pod  # one process: the links are its own
    # Four instances of one IPU each sit on one IPU-M2000: a quarter of its link each.
    assert pod.per_instance(4, 1).host_link_bandwidth == pod.host_link_bandwidth / 4
    # Two instances of two IPUs share a link; two of four IPUs each have their own.
    assert pod.per_instance(2, 2).host_link_bandwidth == pod.host_link_bandwidth / 2
    assert pod.per_instance(2, 4) is pod
    # No more instances share a link than there are.
    assert pod.per_instance(2, 1).host_link_bandwidth == pod.host_link_bandwidth / 2
    assert pod.per_instance(4, 1).num_ipus == pod.num_ipus


def test_specs_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        MK2_GC200.tiles = 1  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        SystemSpec().num_ipus = 2  # type: ignore[misc]


def test_every_figure_documents_itself():
    for cls in (IPUSpec, SystemSpec, CostModel):
        for f in dataclasses.fields(cls):
            assert f.metadata.get("help"), f"{cls.__name__}.{f.name} has no help text"


def test_unknown_preset_names_the_choices():
    with pytest.raises(ValueError, match=r"Unknown IPU preset 'mk3'; expected one of \['bow', "):
        system_spec("mk3")


def test_unknown_override_names_it_and_the_known_fields():
    with pytest.raises(ValueError, match=r"Unknown system override\(s\) \['clock'\].*clock_hz"):
        system_spec("mk2", clock=1e9)


@pytest.mark.parametrize("override", [{"clock_hz": 0}, {"tiles": -1}, {"fp32_flops": 0.0},
                                      {"ipu_link_bandwidth": -5.0}])
def test_non_positive_ipu_figures_are_rejected(override):
    (name, value), = override.items()
    with pytest.raises(ValueError, match=rf"IPUSpec\.{name} must be positive, got {value!r}"):
        system_spec("mk2", **override)


@pytest.mark.parametrize("override, message", [
    ({"clock_hz": float("nan")}, "IPUSpec.clock_hz must be positive, got nan"),
    ({"clock_hz": float("inf")}, "IPUSpec.clock_hz must be finite, got inf"),
    ({"tiles": 1.5}, "IPUSpec.tiles must be a whole number, got 1.5"),
    ({"workers": True}, "IPUSpec.workers must be positive, got True"),
    ({"host_link_bandwidth": float("inf")}, "SystemSpec.host_link_bandwidth must be finite"),
])
def test_figures_that_are_not_numbers_are_rejected(override, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        system_spec("mk2", **override)


@pytest.mark.parametrize("override", [{"num_ipus": 0}, {"ipus_per_host_link": 0}])
def test_non_positive_system_counts_are_rejected(override):
    (name, value), = override.items()
    with pytest.raises(ValueError, match=rf"SystemSpec\.{name} must be a positive integer, got 0"):
        SystemSpec(**override)
