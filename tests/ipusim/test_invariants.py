"""Timing invariants over random configurations (hypothesis).

Whatever the stages, their IPUs, the batching, the execution, the sync
pattern or the data source, a timeline must be causal (nothing starts before
what it depends on ends), conservative (every micro-batch computed exactly
once per pass) and deterministic.
"""
from collections import defaultdict
from dataclasses import replace

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from ipusim import Cost, Execution, RunConfig, Stage, SyncPattern, Work, simulate, system_spec
from ipusim.cost.cost_model import DEFAULT
from ipusim.plan.run_config import Offload

PASSES = ("forward", "backward", "recompute")
COMPUTE = PASSES + ("weight_update", "stream_in", "stream_out")


@st.composite
def costs(draw) -> Cost:
    return Cost(flops=draw(st.sampled_from([0.0, 1e6, 3e8])),
                bytes=draw(st.sampled_from([0.0, 1e6])),
                ops=draw(st.integers(0, 3)), time_ps=draw(st.integers(0, 4000)))


@st.composite
def scenarios(draw):
    """A random (work, run, system, steps) that the configuration checks accept."""
    count = draw(st.integers(1, 4))
    ipus = draw(st.lists(st.integers(0, 3), min_size=count, max_size=count))
    stages = tuple(
        Stage(f"s{k}", ipu, forward=draw(costs()), backward=draw(costs()),
              activation_bytes=draw(st.sampled_from([0, 4096, 10**6])),
              stash_bytes=1000, weight_bytes=draw(st.sampled_from([0, 10**5, 10**7])),
              optimizer_bytes=draw(st.sampled_from([0, 10**5])))
        for k, ipu in enumerate(ipus))
    work = Work(stages, micro_batch_size=draw(st.integers(1, 4)),
                input_bytes_per_sample=draw(st.sampled_from([0, 3072, 10**5])),
                output_bytes_per_sample=draw(st.sampled_from([0, 40])))
    forward_stages = len(work.merged().stages)
    training = draw(st.booleans())
    execution = draw(st.sampled_from(list(Execution)))
    pipelined = execution is Execution.PIPELINED
    if training:
        accumulation = (2 * forward_stages - 1 if pipelined else 1) + draw(st.integers(0, 2))
        iterations = draw(st.integers(1, 2))
    else:
        accumulation = 1
        iterations = (forward_stages if pipelined else 1) + draw(st.integers(0, 2))
    run = RunConfig(
        training=training, replicas=draw(st.integers(1, 3)), device_iterations=iterations,
        gradient_accumulation=accumulation, execution=execution,
        sync_pattern=draw(st.sampled_from(list(SyncPattern))),
        synthetic_data=draw(st.booleans()), recompute=draw(st.booleans()),
        offload=Offload(weights=draw(st.booleans()), optimizer=draw(st.booleans())),
        output_period=draw(st.integers(0, 2)))
    system = system_spec("mk2", run.replicas * work.ipus_per_replica + draw(st.integers(0, 2)))
    return work, run, system, draw(st.integers(1, 2))


def spans(events: pd.DataFrame, kinds) -> dict:
    """(kind, replica, step, micro_batch, stage) -> [(start, end), ...] of the chosen kinds."""
    table = defaultdict(list)
    chosen = events[events["kind"].isin(kinds)]
    for row in chosen.itertuples(index=False):
        table[(row.kind, row.replica, row.step, row.micro_batch, row.stage)].append(
            (row.start_ps, row.end_ps))
    return table


@settings(max_examples=50, deadline=None)
@given(scenarios())
def test_timelines_are_causal(scenario):
    work, run, system, steps = scenario
    events = simulate(work, run, system, steps=steps).events
    merged = run.scheduled(work).stages
    last = len(merged) - 1
    micro_batches = run.device_iterations * run.gradient_accumulation

    # An IPU does one thing at a time: its events never overlap.
    for ipu, own in events.groupby("ipu"):
        ordered = own.sort_values(["start_ps", "end_ps"])
        assert (ordered["start_ps"].to_numpy()[1:] >= ordered["end_ps"].to_numpy()[:-1]).all(), ipu

    # A machine's host link takes one stream copy at a time each way: the next starts
    # once the last has held it for its bytes at the shared hop's rate.
    link = events["ipu"] // system.ipus_per_host_link
    streaming = run.total_replicas * work.ipus_per_replica
    for kind in ("host_to_device", "device_to_host"):
        for _, copies in events[events["kind"] == kind].groupby(link):
            ordered = copies.sort_values("start_ps")
            held = [DEFAULT.host_link_held_ps(b, system, streaming, kind == "host_to_device")
                    for b in ordered["bytes"].to_numpy()[:-1]]
            assert (ordered["start_ps"].to_numpy()[1:]
                    >= ordered["start_ps"].to_numpy()[:-1] + held).all()

    done = {key: value[0] for key, value in spans(events, PASSES).items()}
    for replica in range(run.replicas):
        for step in range(steps):
            for mb in range(micro_batches):
                def span(kind, stage):
                    return done[(kind, replica, step, mb, stage)]
                for k in range(last):
                    assert span("forward", k + 1)[0] >= span("forward", k)[1]
                if not run.training:
                    continue
                for k in range(last + 1):
                    assert span("backward", k)[0] >= span("forward", k)[1]
                    if k < last:
                        assert span("backward", k)[0] >= span("backward", k + 1)[1]
                    recompute = done.get(("recompute", replica, step, mb, k))
                    if recompute:
                        assert recompute[0] >= span("forward", k)[1]
                        assert span("backward", k)[0] >= recompute[1]

    # Stream copies: inputs arrive before the first forward, outputs leave after the last.
    for row in events[events["kind"] == "host_to_device"].itertuples():
        assert row.end_ps <= done[("forward", row.replica, row.step, row.micro_batch, 0)][0]
    for row in events[events["kind"] == "device_to_host"].itertuples():
        assert row.start_ps >= done[("forward", row.replica, row.step, row.micro_batch, last)][1]

    # An IPU copy leaves after the compute that produced it.
    for row in events[events["kind"] == "ipu_copy"].itertuples():
        producers = [done.get((kind, row.replica, row.step, row.micro_batch, row.stage))
                     for kind in ("forward", "backward")]
        assert any(p and p[1] <= row.start_ps for p in producers), row
        if row.pipeline_cycle >= 0:
            same_cycle = events[(events["ipu"] == row.ipu) & (events["step"] == row.step)
                                & (events["pipeline_cycle"] == row.pipeline_cycle)
                                & (events["micro_batch"] // run.gradient_accumulation
                                   == row.micro_batch // run.gradient_accumulation)
                                & events["kind"].isin(PASSES)]
            assert (same_cycle["end_ps"] <= row.start_ps).all()

    # The weight update of a stage follows every replica's backwards of its iteration;
    # a pipeline is flushed first, so there it follows every backward of the iteration.
    updates = events[events["kind"] == "weight_update"].sort_values("start_ps", kind="stable")
    backwards = events[events["kind"] == "backward"]
    iteration_of = backwards["micro_batch"] // run.gradient_accumulation
    for (replica, step, stage), own in updates.groupby(["replica", "step", "stage"]):
        assert len(own) == run.device_iterations
        for iteration, start in enumerate(own["start_ps"]):
            before = backwards[(backwards["step"] == step) & (iteration_of == iteration)]
            if run.execution is not Execution.PIPELINED:
                before = before[before["stage"] == stage]
            else:
                before = before[before["replica"] == replica]
            assert len(before) > 0
            assert (before["end_ps"] <= start).all()
    assert updates.empty or run.training


@settings(max_examples=40, deadline=None)
@given(scenarios())
def test_every_micro_batch_is_computed_once_per_pass(scenario):
    work, run, system, steps = scenario
    events = simulate(work, run, system, steps=steps).events
    stages = len(run.scheduled(work).stages)
    micro_batches = run.device_iterations * run.gradient_accumulation
    counts = events[events["kind"].isin(PASSES)].groupby(
        ["kind", "replica", "step", "micro_batch", "stage"], observed=True).size()
    assert (counts == 1).all()
    keys = set(counts.index)
    everything = {(r, s, m, k) for r in range(run.replicas) for s in range(steps)
                  for m in range(micro_batches) for k in range(stages)}

    def computed(kind):
        return {key[1:] for key in keys if key[0] == kind}

    assert computed("forward") == everything
    assert computed("backward") == (everything if run.training else set())
    # A pipeline recomputes every stage but the last; sharded execution every stage.
    recomputed = set()
    if run.training and run.recompute and run.execution is Execution.PIPELINED:
        recomputed = {key for key in everything if key[3] < stages - 1}
    elif run.training and run.recompute and run.execution is Execution.SHARDED:
        recomputed = everything
    assert computed("recompute") == recomputed
    updates = events[events["kind"] == "weight_update"]
    assert len(updates) == (run.replicas * steps * run.device_iterations * stages
                            if run.training else 0)


@settings(max_examples=30, deadline=None)
@given(scenarios())
def test_same_inputs_give_the_same_events(scenario):
    work, run, system, steps = scenario
    first = simulate(work, run, system, steps=steps).events
    second = simulate(work, run, system, steps=steps).events
    pd.testing.assert_frame_equal(first, second)


@settings(max_examples=40, deadline=None)
@given(scenarios())
def test_synthetic_data_is_never_slower_than_real(scenario):
    work, run, system, steps = scenario
    real = simulate(work, replace(run, synthetic_data=False), system,
                    steps=steps)
    synthetic = simulate(work, replace(run, synthetic_data=True), system,
                         steps=steps)
    assert synthetic.duration_ps <= real.duration_ps
    assert not synthetic.events["kind"].isin(["host_to_device", "device_to_host"]).any()


@settings(max_examples=40, deadline=None)
@given(scenarios())
def test_full_sync_is_never_faster_than_single_pipeline(scenario):
    work, run, system, steps = scenario
    full = simulate(work, replace(run, sync_pattern=SyncPattern.FULL), system, steps=steps)
    single = simulate(work, replace(run, sync_pattern=SyncPattern.SINGLE_PIPELINE), system,
                      steps=steps)
    assert full.duration_ps >= single.duration_ps
