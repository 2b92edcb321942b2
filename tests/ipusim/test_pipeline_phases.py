"""The pipeline's phases, cycles and latency path, read through the Timeline off the plan."""
import pytest

from ipusim import Cost, Execution, RunConfig, Stage, Work, simulate, system_spec


def pipelined(forward_stages: int, training: bool, micro_batches: int, iterations: int = 1,
              replicas: int = 1, steps: int = 1):
    work = Work(tuple(Stage(f"s{k}", k, Cost(time_ps=1000 * (k + 1)), Cost(time_ps=2000))
                      for k in range(forward_stages)))
    if training:
        run = RunConfig(gradient_accumulation=micro_batches, device_iterations=iterations,
                        replicas=replicas, execution=Execution.PIPELINED, synthetic_data=True)
    else:
        run = RunConfig(training=False, device_iterations=micro_batches, replicas=replicas,
                        execution=Execution.PIPELINED, synthetic_data=True)
    return simulate(work, run, system_spec("mk2", replicas * forward_stages), steps=steps)


@pytest.mark.parametrize("forward_stages,training,micro_batches,iterations", [
    (3, True, 6, 2), (2, True, 3, 1), (3, False, 4, 1), (4, False, 4, 1)])
def test_every_run_has_n_plus_p_minus_one_cycles_in_three_contiguous_phases(
        forward_stages, training, micro_batches, iterations):
    timeline = pipelined(forward_stages, training, micro_batches, iterations, replicas=2,
                         steps=2)
    p, n = timeline.plan.pipeline_depth, timeline.plan.micro_batches_per_run
    assert n == micro_batches
    cycles = timeline.pipeline_cycle_times()
    runs = cycles.groupby(["step", "run"])
    assert len(runs) == 2 * timeline.plan.pipeline_runs
    assert (runs["pipeline_cycle"].apply(list) == [list(range(n + p - 1))] * len(runs)).all()
    phases = timeline.pipeline_phases()
    assert len(phases) == 3 * len(runs)
    for _, run in phases.groupby(["step", "run"]):
        assert list(zip(run["phase"], run["first_pipeline_cycle"], run["last_pipeline_cycle"])) == [
            ("ramp-up", 0, p - 2), ("main", p - 1, n - 1), ("ramp-down", n, n + p - 2)]
        assert list(run["end_ps"][:-1]) == list(run["start_ps"][1:])  # contiguous
        assert (run["start_ps"] < run["end_ps"]).all()


def test_the_latency_path_is_micro_batch_p_minus_one_of_replica_0():
    timeline = pipelined(3, True, 6, replicas=2)
    path = timeline.latency_path()
    assert (path.replica, path.step, path.micro_batch) == (0, 0, timeline.plan.pipeline_depth - 1)
    events = timeline.events
    mine = events[(events["micro_batch"] == path.micro_batch) & (events["replica"] == 0)]
    assert path.latency_ps == mine["end_ps"].max() - mine["start_ps"].min() > 0


def test_a_run_that_is_not_pipelined_has_no_phases_and_micro_batch_0_as_its_path():
    work = Work((Stage("s0", 0, Cost(time_ps=1000), Cost(time_ps=2000)),))
    timeline = simulate(work, RunConfig(device_iterations=3), system_spec("mk2", 1))
    assert timeline.plan.pipeline_depth == 0 and timeline.pipeline_phases().empty
    assert timeline.latency_path().micro_batch == 0
