"""SRAM per IPU: stash depth, recomputation, offloading, and the out-of-memory error."""
from dataclasses import replace

import pandas as pd
import pytest

from ipusim import Cost, CostModel, Execution, RunConfig, Stage, Work, simulate, system_spec
from ipusim.engine.recorder import COMPUTE_KINDS
from ipusim.plan.memory import (
    MemoryModel,
    OutOfMemoryError,
    check_fits,
    fits,
    memory_per_ipu,
    stash_depth,
)
from ipusim.plan.run_config import Offload

STASH, ACTIVATION, WEIGHTS, OPTIMIZER = 8 * 10**6, 10**6, 5 * 10**7, 10**8
SPEC = system_spec("mk2", 4)


def four_stages() -> Work:
    return Work(tuple(Stage(f"s{k}", k, Cost(flops=1e9, ops=10), Cost(flops=2e9, ops=20),
                            activation_bytes=ACTIVATION, stash_bytes=STASH, weight_bytes=WEIGHTS,
                            optimizer_bytes=OPTIMIZER)
                      for k in range(4)),
                micro_batch_size=8, input_bytes_per_sample=3072)


PIPELINE = RunConfig(gradient_accumulation=8, execution=Execution.PIPELINED, synthetic_data=True)


def compute_ps(events) -> int:
    compute = events[events["kind"].isin(COMPUTE_KINDS)]
    return int((compute["end_ps"] - compute["start_ps"]).sum())


def test_stash_depth_follows_the_distance_to_the_backward():
    assert [stash_depth(k, 4, PIPELINE) for k in range(4)] == [7, 5, 3, 1]
    sharded = replace(PIPELINE, execution=Execution.SHARDED)
    assert [stash_depth(k, 4, sharded) for k in range(4)] == [1, 1, 1, 1]
    inference = RunConfig(training=False, device_iterations=4, execution=Execution.PIPELINED)
    assert stash_depth(0, 4, inference) == 0


def test_stash_grows_with_pipeline_depth_and_stage_0_holds_the_most():
    table = memory_per_ipu(four_stages(), PIPELINE, SPEC)
    assert table["stash"].tolist() == [7 * STASH, 5 * STASH, 3 * STASH, STASH]
    assert table["total"].idxmax() == 0
    deeper = Work(four_stages().stages + (Stage("s4", 4, stash_bytes=STASH),))
    assert memory_per_ipu(deeper, PIPELINE, system_spec("mk2", 5))["stash"][0] == 9 * STASH


def test_table_adds_up_and_states_the_capacity():
    model = MemoryModel()
    table = memory_per_ipu(four_stages(), PIPELINE, SPEC, model)
    assert (table["weights"] == WEIGHTS).all()
    assert (table["optimizer"] == OPTIMIZER).all()
    assert (table["accumulators"] == WEIGHTS).all()  # gradient accumulation keeps one copy
    assert (table["code"] == model.code_bytes_per_tile * SPEC.ipu.tiles
            + model.code_bytes_per_op * 30).all()
    data = table[["weights", "optimizer", "accumulators", "stash"]].sum(axis=1)
    assert (table["exchange"] == data * model.exchange_fraction).all()
    parts = table[["weights", "optimizer", "accumulators", "stash", "code", "exchange"]].sum(axis=1)
    assert (table["total"] == parts).all()
    assert (table["capacity"] == SPEC.ipu.sram_bytes).all()
    inference = memory_per_ipu(four_stages(), RunConfig(training=False), SPEC)
    assert (inference["optimizer"] == 0).all() and (inference["accumulators"] == 0).all()


def test_recomputation_trades_stash_memory_for_compute_time():
    work, recompute = four_stages(), replace(PIPELINE, recompute=True)
    plain_table = memory_per_ipu(work, PIPELINE, SPEC)
    recompute_table = memory_per_ipu(work, recompute, SPEC)
    # Only the stage inputs are stashed for the micro-batches in flight.
    inputs = [work.input_bytes, ACTIVATION, ACTIVATION]
    assert recompute_table["stash"].tolist() == [
        STASH + inputs[k] * (depth - 1) for k, depth in enumerate((7, 5, 3))] + [STASH]
    assert (recompute_table["stash"][:3] < plain_table["stash"][:3]).all()
    assert recompute_table["stash"][3] == plain_table["stash"][3]

    cost = CostModel()
    plain = simulate(work, PIPELINE, SPEC, cost)
    again = simulate(work, recompute, SPEC, cost)
    extra = 3 * PIPELINE.gradient_accumulation * cost.compute_ps(work.stages[0].forward, SPEC.ipu)
    assert compute_ps(again.events) - compute_ps(plain.events) == extra
    assert again.duration_ps > plain.duration_ps


def one_ipu(**fields) -> Work:
    stage = Stage("m", 0, Cost(flops=1e9, ops=10), Cost(flops=2e9, ops=20),
                  stash_bytes=STASH, weight_bytes=WEIGHTS, optimizer_bytes=OPTIMIZER)
    return Work((stage,), **fields)


def test_offloading_optimizer_state_frees_sram_and_costs_streaming_time():
    cost, spec = CostModel(), system_spec("mk2", 1)
    run = RunConfig(device_iterations=3, gradient_accumulation=2, synthetic_data=True)
    offloaded = replace(run, offload=Offload(optimizer=True))
    on_chip = memory_per_ipu(one_ipu(), run, spec)
    off_chip = memory_per_ipu(one_ipu(), offloaded, spec)
    assert off_chip["optimizer"][0] == 0
    assert off_chip["total"][0] < on_chip["total"][0] - OPTIMIZER
    plain = simulate(one_ipu(), run, spec, cost)
    streamed = simulate(one_ipu(), offloaded, spec, cost)
    transfers = streamed.events[streamed.events["kind"].isin(["stream_in", "stream_out"])]
    counts = transfers["kind"].astype(str).value_counts().to_dict()
    assert counts == {"stream_in": 3, "stream_out": 3}
    durations = transfers["end_ps"] - transfers["start_ps"]
    into, out = cost.streaming_ps(OPTIMIZER, spec), cost.streaming_ps(OPTIMIZER, spec, False)
    kinds = transfers["kind"].astype(str)
    assert (durations[kinds == "stream_in"] == into).all()
    assert (durations[kinds == "stream_out"] == out).all()
    assert streamed.duration_ps - plain.duration_ps == 3 * (into + out)
    assert plain.events["kind"].isin(["stream_in", "stream_out"]).sum() == 0


def test_offloading_weights_streams_them_in_every_iteration():
    cost, spec = CostModel(), system_spec("mk2", 1)
    run = RunConfig(device_iterations=2, synthetic_data=True, offload=Offload(weights=True))
    table = memory_per_ipu(one_ipu(), run, spec)
    assert table["weights"][0] == 0
    events = simulate(one_ipu(), run, spec, cost).events
    streamed = events[events["kind"] == "stream_in"]
    # Before each iteration's forward (weights), and again before each update (with its state).
    assert streamed["bytes"].tolist() == [WEIGHTS, WEIGHTS, WEIGHTS, WEIGHTS]


def test_offloading_accumulators_only_matters_when_accumulating():
    offload = Offload(accumulators=True)
    accumulating = RunConfig(gradient_accumulation=4, offload=offload)
    assert memory_per_ipu(one_ipu(), accumulating, SPEC)["accumulators"][0] == 0
    kept = memory_per_ipu(one_ipu(), replace(accumulating, offload=Offload()), SPEC)
    assert kept["accumulators"][0] == WEIGHTS
    assert memory_per_ipu(one_ipu(), RunConfig(), SPEC)["accumulators"][0] == 0


def test_phased_execution_holds_one_phase_of_weights_at_a_time():
    two_phases_one_ipu = Work((Stage("a", 0, weight_bytes=WEIGHTS, optimizer_bytes=OPTIMIZER),
                               Stage("b", 1, weight_bytes=2 * WEIGHTS, optimizer_bytes=OPTIMIZER),
                               Stage("c", 0, weight_bytes=WEIGHTS, optimizer_bytes=OPTIMIZER)))
    table = memory_per_ipu(two_phases_one_ipu, RunConfig(execution=Execution.PHASED), SPEC)
    assert table["weights"].tolist() == [WEIGHTS + OPTIMIZER, 2 * WEIGHTS + OPTIMIZER]
    assert (table["optimizer"] == 0).all()


def test_a_model_that_fits_passes_the_check():
    check_fits(memory_per_ipu(four_stages(), PIPELINE, SPEC))


def test_out_of_memory_names_the_ipu_and_the_numbers():
    huge = Work((Stage("a", 0, weight_bytes=10**8), Stage("b", 1, weight_bytes=10**9)))
    table = memory_per_ipu(huge, RunConfig(training=False), system_spec("mk2", 2))
    with pytest.raises(OutOfMemoryError) as caught:
        check_fits(table)
    message = str(caught.value)
    assert message.startswith("Out of memory on IPU 1: it needs ")
    assert f"{table['total'][1] / 1e6:,.1f} MB" in message
    assert "weights 1,000.0 MB" in message
    assert f"but has {SPEC.ipu.sram_bytes / 1e6:,.1f} MB of SRAM" in message
    assert isinstance(caught.value, ValueError)
    with pytest.raises(OutOfMemoryError) as caught:
        check_fits(table, huge.stages)
    message = str(caught.value)
    assert message.startswith("Out of memory on IPU 1 (model stage b): it needs ")
    over = table["total"][1] / table["capacity"][1]
    assert f"({over:.0%})" in message
    for help_ in ("RunConfig.recompute", "RunConfig.offload.optimizer", "Stage.ipu",
                  "Work.micro_batch_size"):
        assert help_ in message


def test_the_out_of_memory_threshold_is_the_sram_capacity_exactly():
    """A model one byte under what the IPU holds fits; one byte over does not."""
    spec = system_spec("mk2", 1)
    run = RunConfig(training=False)
    empty = memory_per_ipu(Work((Stage("s", ipu=0),)), run, spec)
    capacity, fixed = float(empty["capacity"][0]), float(empty["total"][0])
    # Weights are data: they also take their exchange share (5 %).
    fits = int((capacity - fixed) / 1.05)
    for weights, ok in ((fits, True), (fits + 2, False)):
        table = memory_per_ipu(Work((Stage("s", ipu=0, weight_bytes=weights),)), run, spec)
        assert bool(table["total"][0] <= capacity) is ok
        if ok:
            check_fits(table)
        else:
            with pytest.raises(OutOfMemoryError):
                check_fits(table)


def test_a_table_fits_when_every_ipu_holds_what_it_needs():
    table = pd.DataFrame({"total": [10.0, 20.0], "capacity": [20.0, 20.0]})
    assert fits(table)
    table.loc[1, "total"] = 20.5
    assert not fits(table)
