"""Sync patterns: who waits for host I/O under Full, SinglePipeline and ReplicaAndLadder."""
from dataclasses import replace

import pytest

from ipusim import (
    Cost,
    CostModel,
    Execution,
    RunConfig,
    Stage,
    SyncPattern,
    Work,
    simulate,
    system_spec,
)
from ipusim.engine.sync_groups import gs1_group, gs2_group

US = 10**6  # picoseconds


@pytest.mark.parametrize("pattern,groups", [
    (SyncPattern.FULL, [(0, 1, 2, 3)] * 4),
    (SyncPattern.SINGLE_PIPELINE, [(0,), (1,), (2,), (3,)]),
    (SyncPattern.REPLICA_AND_LADDER, [(0, 2), (1, 3), (0, 2), (1, 3)]),
])
def test_gs1_groups_follow_the_pattern(pattern, groups):
    assert [gs1_group(pattern, ipu, 4) for ipu in range(4)] == groups
    assert gs2_group(4) == (0, 1, 2, 3)


def test_sync_pattern_names_are_poparts():
    assert [p.value for p in SyncPattern] == ["Full", "SinglePipeline", "ReplicaAndLadder"]


FORWARD_PS = (50 * US, 50 * US, 70 * US, 50 * US)
SAMPLE_BYTES = 10**5


def four_stage_work(**fields) -> Work:
    return Work(tuple(Stage(f"s{k}", k, Cost(time_ps=t), Cost(time_ps=t), activation_bytes=4096,
                            **fields)
                      for k, t in enumerate(FORWARD_PS)),
                input_bytes_per_sample=SAMPLE_BYTES, output_bytes_per_sample=SAMPLE_BYTES)


def inference(pattern: SyncPattern, micro_batches: int = 6) -> RunConfig:
    return RunConfig(training=False, device_iterations=micro_batches,
                     execution=Execution.PIPELINED, sync_pattern=pattern, output_period=1)


def expected_inference_ps(pattern: SyncPattern, micro_batches: int, spec, cost: CostModel) -> int:
    """The 4-stage pipeline above, priced cycle by cycle.

    Each cycle: stream in (IPU 0), compute, stream out (IPU 3), GS2 exchange.
    Full makes every IPU wait for both stream copies; SinglePipeline only
    IPU 0 and IPU 3; ReplicaAndLadder pairs IPU 0 with IPU 2 for the input and
    IPU 1 with IPU 3 for the output.
    """
    host_in = cost.host_sync_ps + cost.host_transfer_ps(SAMPLE_BYTES, spec)
    host_out = cost.host_sync_ps + cost.host_transfer_ps(SAMPLE_BYTES, spec, to_device=False)
    copy = cost.ipu_copy_ps(4096, spec.ipu)
    total = cost.host_call_ps
    for pipeline_cycle in range(micro_batches + 3):
        f = [t if 0 <= pipeline_cycle - k < micro_batches else 0 for k, t in enumerate(FORWARD_PS)]
        i = host_in if pipeline_cycle < micro_batches else 0
        o = host_out if 0 <= pipeline_cycle - 3 < micro_batches else 0
        if pattern is SyncPattern.FULL:
            compute = i + max(f) + o
        elif pattern is SyncPattern.SINGLE_PIPELINE:
            compute = max(i + f[0], f[1], f[2], f[3] + o)
        else:
            compute = max(i + max(f[0], f[2]), max(f[1], f[3]) + o)
        sends = any(f[:3])
        total += compute + cost.ipu_sync_ps(spec.num_ipus) + (copy if sends else 0)
    return total


@pytest.mark.parametrize("pattern", list(SyncPattern))
def test_pipelined_inference_time_under_each_pattern_is_exact(pattern):
    spec, cost = system_spec("mk2", 4), CostModel()
    sim = simulate(four_stage_work(), inference(pattern), spec, cost_model=cost)
    assert sim.duration_ps == expected_inference_ps(pattern, 6, spec, cost)


def test_replica_and_ladder_lies_strictly_between_the_others_here():
    spec = system_spec("mk2", 4)
    durations = {p: simulate(four_stage_work(), inference(p), spec).duration_ps
                 for p in SyncPattern}
    assert (durations[SyncPattern.SINGLE_PIPELINE] < durations[SyncPattern.REPLICA_AND_LADDER]
            < durations[SyncPattern.FULL])


def test_full_stalls_every_ipu_for_a_host_transfer():
    events = simulate(four_stage_work(), inference(SyncPattern.FULL), system_spec("mk2", 4)).events
    transfer = events[events["kind"] == "host_to_device"].iloc[1]
    during = events[(events["start_ps"] < transfer.end_ps) & (events["end_ps"] > transfer.start_ps)
                    & (events["ipu"] != transfer.ipu)]
    assert set(during["ipu"]) == {1, 2, 3}
    assert set(during["kind"]) == {"sync_wait"}


def test_single_pipeline_computes_while_ipu0_streams_in():
    events = simulate(four_stage_work(), inference(SyncPattern.SINGLE_PIPELINE),
                      system_spec("mk2", 4)).events
    transfer = events[(events["kind"] == "host_to_device")
                      & (events["pipeline_cycle"] == 2)].iloc[0]
    during = events[(events["start_ps"] < transfer.end_ps) & (events["end_ps"] > transfer.start_ps)
                    & (events["ipu"] != transfer.ipu)]
    assert set(during.loc[during["kind"] == "forward", "ipu"]) == {1, 2}


def test_full_is_strictly_slower_when_host_io_can_overlap_compute_in_training():
    run = RunConfig(gradient_accumulation=8, execution=Execution.PIPELINED, output_period=1)
    spec = system_spec("mk2", 4)
    work = four_stage_work()
    durations = {p: simulate(work, replace(run, sync_pattern=p), spec).duration_ps
                 for p in SyncPattern}
    assert durations[SyncPattern.SINGLE_PIPELINE] < durations[SyncPattern.FULL]
    assert (durations[SyncPattern.SINGLE_PIPELINE] <= durations[SyncPattern.REPLICA_AND_LADDER]
            <= durations[SyncPattern.FULL])


def test_patterns_agree_without_host_io():
    run = RunConfig(gradient_accumulation=8, execution=Execution.PIPELINED, synthetic_data=True)
    spec = system_spec("mk2", 4)
    durations = {simulate(four_stage_work(), replace(run, sync_pattern=p), spec).duration_ps
                 for p in SyncPattern}
    assert len(durations) == 1


def test_single_ipu_replicas_meet_the_host_on_their_own_under_single_pipeline():
    work = Work((Stage("s", 0, Cost(time_ps=100 * US)),), input_bytes_per_sample=SAMPLE_BYTES)
    spec = system_spec("mk2", 8, ipus_per_host_link=1)
    run = RunConfig(training=False, replicas=8, sync_pattern=SyncPattern.SINGLE_PIPELINE,
                    device_iterations=4)
    events = simulate(work, run, spec).events
    assert events[events["kind"] == "sync_wait"].groupby("ipu").size().to_dict() == dict.fromkeys(
        range(8), 4)
    # Every replica on its own link: all eight start each input at the same time.
    starts = events[events["kind"] == "host_to_device"].groupby("micro_batch")["start_ps"].nunique()
    assert (starts == 1).all()
