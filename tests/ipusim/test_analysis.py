"""Figures of a whole timeline that the reports show: cycles by kind, memory used."""
import pytest

from ipusim import Cost, RunConfig, Stage, Work, simulate, system_spec
from ipusim.analysis.headline import cycles_by_kind
from ipusim.plan.memory import memory_per_ipu


@pytest.fixture(scope="module")
def timeline():
    work = Work(tuple(Stage(f"s{k}", k, Cost(time_ps=10**6), Cost(time_ps=2 * 10**6),
                            weight_bytes=64 << 20) for k in range(2)),
                micro_batch_size=2, input_bytes_per_sample=1024, output_bytes_per_sample=256)
    return simulate(work, RunConfig(device_iterations=3), system_spec("mk2", 2), steps=3)


def test_cycles_by_kind_sum_each_kinds_cycles_over_the_steps(timeline):
    steps = timeline.step_cycles()
    totals = cycles_by_kind(steps)
    assert {"forward", "backward", "host_to_device"} <= set(totals.index)
    for kind, cycles in totals.items():
        assert cycles == steps[f"{kind}_cycles"].sum()
    per_ipu = timeline.events.assign(ps=timeline.events["end_ps"] - timeline.events["start_ps"])
    forward_ps = per_ipu.loc[per_ipu["kind"] == "forward", "ps"].sum() / timeline.num_ipus
    assert totals["forward"] == pytest.approx(timeline.to_cycles(forward_ps), abs=len(steps))


def test_the_memory_per_ipu_is_the_memory_models_with_the_share_of_sram_used(timeline):
    table = timeline.memory_per_ipu()
    model = memory_per_ipu(timeline.work, timeline.run, timeline.system)
    assert (table.drop(columns="used") == model).all().all()
    assert list(table["used"]) == pytest.approx(list(model["total"] / model["capacity"]))
    assert (table["used"] > 0.1).all()


def test_each_micro_batch_comes_in_then_is_ready_then_reaches_the_host(timeline):
    io = timeline.micro_batch_io()
    events = timeline.events
    last = events[(events["step"] == 2) & (events["replica"] == 0)]
    assert list(io.index) == [0, 1, 2]  # the last step's micro-batches, in order
    for mb, row in io.iterrows():
        mine = last[last["micro_batch"] == mb]
        copy_in = mine[mine["kind"] == "host_to_device"]
        assert row["input_start_ps"] == copy_in["start_ps"].min()
        assert row["input_end_ps"] == copy_in["end_ps"].max()
        assert row["output_ready_ps"] == mine.loc[mine["kind"] == "forward", "end_ps"].max()
    assert (io["input_start_ps"] < io["input_end_ps"]).all()
    assert (io["input_end_ps"] <= io["output_ready_ps"]).all()
    # The default output period returns only the last micro-batch of a call.
    assert list(io["returned"]) == [False, False, True]
    assert io.loc[2, "output_end_ps"] > io.loc[2, "output_ready_ps"]
    assert list(timeline.micro_batch_io(step=0).index) == [0, 1, 2]
    assert timeline.micro_batch_io(step=0)["input_start_ps"].max() < io["input_start_ps"].min()


def test_cycles_are_rounded_from_picoseconds_at_the_ipu_clock(timeline):
    clock = timeline.system.ipu.clock_hz  # 1.33 GHz: a cycle is about 752 ps
    cycle_ps = 10**12 / clock
    assert timeline.to_cycles(0.4 * cycle_ps) == 0
    assert timeline.to_cycles(0.6 * cycle_ps) == 1
    assert timeline.to_cycles(1000 * cycle_ps) == 1000
