"""Replica folding: one replica simulated for all gives the very timeline of simulating each."""
from dataclasses import replace

import pandas as pd
import pytest

from ipusim import Cost, Execution, RunConfig, Stage, SyncPattern, Work, system_spec
from ipusim.plan.folding import FOLD_ENV, fold_blocker
from ipusim.simulation import Simulation


def work_on(ipus: int) -> Work:
    """A stage per IPU, with inputs and outputs large enough to queue on a shared host link."""
    return Work(tuple(Stage(f"s{k}", k, Cost(flops=(2 + k) * 1e9, ops=10),
                            Cost(flops=(5 + k) * 1e9, ops=20), activation_bytes=10**5,
                            weight_bytes=10**7, optimizer_bytes=10**7)
                      for k in range(ipus)),
                micro_batch_size=8, input_bytes_per_sample=3 * 2**20,
                output_bytes_per_sample=2**20)


# IPUs sharing a host link, for replicas of 2 IPUs: each IPU its own link, a link
# per replica, a link shared by two replicas (folding must fall back).
LINKS = {"own": 1, "per replica": 2, "shared by replicas": 4}


def both(work: Work, run: RunConfig, spec, steps: int = 2, idle_ps: int = 0):
    """(folded, unfolded) simulations of ``steps`` calls, ``idle_ps`` apart."""
    sims = [Simulation(work, run, spec, fold_replicas=fold) for fold in (True, False)]
    for sim in sims:
        for _ in range(steps):
            sim.step()
            sim.wait_until(sim.system.now_ps + idle_ps)
    return sims


def assert_same_timeline(folded: Simulation, unfolded: Simulation) -> None:
    pd.testing.assert_frame_equal(folded.timeline.events, unfolded.timeline.events)
    assert folded.timeline.summary() == unfolded.timeline.summary()
    assert folded.timeline.figures() == unfolded.timeline.figures()  # latency, host links...
    pd.testing.assert_frame_equal(folded.timeline.step_cycles(), unfolded.timeline.step_cycles())
    assert folded.system.now_ps == unfolded.system.now_ps


@pytest.mark.parametrize("pattern", list(SyncPattern))
@pytest.mark.parametrize("links", list(LINKS))
@pytest.mark.parametrize("execution", [Execution.PIPELINED, Execution.SHARDED])
def test_folded_replicas_record_exactly_what_each_replica_simulated_does(pattern, links,
                                                                         execution):
    work, replicas = work_on(2), 3
    run = RunConfig(replicas=replicas, gradient_accumulation=4, device_iterations=2,
                    execution=execution, sync_pattern=pattern, output_period=1)
    spec = system_spec("mk2", 2 * replicas, ipus_per_host_link=LINKS[links])
    folded, unfolded = both(work, run, spec, idle_ps=10**6)
    assert folded.folded is (links != "shared by replicas")
    assert not unfolded.folded
    assert folded.simulated_ipus == (2 if folded.folded else 2 * replicas)
    assert_same_timeline(folded, unfolded)
    assert set(folded.timeline.events["replica"]) == set(range(replicas))


def test_replicas_on_one_host_link_queue_so_they_are_not_folded():
    # Why the condition holds: sharing a link, replica 1's inputs wait for replica 0's.
    work = work_on(2)
    run = RunConfig(replicas=2, gradient_accumulation=4, execution=Execution.PIPELINED,
                    sync_pattern=SyncPattern.SINGLE_PIPELINE)
    spec = system_spec("mk2", 4, ipus_per_host_link=4)
    assert "share host links" in fold_blocker(work, run, spec)
    events = Simulation(work, run, spec).run_steps(1).events
    waits = events[events["kind"] == "host_link_wait"].groupby("replica").size()
    assert waits.get(1, 0) > waits.get(0, 0)


def test_synthetic_data_folds_even_on_shared_host_links():
    work = work_on(2)
    run = RunConfig(replicas=4, gradient_accumulation=3, execution=Execution.PIPELINED,
                    synthetic_data=True)
    spec = system_spec("mk2", 8, ipus_per_host_link=8)
    folded, unfolded = both(work, run, spec)
    assert folded.folded
    assert_same_timeline(folded, unfolded)


@pytest.mark.parametrize("execution", [Execution.PHASED, Execution.PARALLEL_PHASED])
def test_phased_and_overlapped_io_fold_exactly(execution):
    work, replicas = work_on(4), 2
    run = RunConfig(replicas=replicas, gradient_accumulation=3, execution=execution,
                    sync_pattern=SyncPattern.REPLICA_AND_LADDER, overlap_inputs=True,
                    overlap_outputs=True, output_period=1, io_tiles=64)
    spec = system_spec("mk2", 4 * replicas)
    folded, unfolded = both(work, run, spec)
    assert folded.folded
    assert_same_timeline(folded, unfolded)


def test_inference_folds_exactly():
    work = work_on(2)
    run = RunConfig(training=False, replicas=4, device_iterations=5,
                    execution=Execution.PIPELINED, output_period=1)
    folded, unfolded = both(work, run, system_spec("mk2", 8, ipus_per_host_link=2))
    assert folded.folded
    assert_same_timeline(folded, unfolded)


def test_ladder_groups_that_cross_replicas_unevenly_are_not_folded():
    # Three IPUs per replica: IPU 0 of replica 1 (IPU 3) syncs with IPU 1 of replica 0.
    work = work_on(3)
    run = RunConfig(replicas=2, gradient_accumulation=6, execution=Execution.PIPELINED,
                    sync_pattern=SyncPattern.REPLICA_AND_LADDER, synthetic_data=True)
    spec = system_spec("mk2", 6)
    assert "sync group of IPU" in fold_blocker(work, run, spec)
    folded, unfolded = both(work, run, spec, steps=1)
    assert not folded.folded
    assert_same_timeline(folded, unfolded)


def test_one_replica_and_the_switch_do_not_fold(monkeypatch):
    work = work_on(2)
    run = RunConfig(replicas=2, gradient_accumulation=3, execution=Execution.PIPELINED)
    spec = system_spec("mk2", 4, ipus_per_host_link=2)
    assert fold_blocker(work, replace(run, replicas=1), system_spec("mk2", 2)) == "one replica"
    assert Simulation(work, run, spec).folded
    monkeypatch.setenv(FOLD_ENV, "0")
    assert not Simulation(work, run, spec).folded
    assert Simulation(work, run, spec, fold_replicas=True).folded
