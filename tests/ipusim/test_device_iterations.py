"""Device iterations and calls: the per-call host round trip is paid once per call."""
import pytest

from ipusim import Cost, CostModel, RunConfig, Simulation, Stage, Work, simulate, system_spec

US = 10**6  # picoseconds
FORWARD = Cost(flops=2e9, bytes=5e7, ops=12)
BACKWARD = Cost(flops=4e9, bytes=1e8, ops=24)


def one_ipu_work(**fields) -> Work:
    return Work((Stage("model", 0, FORWARD, BACKWARD, weight_bytes=10**7),), micro_batch_size=16,
                **fields)


def per_item_ps(work: Work, run: RunConfig) -> float:
    timeline = simulate(work, run, system_spec("mk2", 1))
    return timeline.duration_ps / timeline.items


@pytest.mark.parametrize("synthetic", [True, False])
@pytest.mark.parametrize("training", [True, False])
def test_time_per_item_falls_with_device_iterations(synthetic, training):
    work = one_ipu_work(input_bytes_per_sample=3072, output_bytes_per_sample=40)
    times = [per_item_ps(work, RunConfig(training=training, device_iterations=d,
                                         gradient_accumulation=2 if training else 1,
                                         synthetic_data=synthetic))
             for d in (1, 2, 4, 8, 16, 50)]
    assert all(later < earlier for earlier, later in zip(times, times[1:]))


@pytest.mark.parametrize("iterations", [1, 2, 5, 50])
@pytest.mark.parametrize("training,accumulation", [(True, 1), (True, 3), (False, 1)])
def test_a_call_is_its_overhead_plus_its_iterations(iterations, training, accumulation):
    spec, cost = system_spec("mk2", 1), CostModel()
    run = RunConfig(training=training, device_iterations=iterations,
                    gradient_accumulation=accumulation, synthetic_data=True)
    timeline = simulate(one_ipu_work(), run, spec, cost)
    stage = one_ipu_work().stages[0]
    per_iteration = accumulation * cost.compute_ps(FORWARD, spec.ipu)
    if training:
        # With accumulation, each micro-batch's backward also adds into the accumulators.
        backward = BACKWARD + run.optimizer.accumulate_cost(stage, run.accumulating)
        per_iteration += (accumulation * cost.compute_ps(backward, spec.ipu)
                          + cost.compute_ps(run.optimizer.update_cost(stage,
                                                             run.accumulating), spec.ipu))
    assert timeline.duration_ps == cost.host_call_ps + iterations * per_iteration


def test_calls_follow_one_another_on_the_same_clock():
    run = RunConfig(device_iterations=4, synthetic_data=True)
    sim = Simulation(one_ipu_work(), run, system_spec("mk2", 1))
    first = sim.step()
    assert sim.step() == first
    assert sim.now_ps == 2 * first  # the simulated clock, read off the facade
    events = sim.timeline.events
    calls = events[events["kind"] == "host_call"]
    assert calls["start_ps"].tolist() == [0, first]
    assert sim.timeline.steps == 2


def test_steps_multiply_the_call_time():
    work, run = one_ipu_work(), RunConfig(device_iterations=3, synthetic_data=True)
    one = simulate(work, run, system_spec("mk2", 1))
    assert simulate(work, run, system_spec("mk2", 1), steps=5).duration_ps == 5 * one.duration_ps


def test_items_count_every_sample_of_every_call():
    run = RunConfig(replicas=2, device_iterations=3, gradient_accumulation=4, synthetic_data=True)
    timeline = simulate(one_ipu_work(), run, system_spec("mk2", 2), steps=2)
    assert timeline.items == 2 * 2 * 3 * 4 * 16

