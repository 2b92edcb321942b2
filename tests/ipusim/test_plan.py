"""The engine plan: worked out once per simulation, and what the schedule runs."""
import numpy as np
import pytest

from ipusim import Cost, Execution, RunConfig, Simulation, Stage, Work, simulate, system_spec
from ipusim.plan.engine_plan import EnginePlan
from ipusim.plan.pipeline_stages import pipeline_depth, pipeline_stages


def three_stages_on_two_ipus() -> Work:
    """Stages a and b share IPU 0 (they merge), c is on IPU 1."""
    return Work(tuple(Stage(name, ipu, Cost(time_ps=1000), Cost(time_ps=2000), weight_bytes=10**6)
                      for name, ipu in (("a", 0), ("b", 0), ("c", 1))))


@pytest.mark.parametrize("forward_stages", [1, 2, 5])
@pytest.mark.parametrize("training", [True, False])
def test_the_pipeline_depth_is_the_number_of_pipeline_stages(forward_stages, training):
    stages = pipeline_stages(forward_stages, training)
    assert pipeline_depth(forward_stages, training) == len(stages)
    assert {ps.stage for ps in stages} == set(range(forward_stages))


def test_a_training_pipeline_plan_holds_its_merged_stages_depth_and_micro_batches():
    run = RunConfig(replicas=2, device_iterations=3, gradient_accumulation=4,
                    execution=Execution.PIPELINED, output_period=2)
    plan = EnginePlan.build(three_stages_on_two_ipus(), run, system_spec("mk2", 4))
    assert [stage.name for stage in plan.stages] == ["a+b", "c"]
    assert (plan.ipus_per_replica, plan.num_ipus, plan.forward_stages) == (2, 4, 2)
    assert plan.pipeline_depth == 3 and len(plan.prices) == 2
    assert (plan.pipeline_runs, plan.micro_batches_per_run) == (3, 4)
    assert plan.micro_batches_per_step == 12
    assert list(plan.returned_micro_batches) == [1, 3, 5, 7, 9, 11]
    assert [plan.replica_of(ipu) for ipu in range(4)] == [0, 0, 1, 1]


def test_replicas_and_their_ipus_are_numbered_both_ways_on_arrays_too():
    run = RunConfig(replicas=3, device_iterations=2)
    plan = EnginePlan.build(three_stages_on_two_ipus(), run, system_spec("mk2", 6))
    ipus = np.arange(plan.num_ipus)
    replicas = plan.replica_of(ipus)
    assert list(replicas) == [0, 0, 1, 1, 2, 2] and plan.replica_of(5) == 2
    assert list(plan.ipu_of(replicas, ipus % plan.ipus_per_replica)) == list(ipus)
    assert plan.ipu_of(2, 1) == 5


def test_a_calls_items_are_every_replicas_micro_batches_of_samples():
    work = Work(three_stages_on_two_ipus().stages, micro_batch_size=3)
    run = RunConfig(replicas=2, device_iterations=2, gradient_accumulation=5)
    timeline = simulate(work, run, system_spec("mk2", 4), steps=2)
    assert timeline.plan.items_per_call == 2 * (2 * 5) * 3
    assert timeline.items == 2 * timeline.plan.items_per_call


def test_an_inference_pipeline_runs_a_call_as_one_pipeline_run():
    run = RunConfig(training=False, device_iterations=6, execution=Execution.PIPELINED)
    plan = EnginePlan.build(three_stages_on_two_ipus(), run, system_spec("mk2", 2))
    assert plan.pipeline_depth == 2
    assert (plan.pipeline_runs, plan.micro_batches_per_run) == (1, 6)
    assert list(plan.returned_micro_batches) == [5]


def test_phased_and_sharded_plans_have_no_pipeline():
    work = three_stages_on_two_ipus()
    phased = EnginePlan.build(work, RunConfig(execution=Execution.PHASED), system_spec("mk2", 2))
    sharded = EnginePlan.build(work, RunConfig(), system_spec("mk2", 2))
    assert len(phased.stages) == 3 and len(sharded.stages) == 2  # phases never merge
    assert phased.pipeline_depth == sharded.pipeline_depth == 0


def test_a_simulation_merges_and_prices_its_stages_once_not_on_every_call(monkeypatch):
    merges, builds = [], []
    merged, build = Work.merged, EnginePlan.build.__func__
    monkeypatch.setattr(Work, "merged", lambda self, *a: merges.append(1) or merged(self, *a))
    monkeypatch.setattr(EnginePlan, "build",
                        classmethod(lambda cls, *a: builds.append(1) or build(cls, *a)))
    run = RunConfig(gradient_accumulation=3, execution=Execution.PIPELINED)
    simulation = Simulation(three_stages_on_two_ipus(), run, system_spec("mk2", 2),
                            replay_steps=False)
    assert (len(builds), len(merges)) == (1, 1)  # validating the run merges nothing more
    simulation.run_steps(3)
    assert (len(builds), len(merges)) == (1, 1)
    timeline = simulation.timeline
    assert timeline.plan is simulation.plan
    assert timeline.bubble_fraction() > 0
