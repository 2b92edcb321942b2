"""``import popart``: PopART's enums and constants with PopART's names and values,
installed by every alias mechanism beside ``poptorch``; PopART's IR refused by name."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

import poptorch_shim
from poptorch_shim import popart
from poptorch_shim._core import aliases as _aliases

ROOT = Path(__file__).resolve().parents[2]

# Values as PopART's C++ headers give them (its Python bindings expose these members).
POPART_VALUES = {
    "AccumulateOuterFragmentSchedule": {"Scheduler": 0, "Serial": 1,
                                        "OverlapCycleOptimized": 2,
                                        "OverlapMemoryOptimized": 3},
    "SubgraphCopyingStrategy": {"OnEnterAndExit": 0, "JustInTime": 1},
    "SyncPattern": {"Full": 0, "SinglePipeline": 1, "ReplicaAndLadder": 2},
    "RecomputationType": {"NoRecompute": 0, "Standard": 1, "NormOnly": 2, "Pipeline": 3,
                          "RecomputeAll": 4},
    "MergeVarUpdateType": {"Off": 0, "All": 1, "AutoLoose": 2, "AutoTight": 3},
    "VirtualGraphMode": {"Off": 0, "Manual": 1, "Auto": 2, "ExecutionPhases": 3},
    "SyntheticDataMode": {"Off": 0, "Zeros": 1, "RandomNormal": 2, "RandomUniform": 3},
    "CommGroupType": {"All": 0, "Consecutive": 1, "Orthogonal": 2, "Ungrouped": 3},
}


@pytest.mark.parametrize("name", sorted(POPART_VALUES))
def test_the_enums_have_poparts_members_and_values(name):
    members = {member.name: int(member) for member in getattr(popart, name)}
    assert members == POPART_VALUES[name]


def test_a_member_converts_to_its_int_and_prints_as_pybind_does():
    schedule = popart.AccumulateOuterFragmentSchedule.OverlapMemoryOptimized
    assert int(schedule) == 3 and schedule == 3
    assert str(schedule) == "AccumulateOuterFragmentSchedule.OverlapMemoryOptimized"
    assert popart.BatchSerializationTransformContext.Fwd is \
        popart.BatchSerializationTransformContext.Forward


@pytest.mark.parametrize("name", ["SyncPattern", "RecomputationType", "ReductionType",
                                  "MeanReductionStrategy"])
def test_enums_both_modules_define_agree_on_values(name):
    """PopTorch passes its own enums' values to PopART's options."""
    ours = {m.name: m.value for m in getattr(poptorch_shim, name)}
    theirs = {m.name: m.value for m in getattr(popart, name)}
    assert {k: v for k, v in ours.items() if k in theirs} == theirs


def test_the_options_take_the_values_libraries_pass():
    opts = poptorch_shim.Options()
    opts._Popart.set("subgraphCopyingStrategy", int(popart.SubgraphCopyingStrategy.JustInTime))
    opts._Popart.set("autoRecomputation", int(popart.RecomputationType.Pipeline))
    assert opts._Popart.options["subgraphCopyingStrategy"] == 1
    assert opts.recomputation is poptorch_shim.RecomputationType.Pipeline


def test_sync_pattern_strings_round_trip_in_poparts_spelling():
    assert popart.syncPatternToString(popart.SyncPattern.ReplicaAndLadder) == "replicaAndLadder"
    assert all(popart.syncPatternFromString(popart.syncPatternToString(p)) is p
               for p in popart.SyncPattern)
    with pytest.raises(ValueError, match="'fullPipeline'.*'full', 'singlePipeline'"):
        popart.syncPatternFromString("fullPipeline")


@pytest.mark.parametrize("name", ["Builder", "InferenceSession", "SessionOptions"])
def test_poparts_ir_is_refused_with_the_reason(name):
    with pytest.raises(AttributeError, match=f"popart.{name}: ipusim simulates PopTorch's "
                                             "programs, not PopART's IR"):
        getattr(popart, name)
    assert not hasattr(popart, name)


def test_an_unknown_name_is_an_ordinary_attribute_error():
    with pytest.raises(AttributeError, match="module 'popart' has no attribute 'Nothing'"):
        popart.Nothing  # noqa: B018


def test_the_alias_folder_makes_popart_the_shims_in_a_fresh_interpreter():
    """The folder every alias mechanism installs (runner, plugin, .pth, spawned
    workers) holds ``popart`` beside ``poptorch``."""
    assert "popart" in _aliases.NAMES
    code = ("import popart, poptorch, poptorch_shim.popart; "
            "assert popart is poptorch_shim.popart; print(popart.SyncPattern.Full)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(_aliases.ALIASES), str(ROOT)))}
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.stdout.strip() == "SyncPattern.Full", result.stderr


@pytest.mark.parametrize("key, members", [
    ("syntheticDataMode", popart.SyntheticDataMode), ("virtualGraphMode", popart.VirtualGraphMode),
    ("mergeVarUpdate", popart.MergeVarUpdateType),
    ("subgraphCopyingStrategy", popart.SubgraphCopyingStrategy),
    ("autoRecomputation", poptorch_shim.RecomputationType)])
def test_an_enum_valued_option_takes_every_member_of_its_enum_and_nothing_else(key, members):
    for member in members:
        poptorch_shim.Options()._Popart.set(key, int(member))
    beyond = max(members) + 1
    with pytest.raises(ValueError, match=rf"Options._Popart.set: {key} must be a "
                                         rf"(popart|poptorch).{members.__name__} value .*"
                                         rf"got {beyond}\."):
        poptorch_shim.Options()._Popart.set(key, beyond)


def test_random_uniform_synthetic_data_streams_nothing():
    options = poptorch_shim.Options()
    options._Popart.set("syntheticDataMode", int(popart.SyntheticDataMode.RandomUniform))
    assert options.synthetic_data   # no host copies, as with the other synthetic modes
