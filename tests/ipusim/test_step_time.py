"""The step time cut into parts: every IPU's parts add up to the span exactly, the
bubble is the waiting of a pipeline's ramps and nothing else."""
import pytest

from ipusim import Cost, Execution, RunConfig, Stage, SyncPattern, Work, simulate, system_spec
from ipusim.analysis.metrics import span_ps, time_by_category_ps
from ipusim.analysis.step_time import BUBBLE, IDLE, STEP_PARTS, SYNC
from ipusim.engine.event_kinds import COMPUTE_TIME, HOST_CALL_TIME, HOST_IO_TIME, SYNC_WAIT_TIME

US = 10**6  # picoseconds


def work(count: int) -> Work:
    """``count`` stages of fixed times, one per IPU."""
    return Work(tuple(Stage(f"block{k}", k, Cost(time_ps=50 * US, ops=1),
                            Cost(time_ps=100 * US, ops=1), activation_bytes=65536,
                            weight_bytes=4 << 20) for k in range(count)),
                micro_batch_size=4, input_bytes_per_sample=4096, output_bytes_per_sample=16)


def pipeline_run(micro_batches: int = 8, replicas: int = 1, steps: int = 1, **run_fields):
    run = RunConfig(gradient_accumulation=micro_batches, replicas=replicas,
                    execution=Execution.PIPELINED, **run_fields)
    return simulate(work(4), run, system_spec("mk2", 4 * replicas), steps=steps)


def replicated_run():
    run = RunConfig(replicas=4, device_iterations=4, sync_pattern=SyncPattern.SINGLE_PIPELINE)
    return simulate(work(1), run, system_spec("mk2", 4), steps=3)


def sharded(**run_fields):
    return simulate(work(2), RunConfig(device_iterations=3, **run_fields),
                    system_spec("mk2", 4), steps=2)


RUNS = {
    "pipelined": lambda: pipeline_run(steps=2),
    "pipelined, 2 replicas, 3 device iterations": lambda: pipeline_run(replicas=2,
                                                                       device_iterations=3),
    "pipelined inference": lambda: pipeline_run(training=False, micro_batches=1,
                                                device_iterations=8),
    "replicated": replicated_run,
    "sharded, 2 replicas, SinglePipeline": lambda: sharded(
        replicas=2, sync_pattern=SyncPattern.SINGLE_PIPELINE),
    "serial phased": lambda: sharded(execution=Execution.PHASED),
    "parallel phased, ReplicaAndLadder": lambda: sharded(
        execution=Execution.PARALLEL_PHASED, sync_pattern=SyncPattern.REPLICA_AND_LADDER),
}


@pytest.fixture(scope="module", params=sorted(RUNS))
def timeline(request):
    return RUNS[request.param]()


def test_every_ipus_parts_add_up_to_the_span_exactly(timeline):
    table = timeline.step_time_by_ipu()
    assert list(table.columns) == [part.name for part in STEP_PARTS]
    assert list(table.index) == list(range(timeline.num_ipus))
    assert (table.dtypes == "int64").all()
    assert (table.sum(axis=1) == span_ps(timeline.events)).all()
    assert (table >= 0).all().all(), table


def test_the_parts_are_the_categories_but_the_waiting_in_a_pipelines_ramps(timeline):
    table = timeline.step_time_by_ipu()
    categories = time_by_category_ps(timeline.events, timeline.num_ipus)
    for part, category in (("compute", COMPUTE_TIME), ("host_io", HOST_IO_TIME),
                           ("host_round_trip", HOST_CALL_TIME)):
        assert (table[part] == categories[category.name]).all()
    # The bubble only moves waiting (sync wait, idle) out of those parts, never work.
    waiting = table[[SYNC.name, BUBBLE.name, IDLE.name]].sum(axis=1)
    idle = span_ps(timeline.events) - categories.sum(axis=1)
    assert (waiting == categories[SYNC_WAIT_TIME.name] + idle).all()
    if not timeline.plan.pipeline:
        assert (table[BUBBLE.name] == 0).all()
    else:
        assert (table[BUBBLE.name] > 0).all()


def test_the_bubble_is_the_same_time_whatever_the_accumulation():
    # (P - 1) cycles of ramp-up and of ramp-down whatever G: the bubble's time stays,
    # its share shrinks as the main phase grows.
    short, long = pipeline_run(micro_batches=8), pipeline_run(micro_batches=16)
    bubble = [t.step_time_by_ipu()[BUBBLE.name] for t in (short, long)]
    assert (bubble[0] == bubble[1]).all()
    assert long.bubble_fraction() < short.bubble_fraction()
    assert (long.step_time_by_ipu()["compute"] > short.step_time_by_ipu()["compute"]).all()
