"""What-if analysis: each change simulated again, its figures exactly a run made that way."""
from dataclasses import replace

import pytest

from ipusim import (
    Cost,
    Execution,
    RunConfig,
    Simulation,
    Stage,
    Work,
    simulate,
    system_spec,
)
from ipusim.engine.sync_groups import SyncPattern
from ipusim.explore.diagnosis import SIGNIFICANT_SPEEDUP
from ipusim.explore.what_if import what_ifs
from ipusim.report.verdict import bottleneck


def pipeline(slow: int = 2, ipus: int = 4, **run) -> tuple[Work, RunConfig]:
    """Four model stages of 0.2 ms forward (stage ``slow`` five times that): compute
    outweighs the call's host round trip."""
    stages = tuple(
        Stage(f"S{i}", ipu=i, forward=Cost(time_ps=(10 if i == slow else 2) * 10**8),
              backward=Cost(time_ps=(20 if i == slow else 4) * 10**8),
              activation_bytes=100_000, weight_bytes=10**6, optimizer_bytes=2 * 10**6)
        for i in range(ipus))
    work = Work(stages, micro_batch_size=4, input_bytes_per_sample=65536)
    return work, RunConfig(gradient_accumulation=16, execution=Execution.PIPELINED, **run)


BALANCED = "balanced stages, every IPU's whole step at the mean"


def by_change(found):
    return {w.change: w for w in found.tried}


def test_four_times_the_accumulation_is_exactly_a_run_with_it():
    work, run = pipeline()
    system = system_spec("mk2", num_ipus=4)
    found = what_ifs(simulate(work, run, system, steps=2))
    by_hand = simulate(work, replace(run, gradient_accumulation=64), system, steps=3)
    what_if = by_change(found)["four times the gradient accumulation"]
    assert what_if.items_per_s == pytest.approx(by_hand.throughput(), rel=1e-12)
    assert what_if.speedup == pytest.approx(by_hand.throughput() / found.items_per_s, rel=1e-12)
    assert (what_if.setting, what_if.value) == ("gradient_accumulation", 64)


def test_each_change_of_a_setting_carries_the_value_a_run_made_that_way_sets():
    work, run = pipeline(ipus=2)
    system = system_spec("mk2", num_ipus=4)
    timeline = simulate(work, run, system, steps=2)
    found = by_change(what_ifs(timeline))
    assert {w.setting: w.value for w in found.values() if w.value is not None} == {
        "gradient_accumulation": 64, "device_iterations": 4, "replicas": 2,
        "sync_pattern": SyncPattern.SINGLE_PIPELINE}
    for what_if in found.values():
        if what_if.value is not None:  # the value is the run: simulating it gives the figure
            by_hand = simulate(work, replace(run, **{what_if.setting: what_if.value}),
                               system, steps=3)
            assert what_if.items_per_s == pytest.approx(by_hand.throughput(), rel=1e-12)
    # The verdict's table and profile.json read the same value, in the caller's words.
    entries = {e["change"]: e for e in bottleneck(timeline).what_if}
    assert entries["twice the replicas"]["value"] == 2
    assert entries["four times the device iterations"]["value"] == 4
    assert entries["the SinglePipeline sync pattern"]["value"] is None
    assert entries["the SinglePipeline sync pattern"]["option"] == \
        "RunConfig.sync_pattern=SyncPattern.SINGLE_PIPELINE"


def test_balancing_a_slow_stage_is_a_run_whose_stages_all_take_the_mean():
    work, run = pipeline()
    system = system_spec("mk2", num_ipus=4)
    found = what_ifs(simulate(work, run, system))
    mean_f, mean_b = (10 + 3 * 2) * 10**8 // 4, (20 + 3 * 4) * 10**8 // 4
    balanced = replace(work, stages=tuple(
        replace(s, forward=Cost(time_ps=mean_f), backward=Cost(time_ps=mean_b))
        for s in work.stages))
    by_hand = simulate(balanced, run, system)
    what_if = by_change(found)[BALANCED]
    assert what_if.speedup > 1.2  # the slow stage sets the pace of every pipeline cycle
    # Balanced by each IPU's whole step (its weight update and copies too), not pass by
    # pass: within a percent of the passes at their means, as the stages' copies differ.
    assert what_if.items_per_s == pytest.approx(by_hand.throughput(), rel=1e-2)


def recomputed_pipeline(recompute: bool) -> tuple[Work, RunConfig]:
    """Two model stages of equal forward and backward: balanced, unless recomputation
    adds a forward to the first (a pipeline's last stage recomputes nothing)."""
    stages = tuple(Stage(f"S{i}", ipu=i, forward=Cost(time_ps=4 * 10**8),
                         backward=Cost(time_ps=8 * 10**8), activation_bytes=100_000,
                         weight_bytes=10**6) for i in range(2))
    return (Work(stages, micro_batch_size=4, input_bytes_per_sample=1024),
            RunConfig(gradient_accumulation=16, execution=Execution.PIPELINED,
                      recompute=recompute))


@pytest.mark.parametrize("recompute", [False, True])
def test_an_imbalance_made_by_recomputation_is_one_balancing_lifts(recompute):
    work, run = recomputed_pipeline(recompute)
    timeline = simulate(work, run, system_spec("mk2", num_ipus=2))
    compute = timeline.category_times()["compute"]
    what_if = by_change(what_ifs(timeline))[BALANCED]
    if recompute:  # IPU 0 runs forward, recompute and backward; IPU 1 no recompute
        assert compute[0] > compute[1] * 1.2
        assert what_if.speedup > SIGNIFICANT_SPEEDUP
        assert bottleneck(timeline).kind == "imbalance"
    else:  # the same work on each IPU: nothing to gain
        assert compute[0] == pytest.approx(compute[1], rel=0.05)
        assert what_if.speedup < SIGNIFICANT_SPEEDUP


def test_changes_come_fastest_first_and_the_recorded_run_is_the_baseline():
    work, run = pipeline()
    timeline = simulate(work, run, system_spec("mk2", num_ipus=4))
    found = what_ifs(timeline)
    speedups = [w.speedup for w in found.tried]
    assert speedups == sorted(speedups, reverse=True)
    assert found.items_per_s == pytest.approx(timeline.throughput())
    assert found.step_time_ms == pytest.approx(timeline.duration_ps / 1e9)
    assert by_change(found)["compute twice as fast"].speedup > 1


def test_a_slow_loader_is_the_recorded_rate_and_only_a_faster_loader_lifts_it():
    work, run = pipeline()
    timeline = simulate(work, run, system_spec("mk2", num_ipus=4))
    loader = timeline.throughput() / 10
    found = what_ifs(timeline, loader_items_per_s=loader)
    assert found.items_per_s == pytest.approx(loader)
    best = found.best()
    assert best.limit == "data_loader"
    assert best.speedup == pytest.approx(10)
    assert all(w.speedup <= 1 + 1e-12 for w in found.tried if w is not best)


def test_changes_the_run_cannot_make_are_left_out_with_the_reason():
    work, run = pipeline()
    inference = replace(run, training=False, gradient_accumulation=1, device_iterations=8)
    found = what_ifs(simulate(work, inference, system_spec("mk2", num_ipus=4)))
    reasons = dict(found.left_out)
    assert reasons["four times the gradient accumulation"] == \
        "an inference model accumulates no gradients"
    assert reasons["twice the replicas"] == "twice the replicas need 8 IPUs; the system has 4"
    assert reasons["an infinitely fast data loader"] == "the data loader's rate was not measured"
    assert reasons["the optimizer state off chip"] == "the model keeps no optimizer state"
    one = Work((work.stages[0],), micro_batch_size=4)
    found = what_ifs(simulate(one, RunConfig(), system_spec("mk2", num_ipus=2)))
    assert dict(found.left_out)[BALANCED] == \
        "one model stage: nothing to balance"
    assert by_change(found)["twice the replicas"].speedup > 1.5


def test_a_change_that_would_not_fit_is_left_out():
    work, run = pipeline()
    heavy = replace(work, stages=tuple(replace(s, optimizer_bytes=900 * 2**20)
                                       for s in work.stages))
    offloaded = replace(run, offload=replace(run.offload, optimizer=True))
    found = what_ifs(simulate(heavy, offloaded, system_spec("mk2", num_ipus=4)))
    reason = dict(found.left_out)["the optimizer state on chip"]
    assert reason.startswith("does not fit: IPU ") and " MB of " in reason


def test_the_diagnosis_names_the_slow_stage_not_the_bubble_or_the_syncs():
    from ipusim.explore.diagnosis import diagnose
    work, run = pipeline()
    diagnosis = diagnose(simulate(work, run, system_spec("mk2", num_ipus=4)))
    assert diagnosis.kind == "imbalance"
    assert diagnosis.proof.change == BALANCED
    assert diagnosis.proof is diagnosis.what_ifs.tried[0]


def test_the_diagnosis_of_a_slow_loader_is_the_loader():
    from ipusim.explore.diagnosis import diagnose
    work, run = pipeline()
    timeline = simulate(work, run, system_spec("mk2", num_ipus=4))
    assert diagnose(timeline, timeline.throughput() / 3).kind == "data_loader"


def test_a_run_no_setting_speeds_up_is_limited_by_its_compute():
    from ipusim.explore.diagnosis import SIGNIFICANT_SPEEDUP, diagnose
    big = Work((Stage("model", 0, Cost(time_ps=10**11), Cost(time_ps=2 * 10**11)),),
               micro_batch_size=4)
    diagnosis = diagnose(simulate(big, RunConfig(device_iterations=4), system_spec("mk2", 1)))
    assert diagnosis.kind == "compute"
    assert all(w.speedup < SIGNIFICANT_SPEEDUP for w in diagnosis.what_ifs.tried
               if w.actionable)
    assert diagnosis.proof.speedup > 1.9  # compute twice as fast nearly halves the step


def test_balancing_averages_over_the_ipus_not_the_model_stages():
    # BERT's head shares the embedding's IPU: balancing must not give that IPU two
    # model stages' worth of the mean (which made the run slower).
    work, run = pipeline()
    head = replace(work.stages[0], name="head", ipu=0,
                   forward=Cost(time_ps=9 * 10**8), backward=Cost(time_ps=18 * 10**8))
    shared = replace(work, stages=work.stages + (head,))
    found = what_ifs(simulate(shared, run, system_spec("mk2", num_ipus=4)))
    balanced = by_change(found)[BALANCED]
    assert balanced.speedup > 1.3  # per model stage, IPU 0 would still hold 2 x the mean


@pytest.mark.parametrize("replicas, fold, execution", [
    (1, None, Execution.PIPELINED), (4, True, Execution.PIPELINED),
    (4, False, Execution.PIPELINED), (2, True, Execution.SHARDED)])
def test_the_throughput_a_what_if_reads_is_the_timelines(replicas, fold, execution):
    """The what-ifs read a simulation's throughput off its record, never building (or
    expanding a folded record to every replica) the event table: it is the table's."""
    work, run = pipeline(replicas=replicas)
    run = replace(run, execution=execution)
    simulation = Simulation(work, run, system_spec("mk2", num_ipus=4 * replicas),
                            fold_replicas=fold)
    for _ in range(3):
        simulation.step()
    assert simulation.folded is bool(fold and replicas > 1)
    assert simulation.throughput() == simulation.timeline.throughput() > 0


def test_a_run_rewritten_with_its_own_pass_times_is_the_same_run():
    """The what-ifs rewrite each stage's passes as fixed times; rewritten unchanged,
    with measured kernels and the accumulators' adds in every backward, the run
    simulates exactly as before (the adds counted once, at their own price)."""
    from ipusim import Kernel, KernelKind
    from ipusim.cost.cost_model import CALIBRATED_MK2
    from ipusim.cost.optimizer import adam
    from ipusim.explore.what_if import Setup, _fixed_compute
    from ipusim.plan.engine_plan import EnginePlan

    layer = Cost(kernels=((Kernel(KernelKind.MATMUL, 2, m=512, k=1024, n=1024), 1),))
    stages = tuple(Stage(f"S{i}", ipu=i, forward=layer, backward=layer + layer,
                         activation_bytes=1 << 20, weight_bytes=2 << 20, weight_tensors=2)
                   for i in range(2))
    work = Work(stages, micro_batch_size=4)
    run = RunConfig(gradient_accumulation=16, execution=Execution.PIPELINED, synthetic_data=True,
                    optimizer=adam(weight_width=2, decoupled=True))
    system = system_spec("mk2", num_ipus=2)
    plan = EnginePlan.build(work, run, system, CALIBRATED_MK2)
    assert all(p.accumulate_ps > 0 for p in plan.prices)
    rewritten = _fixed_compute(Setup(plan.work, run, system, CALIBRATED_MK2), plan,
                               lambda times: times)
    again = EnginePlan.build(rewritten, run, system, CALIBRATED_MK2)
    assert [p.backward_ps for p in again.prices] == [p.backward_ps for p in plan.prices]
    assert [p.accumulate_ps for p in again.prices] == [p.accumulate_ps for p in plan.prices]
    assert simulate(rewritten, run, system, CALIBRATED_MK2).duration_ps == \
        simulate(work, run, system, CALIBRATED_MK2).duration_ps
