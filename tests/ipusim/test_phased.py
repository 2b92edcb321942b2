"""Serial phased execution: what each phase streams in and out of SRAM."""
import pytest

from ipusim import Cost, Execution, Offload, RunConfig, Stage, SystemSpec, Work, simulate

MB = 10**6


def phased_events(offload: Offload):
    stages = tuple(Stage(f"P{k}", ipu=0, forward=Cost(flops=1e8), backward=Cost(flops=2e8),
                         weight_bytes=MB, optimizer_bytes=2 * MB) for k in range(3))
    run = RunConfig(execution=Execution.PHASED, gradient_accumulation=2, synthetic_data=True,
                    offload=offload)
    return simulate(Work(stages), run, SystemSpec(num_ipus=1)).events


@pytest.mark.parametrize("offload", [Offload(), Offload(optimizer=True, weights=True)])
def test_each_phase_streams_its_state_once_each_way(offload):
    events = phased_events(offload)
    moved = events[events["kind"].isin(["stream_in", "stream_out"])]
    by = moved.groupby(["kind", "stage"], observed=True)["bytes"].sum()
    # forward: weights in; backward: weights and optimizer state in (the last
    # phase keeps its weights on chip), then both out after the update
    assert by["stream_in"].to_dict() == {0: 4 * MB, 1: 4 * MB, 2: 3 * MB}
    assert by["stream_out"].to_dict() == {0: 3 * MB, 1: 3 * MB, 2: 3 * MB}


def test_phases_on_one_ipu_stay_separate_stages():
    events = phased_events(Offload())
    assert sorted(events.loc[events["kind"] == "forward", "stage"].unique()) == [0, 1, 2]
