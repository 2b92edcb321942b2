"""The bottleneck verdict on crafted timelines, one per kind, with the tutorial's advice."""
import dataclasses
import json
from functools import partial

import pytest
from support.intervals import covered_ps

from ipusim import Cost, Execution, RunConfig, Stage, SyncPattern, Work, simulate, system_spec
from ipusim.analysis.bottleneck import DIAGNOSED, HOST_LINK_THRESHOLD, SYNC_THRESHOLD
from ipusim.cost.cost_model import CALIBRATED_MK2
from ipusim.explore.diagnosis import SIGNIFICANT_SPEEDUP
from ipusim.report import Verdict, bottleneck

from report_timelines import US, pipeline_run, stages

# The hand-written runs here are built to show one bottleneck; a short host round
# trip per call (instead of the calibrated one) keeps it from masking that one.
QUICK_CALLS = dataclasses.replace(CALIBRATED_MK2, engine_run_ps=250 * 10**6)  # a 0.3 ms host call
simulate = partial(simulate, cost_model=QUICK_CALLS)


def single_ipu(compute_us: float, input_bytes_per_sample: int, replicas: int = 1,
               synthetic: bool = False, **run_fields):
    work = Work((Stage("model", 0, Cost(time_ps=int(compute_us * US)),
                       Cost(time_ps=int(2 * compute_us * US))),),
                micro_batch_size=16, input_bytes_per_sample=input_bytes_per_sample,
                output_bytes_per_sample=4)
    run = RunConfig(replicas=replicas, device_iterations=20, synthetic_data=synthetic,
                    **run_fields)
    return simulate(work, run, system_spec("mk2", replicas), steps=2)


def test_a_loader_slower_than_the_device_is_the_bottleneck():
    timeline = single_ipu(500, 64, synthetic=True)
    device = timeline.throughput()
    verdict = bottleneck(timeline, loader_items_per_s=device / 2)
    assert verdict.kind == "data_loader"
    assert verdict.loader_items_per_s == device / 2 and verdict.device_items_per_s == device
    text = " ".join(verdict.advice)
    for hint in ("asynchronous data loader", "worker processes", "without a pause",
                 "persist across epochs"):
        assert hint in text
    # More device iterations still wait for the loader: its table shows no gain, and the
    # advice does not suggest it.
    more = next(w for w in verdict.what_if if w["option"] == "RunConfig.device_iterations")
    assert more["speedup"] == pytest.approx(1.0)
    assert "RunConfig.device_iterations" not in text
    assert bottleneck(timeline, loader_items_per_s=device * 10).kind == "compute"


def test_replicas_sharing_a_host_link_with_big_inputs_are_host_link_bound():
    # 4 replicas on one IPU-M2000 each stream 16 x 256 KiB per micro-batch over one link
    timeline = single_ipu(20, 256 * 1024, replicas=4)
    verdict = bottleneck(timeline)
    assert verdict.kind == "host_link"
    assert verdict.host_link_occupancy > 0.8 > verdict.utilisation
    text = " ".join(verdict.advice)
    assert "RunConfig.synthetic_data=True" in text and "replicas per host link" in text
    synthetic = single_ipu(20, 256 * 1024, replicas=4, synthetic=True)
    assert synthetic.throughput() > 3 * timeline.throughput()
    freed = bottleneck(synthetic)  # without host data, the link limits nothing
    assert freed.kind != "host_link"
    assert all(w["speedup"] < 1.01 for w in freed.what_if
               if w["change"] == "an infinitely fast host link")


def test_a_host_round_trip_per_call_is_named_as_such():
    timeline = single_ipu(5, 64, synthetic=True)  # 20 iterations of 15 µs per 200 µs round trip
    verdict = bottleneck(timeline)
    assert verdict.kind == "host_round_trip"
    assert verdict.host_call_share > 0.3 and verdict.host_call_share > verdict.host_io_share
    assert verdict.host_call_share == timeline.host_round_trip_share()
    assert f"{verdict.host_call_share:.0%} of the time waiting for the host" in verdict.headline
    assert "RunConfig.device_iterations" in verdict.advice[0]


def test_a_short_pipeline_is_bubble_bound():
    timeline = pipeline_run(micro_batches=7, synthetic_data=True)  # G = P: the minimum
    verdict = bottleneck(timeline)
    assert verdict.kind == "pipeline_bubble"
    assert verdict.bubble_fraction == pytest.approx(6 / 13)
    assert "RunConfig.gradient_accumulation" in verdict.advice[0]
    wide = bottleneck(pipeline_run(micro_batches=64, synthetic_data=True))
    assert wide.bubble_fraction == pytest.approx(6 / 70)

    def gain(found):
        return next(w["speedup"] for w in found.what_if
                    if w["change"] == "four times the gradient accumulation")

    assert gain(verdict) > 1.3 > gain(wide)  # the wider pipeline has less bubble to lose


def test_unbalanced_stages_are_named_in_the_advice():
    work = Work(tuple(Stage(f"s{k}", k, Cost(time_ps=(300 if k == 2 else 50) * US),
                            Cost(time_ps=(600 if k == 2 else 100) * US)) for k in range(4)))
    run = RunConfig(gradient_accumulation=7, execution=Execution.PIPELINED, synthetic_data=True)
    timeline = simulate(work, run, system_spec("mk2", 4))
    times = timeline.stage_times_us()
    assert times[2] == pytest.approx(900) and times[0] == pytest.approx(150)
    advice = " ".join(bottleneck(timeline).advice)
    assert "stage 2 takes 900.0 µs per micro-batch, 6.0x stage 0" in advice


def test_sharded_ipus_waiting_for_each_other_are_sync_bound():
    work = Work(stages(2, forward_us=500, backward_us=1000), micro_batch_size=4)
    run = RunConfig(device_iterations=4, synthetic_data=True)
    verdict = bottleneck(simulate(work, run, system_spec("mk2", 2), steps=2))
    assert verdict.kind == "sync"
    assert verdict.sync_wait_share > 0.4
    text = " ".join(verdict.advice)
    assert "Execution.PIPELINED" in text and "SyncPattern.SINGLE_PIPELINE" in text
    assert "ReplicaAndLadder" not in text, "ping-pong is for phased execution"


@pytest.mark.parametrize("execution, advised", [
    (Execution.PHASED, "Execution.PARALLEL_PHASED with SyncPattern.ReplicaAndLadder"),
    (Execution.PARALLEL_PHASED, "SyncPattern.ReplicaAndLadder lets the two halves")])
def test_phased_execution_is_advised_to_ping_pong(execution, advised):
    work = Work(tuple(Stage(f"P{k}", k % 2, Cost(flops=1e9), Cost(flops=2e9),
                            weight_bytes=10**8) for k in range(4)), micro_batch_size=4,
                input_bytes_per_sample=10**5)
    run = RunConfig(execution=execution, gradient_accumulation=2)
    # streaming at 20 GB/s, so that the phases' compute, not their streaming, sets the pace
    spec = system_spec("mk2", 2, streaming_memory_bandwidth=20e9)
    verdict = bottleneck(simulate(work, run, spec))
    assert advised in " ".join(verdict.advice) or advised in verdict.headline


def test_sync_waits_explained_by_the_bubble_do_not_count_as_sync():
    work = Work(stages(4, forward_us=2000), micro_batch_size=4, input_bytes_per_sample=64)
    run = RunConfig(training=False, device_iterations=8, execution=Execution.PIPELINED)
    verdict = bottleneck(simulate(work, run, system_spec("mk2", 4)))
    # the IPUs idle through the bubble at the exchange syncs ...
    assert verdict.sync_wait_share > SYNC_THRESHOLD
    assert verdict.sync_wait_share - verdict.bubble_fraction < SYNC_THRESHOLD
    assert verdict.kind == "pipeline_bubble"  # ... so the bubble is the verdict
    assert "RunConfig.device_iterations" in verdict.advice[0]


def test_a_busy_single_ipu_is_compute_bound():
    verdict = bottleneck(single_ipu(2000, 64, synthetic=True))
    assert verdict.kind == "compute" and verdict.utilisation > 0.95
    assert "RunConfig.replicas" in verdict.advice[0]


def test_verdict_is_frozen_and_serialisable():
    verdict = bottleneck(pipeline_run(micro_batches=7))
    assert verdict.kind in DIAGNOSED and isinstance(verdict, Verdict)
    with pytest.raises(dataclasses.FrozenInstanceError):
        verdict.kind = "compute"
    data = json.loads(json.dumps(verdict.to_dict()))
    assert data["kind"] == verdict.kind and data["advice"] == list(verdict.advice)
    assert verdict.headline and verdict.advice


def test_host_link_occupancy_is_the_busiest_link_and_direction(replicated_timeline):
    events = replicated_timeline.events
    copies = events[events["kind"] == "host_to_device"]
    # all 4 IPUs on link 0, streaming at once: the link is busy while any copy runs
    busy = covered_ps(copies["start_ps"], copies["end_ps"])
    assert busy < (copies["end_ps"] - copies["start_ps"]).sum()
    span = events["end_ps"].max() - events["start_ps"].min()
    assert replicated_timeline.host_link_occupancy() == pytest.approx(busy / span)


@pytest.mark.parametrize("rate", [0, -5.0, float("nan")])
def test_a_loader_rate_must_be_positive(rate):
    with pytest.raises(ValueError, match="loader_items_per_s must be a positive number"):
        bottleneck(pipeline_run(micro_batches=7), loader_items_per_s=rate)


def test_sync_pattern_advice_follows_the_run():
    work = Work(stages(2, forward_us=500, backward_us=1000), micro_batch_size=4)
    run = RunConfig(device_iterations=4, synthetic_data=True,
                    sync_pattern=SyncPattern.SINGLE_PIPELINE)
    verdict = bottleneck(simulate(work, run, system_spec("mk2", 2)))
    assert verdict.kind == "sync"
    assert not any("Under SyncPattern.Full" in line for line in verdict.advice)


def _sharded(input_bytes: int, device_iterations: int):
    work = Work(stages(2, forward_us=100, backward_us=200), micro_batch_size=4,
                input_bytes_per_sample=input_bytes)
    return simulate(work, RunConfig(device_iterations=device_iterations), system_spec("mk2", 2),
                    steps=2)


def test_syncs_longer_than_the_host_link_is_busy_are_no_host_link_verdict():
    # Two sharded IPUs wait in syncs 30% of the time; the busiest link is busy 26%,
    # the round trip 24%: stream copies and round trip together are more, but neither
    # is a figure the report shows, so they do not make the verdict.
    verdict = bottleneck(_sharded(256 * 1024, 1))
    assert verdict.sync_wait_share > verdict.host_link_occupancy > HOST_LINK_THRESHOLD
    assert verdict.host_io_share + verdict.host_call_share > verdict.sync_wait_share
    assert verdict.kind == "sync"


@pytest.mark.parametrize("timeline", [
    lambda: _sharded(256 * 1024, 1), lambda: _sharded(4096, 1), lambda: _sharded(4096, 20),
    lambda: single_ipu(5, 64, synthetic=True), lambda: single_ipu(20, 256 * 1024, replicas=4),
    lambda: single_ipu(2000, 64, synthetic=True), lambda: pipeline_run(micro_batches=7),
    lambda: pipeline_run(micro_batches=64, synthetic_data=True)])
def test_the_verdict_is_the_change_that_gains_most_and_its_headline_quotes_it(timeline):
    verdict = bottleneck(timeline())
    speedups = [w["speedup"] for w in verdict.what_if]
    assert speedups == sorted(speedups, reverse=True)
    actionable = [w for w in verdict.what_if if w["actionable"]]
    proof = next(w for w in verdict.what_if if w["limit"] == verdict.kind)
    if proof["actionable"]:
        # The change a user can make that gains most (more accumulation yields to more
        # device iterations where it gains no more than what those gain).
        assert proof["speedup"] >= SIGNIFICANT_SPEEDUP
        assert all(w["speedup"] <= proof["speedup"] * SIGNIFICANT_SPEEDUP for w in actionable)
        assert f"{proof['speedup']:.2f}x" in verdict.headline
    else:  # a physical limit: nothing a user can set gains much
        assert all(w["speedup"] < SIGNIFICANT_SPEEDUP for w in actionable)
