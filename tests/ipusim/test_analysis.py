"""Figures of a whole timeline that the reports show: cycles by kind, memory used."""
import pytest

from ipusim import Cost, RunConfig, Stage, Work, simulate, system_spec
from ipusim.analysis import cycles_by_kind
from ipusim.memory import memory_per_ipu


@pytest.fixture(scope="module")
def timeline():
    work = Work(tuple(Stage(f"s{k}", k, Cost(time_ps=10**6), Cost(time_ps=2 * 10**6),
                            weight_bytes=64 << 20) for k in range(2)),
                micro_batch_size=2, input_bytes_per_sample=1024)
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
