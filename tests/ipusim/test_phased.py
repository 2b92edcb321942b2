"""Phased execution: what each phase streams in and out of SRAM, and how
parallel phased execution hides the streaming behind the other group's compute."""
import pandas as pd
import pytest

from ipusim import Cost, Execution, Offload, RunConfig, Stage, SystemSpec, Work, simulate
from ipusim.engine.sync_groups import SyncPattern

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


# Parallel phased execution: ping-pong between two groups of IPUs ------------
def alternating(phases=4, ipus=2, stream_mb=(20, 20, 20, 20)):
    """``phases`` groups of ``ipus // 2`` stages (each stage a phase of its
    own in ipusim), the groups alternating between the even and the odd IPUs,
    with tutorial-sized inputs."""
    per_phase = ipus // 2
    stages = tuple(Stage(f"P{k}.{i}", ipu=2 * i + k % 2, forward=Cost(flops=2e10),
                         backward=Cost(flops=4e10), weight_bytes=stream_mb[k] * MB,
                         optimizer_bytes=2 * stream_mb[k] * MB, activation_bytes=MB)
                   for k in range(phases) for i in range(per_phase))
    return Work(stages, micro_batch_size=8, input_bytes_per_sample=30000,
                output_bytes_per_sample=40)


def run_of(execution, training=True, pattern=SyncPattern.SINGLE_PIPELINE, synthetic=False):
    return RunConfig(execution=execution, training=training, sync_pattern=pattern,
                     gradient_accumulation=4 if training else 1,
                     device_iterations=1 if training else 4, synthetic_data=synthetic)


def timeline_of(work, run):
    return simulate(work, run, SystemSpec(num_ipus=work.ipus_per_replica))


@pytest.mark.parametrize("training", [True, False])
def test_parallel_phases_stream_and_compute_exactly_what_serial_phases_do(training):
    work = alternating()
    moved = {}
    for execution in (Execution.PHASED, Execution.PARALLEL_PHASED):
        events = timeline_of(work, run_of(execution, training)).events
        moved[execution] = events.groupby(["kind", "stage"], observed=True)["bytes"].sum()
        counts = events.groupby(["kind", "stage"], observed=True).size()
        moved[execution, "count"] = counts[counts.index.get_level_values(0).isin(
            ["forward", "backward", "weight_update"])]
    pd.testing.assert_series_equal(moved[Execution.PHASED], moved[Execution.PARALLEL_PHASED])
    pd.testing.assert_series_equal(moved[Execution.PHASED, "count"],
                                   moved[Execution.PARALLEL_PHASED, "count"])


def test_an_ipu_streams_in_only_what_it_does_not_hold_yet():
    """Stages on IPUs 0, 1, 0, 1, each with 20 MB of weights and 40 MB of
    optimizer state, two iterations. The first backward pass finds phases 2
    and 3 still on chip (only their optimizer state comes in); the second
    forward pass finds phases 0 and 1 there and streams nothing for them."""
    run = RunConfig(execution=Execution.PARALLEL_PHASED, gradient_accumulation=2,
                    device_iterations=2, synthetic_data=True)
    events = timeline_of(alternating(), run).events
    moved = events.groupby(["kind", "stage"], observed=True)["bytes"].sum() / MB
    # forward 1 + backward 1 + forward 2 + backward 2
    assert moved["stream_in"].to_dict() == {0: 20 + 60 + 0 + 60, 1: 20 + 60 + 0 + 60,
                                            2: 20 + 40 + 20 + 40, 3: 20 + 40 + 20 + 40}
    assert moved["stream_out"].to_dict() == {k: 2 * 60 for k in range(4)}


@pytest.mark.parametrize("training", [True, False])
def test_the_other_group_streams_the_next_phase_in_while_this_one_computes(training):
    events = timeline_of(alternating(), run_of(Execution.PARALLEL_PHASED, training)).events
    stream_in = events[events["kind"] == "stream_in"].groupby("stage")["start_ps"].min()
    forward = events[events["kind"] == "forward"].groupby("stage")["end_ps"].min()
    for k in (1, 2, 3):  # phase k loads while phase k - 1 computes, on the other IPUs
        assert stream_in[k] < forward[k - 1]
    serial = timeline_of(alternating(), run_of(Execution.PHASED, training)).events
    stream_in = serial[serial["kind"] == "stream_in"].groupby("stage")["start_ps"].min()
    forward = serial[serial["kind"] == "forward"].groupby("stage")["end_ps"].min()
    assert all(stream_in[k] >= forward[k - 1] for k in (1, 2, 3))


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("synthetic", [True, False])
def test_ping_pong_saves_at_most_the_streaming_and_updating_it_hides(training, synthetic):
    work = alternating()
    serial = timeline_of(work, run_of(Execution.PHASED, training, synthetic=synthetic))
    parallel = timeline_of(work, run_of(Execution.PARALLEL_PHASED, training, synthetic=synthetic))
    # What can hide behind the other group's compute: streaming and updating.
    hideable = serial.events[serial.events["kind"].isin(["stream_in", "stream_out",
                                                          "weight_update"])]
    saved = serial.events["end_ps"].max() - parallel.events["end_ps"].max()
    assert 0 < saved <= (hideable["end_ps"] - hideable["start_ps"]).sum()


def test_phases_on_one_ipu_have_nothing_to_overlap():
    stages = tuple(Stage(f"P{k}", ipu=0, forward=Cost(flops=1e8), backward=Cost(flops=2e8),
                         weight_bytes=MB, optimizer_bytes=2 * MB) for k in range(3))
    ends = [timeline_of(Work(stages), run_of(execution)).events["end_ps"].max()
            for execution in (Execution.PHASED, Execution.PARALLEL_PHASED)]
    assert ends[0] == ends[1]


@pytest.mark.parametrize("ipus", [2, 4])
def test_replica_and_ladder_lets_the_halves_alternate_and_full_does_not(ipus):
    """The first phase's long stream-in on the odd IPUs: under Full each host
    transfer of the even IPUs waits for it; GS1 per half (ReplicaAndLadder)
    or per IPU (SinglePipeline) lets the even IPUs go on."""
    work = alternating(ipus=ipus, stream_mb=(1, 400, 1, 1))
    ends, waits = {}, {}
    for pattern in SyncPattern:
        events = timeline_of(work, run_of(Execution.PARALLEL_PHASED, False, pattern)).events
        ends[pattern] = events["end_ps"].max()
        even = events[(events["ipu"] % 2 == 0) & (events["kind"] == "sync_wait")]
        waits[pattern] = (even["end_ps"] - even["start_ps"]).sum()
    assert ends[SyncPattern.FULL] > ends[SyncPattern.REPLICA_AND_LADDER]
    assert ends[SyncPattern.REPLICA_AND_LADDER] == ends[SyncPattern.SINGLE_PIPELINE]
    assert waits[SyncPattern.FULL] > waits[SyncPattern.REPLICA_AND_LADDER]
