"""Every public dataclass of ipusim refuses a bad field at construction with a
ValueError naming the field and the value: never a TypeError, an
OverflowError or a silently accepted NaN, infinity, bool or string."""
import dataclasses
import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ipusim import Cost, CostModel, RunConfig, Simulation, Stage, SystemSpec, Work
from ipusim.cost.work import Kernel, KernelKind
from ipusim.hardware import MK2_GC200, IPUSpec
from ipusim.plan.run_config import Offload

# A valid instance of each class: a field replaced on it is all that changes.
BASES = {
    "Kernel": Kernel(KernelKind.MATMUL, m=4, k=4, n=4),
    "Cost": Cost(flops=1.0, time_ps=10),
    "Stage": Stage("s", 0, Cost(time_ps=10)),
    "Work": Work((Stage("s", 0, Cost(time_ps=10)),)),
    "CostModel": CostModel(),
    "IPUSpec": MK2_GC200,
    "SystemSpec": SystemSpec(),
    "RunConfig": RunConfig(),
    "Offload": Offload(),
}
FIELDS = [(owner, f.name) for owner, base in BASES.items()
          for f in dataclasses.fields(base)]

BAD = [float("nan"), float("inf"), -float("inf"), -1, "1", 10**400, 2**70, None, [1], 1.5,
       True, False, 0]
WEIRD = st.one_of(st.sampled_from(BAD), st.floats(), st.integers(), st.text(max_size=3),
                  st.booleans(), st.none(), st.binary(max_size=3))


def build(owner: str, name: str, value):
    return dataclasses.replace(BASES[owner], **{name: value})


@settings(max_examples=300, deadline=None)
@given(field=st.sampled_from(FIELDS), value=WEIRD)
def test_any_value_is_accepted_or_refused_with_a_value_error(field, value):
    owner, name = field
    try:
        build(owner, name, value)
    except ValueError as error:
        assert name in str(error) or owner in str(error), str(error)


def _numeric(owner, name) -> bool:
    kind = {f.name: f.type for f in dataclasses.fields(BASES[owner])}[name]
    return kind in ("int", "float", "int | None")


NUMERIC = [field for field in FIELDS if _numeric(*field)]


@pytest.mark.parametrize("owner, name", NUMERIC)
@pytest.mark.parametrize("value", [float("nan"), float("inf"), "1", True, [1]],
                         ids=["nan", "inf", "str", "bool", "list"])
def test_numbers_refuse_nan_infinity_strings_and_bools(owner, name, value):
    with pytest.raises(ValueError) as raised:
        build(owner, name, value)
    assert name in str(raised.value) and repr(value) in str(raised.value)


@pytest.mark.parametrize("owner, name", [
    field for field in NUMERIC
    if {f.name: f.type for f in dataclasses.fields(BASES[field[0]])}[field[1]] == "int"])
@pytest.mark.parametrize("value", [1.5, 2**70, 10**400], ids=["fraction", "2**70", "10**400"])
def test_whole_numbers_refuse_fractions_and_what_no_int64_holds(owner, name, value):
    with pytest.raises(ValueError, match=re.escape(name)):
        build(owner, name, value)


@pytest.mark.parametrize("owner, name", [
    field for field in FIELDS
    if {f.name: f.type for f in dataclasses.fields(BASES[field[0]])}[field[1]] == "bool"])
def test_switches_refuse_what_is_not_a_bool(owner, name):
    with pytest.raises(ValueError, match=re.escape(f"{owner}.{name} must be a bool")):
        build(owner, name, "no")


@pytest.mark.parametrize("build_it, message", [
    (lambda: Cost(flops=float("nan")), "Cost.flops must not be negative, got nan"),
    (lambda: Cost(ops=True), "Cost.ops must be a whole number, got True"),
    (lambda: Kernel("matmul", width=True), "Kernel.width must be a whole number, got True"),
    (lambda: Kernel("matmul", groups=float("nan")), "Kernel.groups must not be negative, got nan"),
    (lambda: Stage("s", ipu=True), "Stage 's': ipu must be a non-negative integer, got True"),
    (lambda: Stage("s", forward=3), "Stage 's': forward must be a Cost, got 3"),
    (lambda: Work(("s",)), "Work.stages must be a Stage, got 's'"),
    (lambda: CostModel(flops_efficiency=True), "CostModel.flops_efficiency must be a number"),
    (lambda: CostModel(sync_cycles="90"), "CostModel.sync_cycles must be a number"),
    (lambda: SystemSpec(host_link_bandwidth="fast"),
     "SystemSpec.host_link_bandwidth must be positive, got 'fast' (str, not a number)"),
    (lambda: SystemSpec(ipu="mk2"), "SystemSpec.ipu must be a IPUSpec, got 'mk2'"),
    (lambda: dataclasses.replace(MK2_GC200, clock_hz="fast"),
     "IPUSpec.clock_hz must be positive, got 'fast'"),
    (lambda: RunConfig(replicas=2**70), "RunConfig.replicas must be at most 2**63 - 1"),
    (lambda: RunConfig(io_tiles=True), "RunConfig.io_tiles must be a whole number, got True"),
    (lambda: RunConfig(training="no"), "RunConfig.training must be a bool, got 'no'"),
    (lambda: Offload(weights=1), "Offload.weights must be a bool, got 1"),
])
def test_named_gaps(build_it, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        build_it()


@pytest.mark.parametrize("steps", [True, 1.0, "2", float("nan")])
def test_run_steps_refuses_what_is_not_a_whole_number(steps):
    simulation = Simulation(BASES["Work"], RunConfig(synthetic_data=True))
    with pytest.raises(ValueError, match=re.escape(f"steps must be a positive integer, got "
                                                   f"{steps!r}")):
        simulation.run_steps(steps)
    assert simulation.steps == 0


def test_valid_values_still_pass():
    assert Cost(flops=2**70).flops == 2**70  # a float amount may be any finite size
    assert math.isfinite(IPUSpec(**{**dataclasses.asdict(MK2_GC200)}).clock_hz)
