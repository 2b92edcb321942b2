"""What limits a run, as an analysis: the scores behind the report's verdict."""
import dataclasses
from functools import partial

import pytest

from ipusim import Cost, RunConfig, Stage, Work, simulate, system_spec
from ipusim.analysis.bottleneck import BOTTLENECKS, BUBBLE_THRESHOLD, Bottleneck, Score
from ipusim.cost.cost_model import CALIBRATED_MK2

# The hand-written runs here are built to show one bottleneck; a short host round
# trip per call (instead of the calibrated one) keeps it from masking that one.
QUICK_CALLS = dataclasses.replace(CALIBRATED_MK2, engine_run_ps=250 * 10**6)  # a 0.3 ms host call
simulate = partial(simulate, cost_model=QUICK_CALLS)


US = 10**6


def single_ipu(compute_us: float, replicas: int = 1, input_bytes: int = 64):
    work = Work((Stage("model", 0, Cost(time_ps=int(compute_us * US)),
                       Cost(time_ps=int(2 * compute_us * US))),),
                micro_batch_size=16, input_bytes_per_sample=input_bytes)
    run = RunConfig(replicas=replicas, device_iterations=20, synthetic_data=input_bytes == 64)
    return simulate(work, run, system_spec("mk2", replicas), steps=2)


def test_the_figures_behind_the_bottleneck_are_the_timelines_headline_figures():
    timeline = single_ipu(2000)
    found = timeline.bottleneck()
    figures = timeline.figures()
    assert isinstance(found, Bottleneck) and found.kind == "compute"
    assert found.device_items_per_s == figures["throughput(items/s)"]
    assert found.host_call_share == figures["host_round_trip_share"]
    assert found.utilisation == figures["utilisation"] > 0.95
    assert not any(score.over for score in found.scores.values())
    with pytest.raises(dataclasses.FrozenInstanceError):
        found.kind = "sync"


@pytest.mark.parametrize("timeline", [lambda: single_ipu(5),
                                      lambda: single_ipu(20, 4, 256 * 1024)])
def test_the_bottleneck_is_the_largest_score_over_its_limit(timeline):
    found = timeline().bottleneck()
    over = {name: score for name, score in found.scores.items() if score.over}
    assert found.kind in BOTTLENECKS and over
    assert found.kind == max(over, key=lambda name: over[name].score)


def test_a_loader_slower_than_the_device_beats_every_score():
    timeline = single_ipu(20, 4, 256 * 1024)
    device = timeline.throughput()
    assert timeline.bottleneck(loader_items_per_s=device / 2).kind == "data_loader"
    assert timeline.bottleneck(loader_items_per_s=device * 2).kind == "host_link"
    with pytest.raises(ValueError, match="loader_items_per_s must be a positive number"):
        timeline.bottleneck(loader_items_per_s=0)


def test_a_score_is_over_from_its_limit_on():
    assert Score(BUBBLE_THRESHOLD, BUBBLE_THRESHOLD).over
    assert not Score(BUBBLE_THRESHOLD - 1e-9, BUBBLE_THRESHOLD).over


def test_the_stage_balance_compares_the_slowest_and_fastest_stage_per_micro_batch():
    work = Work((Stage("a", 0, Cost(time_ps=100 * US), Cost(time_ps=200 * US)),
                 Stage("b", 1, Cost(time_ps=300 * US), Cost(time_ps=600 * US))))
    timeline = simulate(work, RunConfig(device_iterations=2), system_spec("mk2", 2))
    balance = timeline.stage_balance()
    times = timeline.stage_times_us()
    assert (balance.slowest, balance.fastest) == (1, 0)
    assert balance.slowest_us == times[1]
    assert balance.ratio == pytest.approx(times[1] / times[0]) and not balance.balanced
    assert single_ipu(20).stage_balance() is None
