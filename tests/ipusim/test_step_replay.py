"""Replayed calls: the record of every call equals simulating it, for every kind of run."""
import pandas as pd
import pytest

from ipusim import (
    DEFAULT,
    Cost,
    Execution,
    Offload,
    RunConfig,
    Simulation,
    Stage,
    SyncPattern,
    Work,
    system_spec,
)

US = 10**6  # picoseconds


def work(stages: int = 2) -> Work:
    """Stages on IPUs 0, 1, ... with uneven compute, activations and weights."""
    return Work(tuple(Stage(f"s{k}", k, Cost(flops=(k + 2) * 1e9, bytes=1e6),
                            Cost(flops=(k + 3) * 1e9, bytes=2e6), activation_bytes=4096 * (k + 1),
                            weight_bytes=10**6 * (k + 1), optimizer_bytes=2 * 10**6)
                      for k in range(stages)),
                micro_batch_size=4, input_bytes_per_sample=10**5, output_bytes_per_sample=10**4)


RUNS = {
    "sharded": RunConfig(device_iterations=3, gradient_accumulation=2),
    "sharded, 4 replicas": RunConfig(replicas=4, device_iterations=2, gradient_accumulation=3),
    "inference, every output": RunConfig(training=False, device_iterations=4, output_period=1),
    "pipelined": RunConfig(execution=Execution.PIPELINED, device_iterations=2,
                           gradient_accumulation=4, recompute=True),
    "pipelined, 2 replicas, single pipeline": RunConfig(
        execution=Execution.PIPELINED, replicas=2, gradient_accumulation=4,
        sync_pattern=SyncPattern.SINGLE_PIPELINE),
    "pipelined, replica and ladder": RunConfig(
        execution=Execution.PIPELINED, replicas=2, gradient_accumulation=4,
        sync_pattern=SyncPattern.REPLICA_AND_LADDER),
    "phased": RunConfig(execution=Execution.PHASED, gradient_accumulation=2),
    "parallel phased, 2 replicas": RunConfig(execution=Execution.PARALLEL_PHASED, replicas=2),
    "overlapped I/O, 2 replicas": RunConfig(replicas=2, gradient_accumulation=4, io_tiles=64,
                                            overlap_inputs=True, overlap_outputs=True),
    "offloaded, sharded optimizer": RunConfig(
        replicas=2, gradient_accumulation=2,
        offload=Offload(weights=True, optimizer=True, sharded_optimizer=True)),
    "synthetic data": RunConfig(device_iterations=2, synthetic_data=True),
}


def events(simulation: Simulation, steps: int, idle_between_ps: int = 0) -> pd.DataFrame:
    """The record of ``steps`` calls, the IPUs idling ``idle_between_ps`` after each."""
    for _ in range(steps):
        simulation.step()
        if idle_between_ps:
            simulation.wait_until(simulation.system.now_ps + idle_between_ps)
    return simulation.timeline.events


@pytest.mark.parametrize("name", RUNS)
@pytest.mark.parametrize("idle_between_ps", [0, 7 * US + 3])
def test_replayed_calls_record_what_simulating_them_does(name, idle_between_ps):
    # 16 IPUs on 4 host links: the replicas of "4 replicas" share their links.
    spec = system_spec("mk2", 16)
    stages = 1 if RUNS[name].execution is Execution.SHARDED and RUNS[name].replicas > 2 else 2
    replayed = Simulation(work(stages), RUNS[name], spec)
    simulated = Simulation(work(stages), RUNS[name], spec, replay_steps=False)
    pd.testing.assert_frame_equal(events(replayed, 5, idle_between_ps),
                                  events(simulated, 5, idle_between_ps))
    assert replayed._replay.template is not None  # calls were replayed, not all simulated
    assert replayed.system.now_ps == simulated.system.now_ps
    assert [(link.h2d_free_at, link.d2h_free_at) for link in replayed.system.host_links] == \
        [(link.h2d_free_at, link.d2h_free_at) for link in simulated.system.host_links]


def test_a_replayed_call_is_the_first_shifted_in_time_with_its_own_step():
    simulation = Simulation(work(), RUNS["pipelined"], system_spec("mk2", 4))
    durations = [simulation.step() for _ in range(4)]
    assert len(set(durations)) == 1  # every call from idle takes as long
    frame = simulation.timeline.events
    by_step = [frame[frame["step"] == step].drop(columns="step").reset_index(drop=True)
               for step in range(4)]
    for step, later in enumerate(by_step[1:], start=1):
        shifted = by_step[0].copy()
        shifted[["start_ps", "end_ps"]] += step * durations[0]
        pd.testing.assert_frame_equal(later, shifted)


def test_a_call_that_does_not_start_idle_is_simulated():
    spec = system_spec("mk2", 4)
    simulation = Simulation(work(), RUNS["sharded"], spec)
    simulation.step()
    simulation.step()
    template = simulation._replay.template
    # A copy queued on the host link past the host call: the next call waits for it.
    link = simulation.system.host_links[0]
    past_call = DEFAULT.host_call_ps + 1000 * US
    link.h2d_free_at = simulation.system.now_ps + past_call
    reference = Simulation(work(), RUNS["sharded"], spec, replay_steps=False)
    reference.step()
    reference.step()
    reference.system.host_links[0].h2d_free_at = reference.system.now_ps + past_call
    assert simulation.step() == reference.step() > template.duration_ps
    pd.testing.assert_frame_equal(simulation.timeline.events, reference.timeline.events)
