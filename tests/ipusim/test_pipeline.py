"""PopART's pipeline: cycle counts, bubble, exact step times, main-phase utilisation."""
from collections import defaultdict
from dataclasses import replace
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ipusim import (
    DEFAULT,
    Cost,
    CostModel,
    Execution,
    RunConfig,
    Stage,
    SystemSpec,
    Work,
    simulate,
    system_spec,
)
from ipusim.analysis.metrics import pipeline_slots
from ipusim.cost.optimizer import DEFAULT_PROGRAM
from ipusim.plan.schedule import pipeline_stages

ZERO_SYNC = CostModel(ipu_sync_hop_ps=0)


def equal_stages(count: int, forward_ps: int = 1000, backward_ps: int = 2000, **fields) -> Work:
    """``count`` identical stages, one per IPU."""
    return Work(tuple(Stage(f"s{k}", k, Cost(time_ps=forward_ps), Cost(time_ps=backward_ps),
                            **fields)
                      for k in range(count)))


def pipelined(training: bool, micro_batches: int, **fields) -> RunConfig:
    """A pipelined run with ``micro_batches`` per pipeline run (G in training, N in inference)."""
    if training:
        return RunConfig(training=True, gradient_accumulation=micro_batches,
                         execution=Execution.PIPELINED, synthetic_data=True, **fields)
    return RunConfig(training=False, device_iterations=micro_batches,
                     execution=Execution.PIPELINED, synthetic_data=True, **fields)


@settings(max_examples=40, deadline=None)
@given(forward_stages=st.integers(1, 5), training=st.booleans(), extra=st.integers(0, 4),
       iterations=st.integers(1, 2), replicas=st.integers(1, 2), steps=st.integers(1, 2))
def test_a_pipeline_run_takes_g_plus_p_minus_one_cycles(forward_stages, training, extra,
                                                        iterations, replicas, steps):
    depth = 2 * forward_stages - 1 if training else forward_stages
    micro_batches = depth + extra
    run = pipelined(training, micro_batches, replicas=replicas)
    if training:
        run = replace(run, device_iterations=iterations)
    work = equal_stages(forward_stages)
    timeline = simulate(work, run, system_spec("mk2", replicas * forward_stages), steps=steps)
    assert timeline.plan.pipeline_depth == depth
    slots = timeline.pipeline_slots()
    assert slots.equals(pipeline_slots(timeline.events, depth, micro_batches))
    runs = slots.groupby(["replica", "step", "run"])
    assert len(runs) == replicas * steps * (iterations if training else 1)
    assert (runs["pipeline_cycle"].nunique() == micro_batches + depth - 1).all()
    assert (runs.size() == micro_batches * depth).all()
    expected = Fraction(depth - 1, micro_batches + depth - 1)
    assert timeline.bubble_fraction() == pytest.approx(float(expected), rel=1e-12, abs=1e-15)


def test_cycle_c_runs_micro_batch_c_minus_j_on_pipeline_stage_j():
    events = simulate(equal_stages(3), pipelined(True, 6), system_spec("mk2", 3)).events
    slots = pipeline_slots(events, 5, 6)  # P = 2 x 3 - 1
    assert [ps.stage for ps in pipeline_stages(3, True)] == [0, 1, 2, 1, 0]
    compute = events[events["kind"].isin(["forward", "backward"])]
    pipeline_stage = compute["stage"].where(compute["kind"] == "forward", 4 - compute["stage"])
    assert (compute["pipeline_cycle"] - pipeline_stage == compute["micro_batch"]).all()
    assert sorted(slots["pipeline_cycle"].unique()) == list(range(6 + 5 - 1))


@pytest.mark.parametrize("forward_stages,micro_batches", [(1, 1), (2, 2), (3, 7), (4, 16)])
def test_inference_with_free_syncs_takes_n_plus_f_minus_one_stage_times(forward_stages,
                                                                        micro_batches):
    stage_ps = 1_000_000
    work = equal_stages(forward_stages, forward_ps=stage_ps)
    sim = simulate(work, pipelined(False, micro_batches), system_spec("mk2", forward_stages),
                   cost_model=ZERO_SYNC)
    pipeline_ps = sim.duration_ps - ZERO_SYNC.host_call_ps
    assert pipeline_ps == (micro_batches + forward_stages - 1) * stage_ps


def test_inference_stage_time_comes_from_the_cost_model():
    forward = Cost(flops=2e9, bytes=1e7, ops=20)
    work = Work(tuple(Stage(f"s{k}", k, forward) for k in range(4)))
    spec = system_spec("mk2", 4)
    stage_ps = ZERO_SYNC.compute_ps(forward, spec.ipu)
    sim = simulate(work, pipelined(False, 8), spec, cost_model=ZERO_SYNC)
    assert sim.duration_ps == ZERO_SYNC.host_call_ps + (8 + 4 - 1) * stage_ps


def expected_step_ps(work: Work, run: RunConfig, spec, cost: CostModel) -> int:
    """One synthetic-data pipelined call priced cycle by cycle, without simulating.

    Every cycle ends with a GS2 exchange, so it lasts as long as its busiest
    IPU (stages sharing an IPU run back to back), then the sync, then the
    longest copy. A training run ends with the all-reduce (a GS2 collective)
    and each IPU's weight updates; no barrier follows them, so an IPU starts
    the next run's first cycle as soon as its own updates are done.
    """
    stages = work.merged().stages
    last = len(stages) - 1
    pipeline = pipeline_stages(len(stages), run.training)
    per_run = run.gradient_accumulation if run.training else run.device_iterations
    runs = run.device_iterations if run.training else 1
    sync = cost.ipu_sync_ps(spec.num_ipus)
    ps = {kind: [cost.compute_ps(getattr(s, attr), spec.ipu) for s in stages]
          for kind, attr in (("forward", "forward"), ("recompute", "recompute_cost"))}
    # With accumulation, each micro-batch's backward also adds into the accumulators.
    ps["backward"] = [cost.compute_ps(s.backward + run.optimizer.accumulate_cost(
        s, run.accumulating), spec.ipu) for s in stages]
    per_ipu_update = defaultdict(int)
    grads: dict[int, tuple[int, ...]] = defaultdict(tuple)
    for stage in stages:
        per_ipu_update[stage.ipu] += cost.compute_ps(
            run.optimizer.update_cost(stage, run.accumulating), spec.ipu)
        grads[stage.ipu] += stage.parameter_sizes   # one all-reduce per parameter tensor
    total = cost.host_call_ps
    updating: dict[int, int] = {}
    for _ in range(runs):
        for pipeline_cycle in range(per_run + len(pipeline) - 1):
            busy, sent = defaultdict(int, updating if pipeline_cycle == 0 else {}), defaultdict(int)
            for j, (k, forward, backward) in enumerate(pipeline):
                if not 0 <= pipeline_cycle - j < per_run:
                    continue
                ipu = stages[k].ipu
                if forward:
                    busy[ipu] += ps["forward"][k]
                    if k < last and stages[k + 1].ipu != ipu:
                        sent[ipu] += stages[k].activation_bytes
                if backward:
                    if run.recompute and not forward:
                        busy[ipu] += ps["recompute"][k]
                    busy[ipu] += ps["backward"][k]
                    if k > 0 and stages[k - 1].ipu != ipu:
                        sent[ipu] += stages[k - 1].activation_bytes
            copy = max((cost.ipu_copy_ps(b, spec.ipu, spec) for b in sent.values()), default=0)
            total += max(busy.values(), default=0) + sync + copy
        if run.training:
            if run.replicas > 1:
                ipus = max(stage.ipu for stage in stages) + 1
                total += sync + max(cost.gradients_all_reduce_ps(g, run.replicas, spec.ipu,
                                                                 spec, ipus)
                                    for g in grads.values())
            updating = per_ipu_update
    return total + max(updating.values(), default=0)


@st.composite
def pipelines(draw):
    count = draw(st.integers(1, 4))
    ipus = draw(st.lists(st.integers(0, 2), min_size=count, max_size=count))
    stages = tuple(
        Stage(f"s{k}", ipu, Cost(flops=draw(st.sampled_from([0.0, 5e8])),
                                 ops=draw(st.integers(0, 4)), time_ps=draw(st.integers(0, 10**6))),
              Cost(time_ps=draw(st.integers(0, 10**6))),
              activation_bytes=draw(st.sampled_from([0, 5000, 10**6])),
              weight_bytes=draw(st.sampled_from([0, 10**6, 10**8])))
        for k, ipu in enumerate(ipus))
    work = Work(stages)
    forward_stages = len(work.merged().stages)
    training = draw(st.booleans())
    depth = 2 * forward_stages - 1 if training else forward_stages
    run = pipelined(training, depth + draw(st.integers(0, 3)), replicas=draw(st.integers(1, 2)),
                    recompute=draw(st.booleans()))
    if training:
        run = replace(run, device_iterations=draw(st.integers(1, 2)))
    cost = CostModel(ipu_sync_hop_ps=draw(st.sampled_from([0, 30_000])))
    return work, run, system_spec("mk2", run.replicas * work.ipus_per_replica), cost


@settings(max_examples=50, deadline=None)
@given(pipelines())
def test_pipelined_call_time_is_exactly_the_sum_of_its_cycles(scenario):
    work, run, spec, cost = scenario
    sim = simulate(work, run, spec, cost_model=cost)
    assert sim.duration_ps == expected_step_ps(work, run, spec, cost)


def test_stages_sharing_an_ipu_run_one_after_the_other():
    times = {0: 100_000, 1: 300_000, 2: 150_000}
    work = Work(tuple(Stage(f"s{k}", ipu, Cost(time_ps=times[k]))
                      for k, ipu in enumerate((0, 1, 0))))
    events = simulate(work, pipelined(False, 5), system_spec("mk2", 2), cost_model=ZERO_SYNC).events
    main = events[(events["pipeline_cycle"] == 2) & (events["kind"] == "forward")]
    on_ipu0 = main[main["ipu"] == 0].sort_values("start_ps")
    assert list(on_ipu0["stage"]) == [0, 2]
    assert on_ipu0["start_ps"].iloc[1] == on_ipu0["end_ps"].iloc[0]
    # Cycles 0 .. 6: IPU 0 runs stage 0 alone, then stages 0 and 2, then stage 2 alone.
    cycles = [100_000, 300_000, 300_000, 300_000, 300_000, 300_000, 150_000]
    assert events["end_ps"].max() == ZERO_SYNC.host_call_ps + sum(cycles)


def test_four_equal_stages_keep_every_ipu_busy_in_the_main_phase():
    micro_batches, forward_stages = 12, 4
    depth = 2 * forward_stages - 1
    work = equal_stages(forward_stages, forward_ps=400_000_000, backward_ps=800_000_000,
                        activation_bytes=2 * 10**6)
    spec, cost = system_spec("mk2", forward_stages), CostModel()
    events = simulate(work, pipelined(True, micro_batches), spec, cost_model=cost).events
    in_cycle = events[events["pipeline_cycle"] >= 0]
    bounds = in_cycle.groupby("pipeline_cycle").agg(start=("start_ps", "min"),
                                                    end=("end_ps", "max"))
    compute = in_cycle[in_cycle["kind"].isin(["forward", "backward"])]
    busy = (compute["end_ps"] - compute["start_ps"]).groupby(
        [compute["pipeline_cycle"], compute["ipu"]]).sum().unstack(fill_value=0)
    copies = in_cycle[in_cycle["kind"] == "ipu_copy"]
    phase = (copies["end_ps"] - copies["start_ps"]).groupby(copies["pipeline_cycle"]).max()
    length = bounds["end"] - bounds["start"]
    exchange = cost.ipu_sync_ps(spec.num_ipus) + phase.reindex(length.index, fill_value=0)
    main = range(depth - 1, micro_batches)
    for pipeline_cycle in main:
        c = pipeline_cycle
        assert (busy.loc[c] == length[c] - exchange[c]).all(), c
        assert (busy.loc[pipeline_cycle] == 1_200_000_000).all()
    ramp = [c for c in range(micro_batches + depth - 1) if c not in main]
    for pipeline_cycle in ramp:
        c = pipeline_cycle
        assert (busy.loc[c] < length[c] - exchange[c]).any(), c


def test_pipelining_beats_sharding_on_equal_stages():
    work = equal_stages(4, forward_ps=10**6, backward_ps=2 * 10**6, activation_bytes=10**5)
    spec = system_spec("mk2", 4)
    run = pipelined(True, 32)
    sharded = simulate(work, replace(run, execution=Execution.SHARDED), spec)
    pipelined_run = simulate(work, run, spec)
    overhead = CostModel().host_call_ps
    # Ideally 32 x 4 stage times against 32 + 6 cycles of one stage time: 3.4 times faster.
    assert pipelined_run.duration_ps - overhead < (sharded.duration_ps - overhead) / 3


def test_a_merged_stage_updates_what_both_parts_would():
    """One stage gives its update cost, the other leaves it to the cost model:
    merged on one IPU, the update costs the sum of the two."""
    explicit = Cost(flops=5e9, bytes=1e8, ops=3)
    stages = (Stage("A", 0, Cost(flops=1e9), Cost(flops=2e9), weight_bytes=10**8, update=explicit),
              Stage("B", 0, Cost(flops=1e9), Cost(flops=2e9), weight_bytes=3 * 10**8))
    run = RunConfig(synthetic_data=True)
    events = simulate(Work(stages), run, SystemSpec(num_ipus=1)).events
    update = events[events["kind"] == "weight_update"]
    expected = explicit + DEFAULT_PROGRAM.update_cost(stages[1])
    assert len(update) == 1
    assert update["flops"].iloc[0] == expected.flops
    assert (update["end_ps"] - update["start_ps"]).iloc[0] == DEFAULT.compute_ps(
        expected, SystemSpec(num_ipus=1).ipu)
