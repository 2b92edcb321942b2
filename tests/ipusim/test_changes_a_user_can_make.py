"""Every what-if is a change a user can make: it names every setting it changes,
offers no change the run's calls cannot take, and where no change gains the
verdict's threshold the verdict says what bounds the run, never a cause with no
events behind it."""
from dataclasses import replace

import pytest

from ipusim import Cost, Execution, RunConfig, Stage, Work, simulate, system_spec
from ipusim.analysis.bottleneck import Bottleneck
from ipusim.explore.diagnosis import SIGNIFICANT_SPEEDUP, bound, diagnose
from ipusim.explore.what_if import what_ifs
from ipusim.report.verdict import bottleneck

US = 10**6  # picoseconds


def two_ipus(**run) -> tuple[Work, RunConfig]:
    """A model split over two IPUs, run sharded for inference: the host's round trip
    between calls outweighs its compute."""
    stages = tuple(Stage(f"S{i}", ipu=i, forward=Cost(time_ps=20 * US),
                         activation_bytes=10_000, weight_bytes=10**6) for i in range(2))
    work = Work(stages, micro_batch_size=2, input_bytes_per_sample=256,
                output_bytes_per_sample=512)
    return work, RunConfig(training=False, **run)


def entries(timeline) -> dict[str, dict]:
    return {entry["change"].split(" (and ")[0]: entry for entry in bottleneck(timeline).what_if}


def test_pipelined_execution_names_the_device_iterations_it_raises():
    work, run = two_ipus()
    timeline = simulate(work, run, system_spec("mk2", num_ipus=2), steps=3)
    pipelined = next(w for w in what_ifs(timeline).tried if w.setting == "pipelined")
    depth = timeline.plan.pipeline_depth if timeline.plan.pipeline_depth > 1 else 2
    assert pipelined.also == (("device_iterations", depth),)
    # What it simulates is a run made with both settings.
    by_hand = simulate(work, replace(run, execution=Execution.PIPELINED,
                                     device_iterations=depth), system_spec("mk2", 2), steps=4)
    assert pipelined.items_per_s == pytest.approx(by_hand.throughput(), rel=1e-9)
    words = entries(timeline)["pipelined execution"]["change"]
    assert words == f"pipelined execution (and RunConfig.device_iterations = {depth})"


def test_a_change_of_its_own_setting_alone_names_nothing_besides():
    work, run = two_ipus()
    found = what_ifs(simulate(work, run, system_spec("mk2", num_ipus=4), steps=3))
    for what_if in found.tried:
        if what_if.setting in ("device_iterations", "replicas", "sync_pattern"):
            assert what_if.also == ()


def test_a_generation_loop_on_the_host_is_offered_its_loop_on_the_device():
    work, run = two_ipus(autoregressive=True)
    timeline = simulate(work, run, system_spec("mk2", num_ipus=2), steps=3)
    found = what_ifs(timeline)
    assert not any(w.setting == "device_iterations" for w in found.tried)
    loop = next(w for w in found.tried if w.setting == "on_device_loop")
    assert (loop.value, loop.limit, loop.also) == (4, "host_round_trip", ())
    # Its steps run on the device as one call's iterations do.
    by_hand = simulate(work, replace(run, device_iterations=4), system_spec("mk2", 2), steps=4)
    assert loop.items_per_s == pytest.approx(by_hand.throughput(), rel=1e-9)
    # Pipelining it needs as many steps of the loop per call as the pipeline has stages.
    pipelined = next(w for w in found.tried if w.setting == "pipelined")
    assert [setting for setting, _ in pipelined.also] == ["on_device_loop"]
    verdict = bottleneck(timeline)
    said = " ".join((verdict.headline, *verdict.advice,
                     *(entry["change"] for entry in verdict.what_if)))
    assert "device_iterations" not in said and "device iterations" not in said
    assert "running 4 steps of the loop on the device in each call" in said


def test_the_same_run_without_the_loop_is_offered_device_iterations():
    work, run = two_ipus()
    found = what_ifs(simulate(work, run, system_spec("mk2", num_ipus=2), steps=3))
    assert any(w.setting == "device_iterations" for w in found.tried)
    assert not any(w.setting == "on_device_loop" for w in found.tried)


def loader_bound_replicas(loader_share: float):
    """Two replicas of a one-IPU model fed by a loader at ``loader_share`` of the
    IPUs' rate: no copies cross the IPU-Links."""
    work = Work((Stage("model", 0, Cost(time_ps=200 * US)),), micro_batch_size=8,
                input_bytes_per_sample=64)
    timeline = simulate(work, RunConfig(training=False, replicas=2, device_iterations=8),
                        system_spec("mk2", 2), steps=3)
    return timeline, timeline.throughput() * loader_share


def test_a_run_no_change_speeds_up_is_balanced_at_its_loader_not_its_links():
    timeline, loader = loader_bound_replicas(0.98)
    assert (timeline.category_times()["IPU copies"] == 0).all()
    diagnosis = diagnose(timeline, loader)
    assert all(w.speedup < SIGNIFICANT_SPEEDUP for w in diagnosis.what_ifs.tried)
    assert diagnosis.balanced and diagnosis.kind == "data_loader"
    verdict = bottleneck(timeline, loader)
    assert verdict.kind == "data_loader" and verdict.balanced
    assert verdict.headline.startswith("Balanced at its limit: no change tried gains 5%")
    assert "the data loader bounds it" in verdict.headline
    assert "IPU-Links" not in verdict.headline


def test_a_loader_far_slower_is_the_limit_a_faster_loader_lifts():
    timeline, loader = loader_bound_replicas(0.5)
    diagnosis = diagnose(timeline, loader)
    assert diagnosis.kind == "data_loader" and not diagnosis.balanced
    assert diagnosis.proof.speedup > 1.9
    assert not bottleneck(timeline, loader).headline.startswith("Balanced")


@pytest.mark.parametrize("loader, shares, bound_by", [
    (90.0, (0.5, 0.1, 0.1, 0.3), "data_loader"),        # the IPUs wait for the loader
    (110.0, (0.5, 0.1, 0.1, 0.3), "host_round_trip"),   # the loader keeps up
    (None, (0.1, 0.4, 0.1, 0.3), "host_link"),
    (None, (0.1, 0.1, 0.4, 0.3), "sync"),
    (None, (0.1, 0.1, 0.1, 0.7), "compute"),
])
def test_what_bounds_a_run_no_change_speeds_up_is_the_largest_share_of_its_time(
        loader, shares, bound_by):
    round_trip, host_io, sync, compute = shares
    figures = Bottleneck(kind="compute", device_items_per_s=100.0, loader_items_per_s=loader,
                         utilisation=compute, host_io_share=host_io, host_link_occupancy=0.0,
                         host_call_share=round_trip, sync_wait_share=sync, bubble_fraction=0.0)
    assert bound(figures) == bound_by
