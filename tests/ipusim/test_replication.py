"""Replication: each replica keeps its own compute time; replicas add only the all-reduce."""
from dataclasses import replace

import pytest

from ipusim import (
    DEFAULT,
    Cost,
    CostModel,
    Execution,
    RunConfig,
    Simulation,
    Stage,
    SyncPattern,
    Work,
    job_timeline,
    simulate,
    system_spec,
)
from ipusim.engine.recorder import COMPUTE_KINDS

US = 10**6  # picoseconds
WEIGHTS = (3 * 10**7, 10**8)


def two_stage_work() -> Work:
    return Work(tuple(Stage(f"s{k}", k, Cost(flops=4e9, ops=10), Cost(flops=8e9, ops=20),
                            activation_bytes=10**5, weight_bytes=w, optimizer_bytes=w)
                      for k, w in enumerate(WEIGHTS)),
                micro_batch_size=4, input_bytes_per_sample=3072, output_bytes_per_sample=40)


def run_for(execution: Execution, replicas: int = 1, **fields) -> RunConfig:
    return RunConfig(replicas=replicas, gradient_accumulation=4, device_iterations=2,
                     execution=execution, **fields)


def compute_ps_by_ipu(events) -> list[int]:
    compute = events[events["kind"].isin(COMPUTE_KINDS)]
    return (compute["end_ps"] - compute["start_ps"]).groupby(compute["ipu"]).sum().tolist()


@pytest.mark.parametrize("execution", list(Execution))
@pytest.mark.parametrize("synthetic", [True, False])
def test_every_replica_computes_as_long_as_a_lone_one(execution, synthetic):
    work, replicas = two_stage_work(), 4
    one = simulate(work, run_for(execution, synthetic_data=synthetic), system_spec("mk2", 2))
    many = simulate(work, run_for(execution, replicas, synthetic_data=synthetic),
                    system_spec("mk2", 2 * replicas))
    assert compute_ps_by_ipu(many.events) == compute_ps_by_ipu(one.events) * replicas
    one_ipu_compute = one.per_ipu()["compute(us)"].tolist()
    assert many.per_ipu()["compute(us)"].tolist() == one_ipu_compute * replicas


def one_stage_work() -> Work:
    return Work((Stage("s", 0, Cost(flops=4e9, ops=10), Cost(flops=8e9, ops=20),
                       weight_bytes=WEIGHTS[1]),))


def all_reduce_per_iteration(work: Work, execution: Execution, replicas: int, spec,
                             cost: CostModel) -> int:
    """The time one iteration's gradient all-reduce adds (one collective per phase when phased)."""
    sync = cost.ipu_sync_ps(spec.num_ipus)
    ipus = max(s.ipu for s in work.stages) + 1
    reduce = [cost.all_reduce_ps(s.weight_bytes, replicas, spec.ipu, ipus_per_replica=ipus)
              for s in work.stages]
    if execution is Execution.PHASED:
        return sum(sync + r for r in reduce)
    return sync + max(reduce)


EXACT_CASES = [(one_stage_work, execution) for execution in Execution] + [
    (two_stage_work, Execution.PIPELINED), (two_stage_work, Execution.PHASED)]


@pytest.mark.parametrize("make_work,execution", EXACT_CASES)
@pytest.mark.parametrize("replicas", [2, 3, 4])
@pytest.mark.parametrize("cost", [CostModel(), CostModel(ipu_sync_hop_ps=0)])
def test_replicas_add_exactly_the_all_reduce(make_work, execution, replicas, cost):
    """With syncs free, replicas add exactly their all-reduce; with PopLibs' syncs,
    a larger device also syncs slower (more hops), and only slower."""
    work, steps = make_work(), 2
    ipus = work.ipus_per_replica
    run = run_for(execution, synthetic_data=True)
    one = simulate(work, run, system_spec("mk2", ipus), cost_model=cost, steps=steps)
    spec = system_spec("mk2", ipus * replicas)
    many = simulate(work, replace(run, replicas=replicas), spec, cost, steps=steps)
    updates = steps * run.device_iterations
    extra = all_reduce_per_iteration(work, execution, replicas, spec, cost) * updates
    if cost.ipu_sync_hop_ps == 0 or cost.ipu_sync_ps(ipus) == cost.ipu_sync_ps(ipus * replicas):
        assert many.duration_ps - one.duration_ps == extra
    else:  # a one-IPU replica has no GS2 syncs of its own to slow down
        assert many.duration_ps - one.duration_ps >= extra
    assert one.events["kind"].eq("all_reduce").sum() == 0


def test_sharded_replicas_also_lose_the_overlap_of_updates_with_the_last_backward():
    # Alone, IPU 1 updates its weights while IPU 0 runs its last backward. The
    # all-reduce is a GS2 collective, so with replicas both updates follow it.
    work, cost = two_stage_work(), CostModel()
    run = run_for(Execution.SHARDED, synthetic_data=True)
    one = simulate(work, run, system_spec("mk2", 2), cost)
    spec = system_spec("mk2", 4)
    many = simulate(work, replace(run, replicas=2), spec, cost)
    extra = all_reduce_per_iteration(work, Execution.SHARDED, 2, spec, cost) * 2
    assert many.duration_ps - one.duration_ps > extra
    assert compute_ps_by_ipu(many.events) == compute_ps_by_ipu(one.events) * 2


def test_with_free_syncs_the_extra_time_is_the_all_reduce_alone():
    work = Work((Stage("s", 0, Cost(time_ps=10 * US), Cost(time_ps=20 * US), weight_bytes=10**8),))
    cost = CostModel(ipu_sync_hop_ps=0)
    run = RunConfig(gradient_accumulation=3, device_iterations=5, synthetic_data=True)
    one = simulate(work, run, system_spec("mk2", 1), cost)
    many = simulate(work, replace(run, replicas=8), system_spec("mk2", 8), cost)
    spec = system_spec("mk2", 8)
    assert many.duration_ps - one.duration_ps == 5 * cost.all_reduce_ps(10**8, 8, spec.ipu)


def test_all_reduce_events_last_as_long_as_each_ipus_share():
    spec, cost = system_spec("mk2", 8), CostModel()
    events = simulate(two_stage_work(), run_for(Execution.PIPELINED, 4, synthetic_data=True),
                      spec, cost).events
    reduces = events[events["kind"] == "all_reduce"]
    assert len(reduces) == 8 * 2
    duration = reduces["end_ps"] - reduces["start_ps"]
    expected = reduces["ipu"].map(
        lambda ipu: cost.all_reduce_ps(WEIGHTS[ipu % 2], 4, spec.ipu, ipus_per_replica=2))
    assert (duration == expected).all()
    assert (reduces["bytes"] == reduces["ipu"].map(lambda ipu: WEIGHTS[ipu % 2])).all()


def test_replicas_on_their_own_host_links_scale_like_synthetic_data():
    work, cost = two_stage_work(), CostModel(ipu_sync_hop_ps=0)
    run = run_for(Execution.PIPELINED, sync_pattern=SyncPattern.SINGLE_PIPELINE)
    one = simulate(work, run, system_spec("mk2", 2, ipus_per_host_link=2), cost)
    spec = system_spec("mk2", 8, ipus_per_host_link=2)
    many = simulate(work, replace(run, replicas=4), spec, cost)
    per_iteration = all_reduce_per_iteration(work, Execution.PIPELINED, 4, spec, cost)
    extra = per_iteration * run.device_iterations
    assert many.duration_ps - one.duration_ps == extra


def test_replicas_sharing_a_host_link_queue_for_it():
    work = Work((Stage("s", 0, Cost(time_ps=1 * US)),), micro_batch_size=16,
                input_bytes_per_sample=10**5)
    run = RunConfig(training=False, device_iterations=10, sync_pattern=SyncPattern.SINGLE_PIPELINE)
    quick_calls = replace(DEFAULT, engine_run_ps=250 * US)  # the copies, not the call, dominate
    one = simulate(work, run, system_spec("mk2", 1), quick_calls)
    shared = simulate(work, replace(run, replicas=4), system_spec("mk2", 4), quick_calls)
    separate = simulate(work, replace(run, replicas=4), system_spec("mk2", 4, ipus_per_host_link=1),
                        quick_calls)
    assert separate.duration_ps == one.duration_ps
    # Four IPUs share their machine's host link into the gateway (7.06 GB/s), each then
    # on its own hop to its tiles (3.30): together about 7.06 / 3.30 of one IPU's rate.
    assert shared.throughput() == pytest.approx(7.06 / 3.30 * one.throughput(), rel=0.02)
    assert separate.throughput() == pytest.approx(4 * one.throughput())


def test_a_jobs_instances_are_numbered_after_one_another_replicas_as_the_plan_says():
    work = Work(tuple(Stage(f"s{k}", k, Cost(time_ps=1000), Cost(time_ps=2000))
                      for k in range(2)))
    run = RunConfig(replicas=2, instances=2, device_iterations=2)
    parts = [Simulation(work, run, system_spec("mk2", 8), instance=k).run_steps(1)
             for k in (1, 0)]
    job = job_timeline(parts)
    events = job.events
    assert job.num_ipus == 8 and job.run.replicas == 4
    assert (events["replica"] == job.plan.replica_of(events["ipu"])).all()
    second = events[events["instance"] == 1]
    assert set(second["ipu"]) == {4, 5, 6, 7} and set(second["replica"]) == {2, 3}
    assert len(events) == sum(len(part.events) for part in parts)
