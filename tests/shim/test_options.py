"""Tests of poptorch_shim's Options: every setter stores its value and chains,
wrong types and values are refused with the numbers in the message, options
freeze on first use, and the read accessors other modules rely on."""
import copy
import pickle
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from poptorch_shim.enums import (
    CommGroupType,
    ConnectionType,
    HalfFloatCastingBehavior,
    MeanReductionStrategy,
    OutputMode,
    RecomputationType,
    ReductionType,
    SyncPattern,
)
from poptorch_shim.errors import FrozenOptionsError
from poptorch_shim.options import AnchorSpec, Options, TensorLocationSettings

STRATEGY = object()  # any object is accepted as an execution strategy


@dataclass
class Case:
    """Call ``path`` (e.g. "Training.gradientAccumulation") with ``args()`` and
    expect ``read(options)`` to give ``expected``."""
    path: str
    args: Callable[[], tuple]
    read: Callable[[Options], Any]
    expected: Any


SETTERS = [
    Case("deviceIterations", lambda: (4,), lambda o: o.device_iterations, 4),
    Case("replicationFactor", lambda: (2,), lambda o: o.replication_factor, 2),
    Case("inputReplicaGrouping", lambda: (2, CommGroupType.Consecutive),
         lambda o: (o.input_group_size, o.input_group_type), (2, CommGroupType.Consecutive)),
    Case("inputReplicaGrouping", lambda: (4, CommGroupType.NoGrouping),
         lambda o: (o.input_group_size, o.input_group_type), (1, CommGroupType.NoGrouping)),
    Case("outputMode", lambda: (OutputMode.All,),
         lambda o: (o.output_mode, o.output_return_period), (OutputMode.All, 1)),
    Case("outputMode", lambda: (OutputMode.EveryN, 5),
         lambda o: (o.output_mode, o.output_return_period), (OutputMode.EveryN, 5)),
    Case("outputMode", lambda: (OutputMode.Sum, 5),
         lambda o: (o.output_mode, o.output_return_period), (OutputMode.Sum, 1)),
    Case("enableSyntheticData", lambda: (True,), lambda o: o.synthetic_data, True),
    Case("setExecutionStrategy", lambda: (STRATEGY,), lambda o: o.execution_strategy, STRATEGY),
    Case("syncPattern", lambda: (SyncPattern.ReplicaAndLadder,), lambda o: o.sync_pattern,
         SyncPattern.ReplicaAndLadder),
    Case("randomSeed", lambda: (42,), lambda o: o.random_seed, 42),
    Case("logCycleCount", lambda: (True,), lambda o: o.log_cycle_count, True),
    Case("enableProfiling", lambda: ("/tmp/prof",), lambda o: o.profile_dir, "/tmp/prof"),
    Case("modelName", lambda: ("tommyflowers",), lambda o: o.model_name, "tommyflowers"),
    Case("useIpuModel", lambda: (True,), lambda o: o.use_model, True),
    Case("useIpuId", lambda: (3,), lambda o: o.ipu_id, 3),
    Case("logDir", lambda: ("/tmp/logs",), lambda o: o.log_dir, "/tmp/logs"),
    Case("autoRoundNumIPUs", lambda: (), lambda o: o.auto_round_num_ipus, True),
    Case("connectionType", lambda: (ConnectionType.OnDemand,), lambda o: o.connection_type,
         ConnectionType.OnDemand),
    Case("useOfflineIpuTarget", lambda: (1,), lambda o: (o.connection_type, o.ipu_version),
         (ConnectionType.Never, 1)),
    Case("maxRepeatLogs", lambda: (2,), lambda o: o.max_repeat_logs, 2),
    Case("broadcastBuffers", lambda: (False,), lambda o: o.broadcast_buffers, False),
    Case("setAvailableMemoryProportion", lambda: ({"IPU0": 0.5, "IPU3": 1},),
         lambda o: o.available_memory_proportion, {0: 0.5, 3: 1.0}),
    Case("enableExecutableCaching", lambda: ("/tmp/cache",),
         lambda o: (o._Popart.options["cachePath"], o._Popart.options["enableEngineCaching"]),
         ("/tmp/cache", True)),
    Case("enableExecutableCaching", lambda: (None,),
         lambda o: o._Popart.options["enableEngineCaching"], False),
    Case("enableStableNorm", lambda: (True,), lambda o: o._Popart.options["enableStableNorm"],
         True),
    Case("updatableNamedBuffers", lambda: (["cache"],),
         lambda o: (o._Popart.options["updatableNamedBuffers"], o.updatable_named_buffers),
         (["cache"], ("cache",))),
    Case("showCompilationProgressBar", lambda: (False,),
         lambda o: o.show_compilation_progress_bar, False),
    Case("relaxOptimizerAttributesChecks", lambda: (),
         lambda o: o.relax_optimizer_checks, True),
    Case("disableModuleNamescope", lambda: (), lambda o: o.module_namescope_enabled, False),
    Case("anchorTensor", lambda: ("g", "Gradient___fc.bias", OutputMode.EveryN, 2),
         lambda o: o.anchored_tensors,
         {"g": AnchorSpec("Gradient___fc.bias", OutputMode.EveryN, 2)}),
    Case("anchorTensor", lambda: ("w", "fc.weight", OutputMode.Sum, 2),
         lambda o: o.anchored_tensors, {"w": AnchorSpec("fc.weight", OutputMode.Sum, 1)}),
    Case("Training.gradientAccumulation", lambda: (8,),
         lambda o: o.Training.gradient_accumulation, 8),
    Case("Training.accumulationAndReplicationReductionType", lambda: (ReductionType.Sum,),
         lambda o: o.Training.reduction_type, ReductionType.Sum),
    Case("Training.setMeanAccumulationAndReplicationReductionStrategy",
         lambda: (MeanReductionStrategy.Running,),
         lambda o: o.Training.mean_reduction_strategy, MeanReductionStrategy.Running),
    Case("Training.setAutomaticLossScaling", lambda: (True,),
         lambda o: o.Training.automatic_loss_scaling, True),
    Case("Training.setConvolutionDithering", lambda: (True,),
         lambda o: o._Popart.options["convolutionOptions"], {"enableConvDithering": True}),
    Case("Distributed.configureProcessId", lambda: (1, 4),
         lambda o: (o.Distributed.process_id, o.Distributed.num_processes,
                    o.Distributed.processId, o.Distributed.numProcesses), (1, 4, 1, 4)),
    Case("Distributed.disable", lambda: (),
         lambda o: (o.Distributed.process_id, o.Distributed.num_processes), (0, 1)),
    Case("Distributed.setEnvVarNames", lambda: ("NO_SUCH_SIZE_VAR", "NO_SUCH_RANK_VAR"),
         lambda o: (o.Distributed.process_id, o.Distributed.num_processes), (0, 1)),
    Case("TensorLocations.numIOTiles", lambda: (64,),
         lambda o: o.TensorLocations.num_io_tiles, 64),
    Case("TensorLocations.setActivationLocation",
         lambda: (TensorLocationSettings().useOnChipStorage(False),),
         lambda o: o.TensorLocations.location("activation").on_chip, False),
    Case("TensorLocations.setWeightLocation",
         lambda: (TensorLocationSettings().useReplicatedTensorSharding(True),),
         lambda o: o.TensorLocations.location("weight").replicated_tensor_sharding, True),
    Case("TensorLocations.setOptimizerLocation",
         lambda: (TensorLocationSettings().minElementsForOffChip(16),),
         lambda o: o.TensorLocations.location("optimizer").min_elements_for_off_chip, 16),
    Case("TensorLocations.setAccumulatorLocation",
         lambda: (TensorLocationSettings().useIOTilesToLoad().useIOTilesToStore(),),
         lambda o: o.TensorLocations.location("accumulator").toDict(),
         {"useIOTilesToLoad": True, "useIOTilesToStore": True}),
    Case("Precision.setPartialsType", lambda: (torch.half,),
         lambda o: (o.Precision.partials_type, o._Popart.options["partialsTypeMatMuls"],
                    o._Popart.options["convolutionOptions"]),
         (torch.float16, "half", {"partialsType": "half"})),
    Case("Precision.enableFloatingPointExceptions", lambda: (True,),
         lambda o: o.Precision.floating_point_exceptions, True),
    Case("Precision.enableStochasticRounding", lambda: (True,),
         lambda o: o.Precision.stochastic_rounding, True),
    Case("Precision.halfFloatCasting", lambda: (HalfFloatCastingBehavior.HalfUpcastToFloat,),
         lambda o: o.Precision.half_float_casting, HalfFloatCastingBehavior.HalfUpcastToFloat),
    Case("Precision.runningStatisticsAlwaysFloat", lambda: (False,),
         lambda o: o.Precision.running_statistics_always_float, False),
    Case("Jit.traceModel", lambda: (False,), lambda o: o.Jit.trace_model, False),
    Case("_Popart.set", lambda: ("autoRecomputation", int(RecomputationType.Pipeline)),
         lambda o: o.recomputation, RecomputationType.Pipeline),
    Case("_Popart.set", lambda: ("someFuturePopartOption", [1, 2]),
         lambda o: o._Popart.options["someFuturePopartOption"], [1, 2]),
    Case("_Popart.setEngineOptions", lambda: ({"target.syncReplicasIndependently": "true"},),
         lambda o: o.engine_options, {"target.syncReplicasIndependently": "true"}),
    Case("_Popart.setPatterns", lambda: ({"PadSum": True}, 0),
         lambda o: (o._Popart.options["patterns"], o._Popart.options["patterns_level"]),
         ({"PadSum": True}, 0)),
    Case("Simulation.system", lambda: ("GC200", 8),
         lambda o: (o.Simulation.preset, o.Simulation.num_ipus, o.Simulation.overrides),
         ("gc200", 8, {})),
    Case("Simulation.system", lambda: ("mk1",), lambda o: o.Simulation.preset, "mk1"),
    Case("Simulation.costModel", lambda: (),
         lambda o: o.Simulation.cost_overrides, {}),
    Case("Simulation.loaderRate", lambda: (51_700,), lambda o: o.Simulation.loader_rate, 51_700),
    Case("Simulation.timingOnly", lambda: (True,), lambda o: o.Simulation.runs_timing_only, True),
]


def resolve(options, path):
    """The group that owns the setter at ``path`` and the bound setter."""
    *groups, method = path.split(".")
    group = options
    for name in groups:
        group = getattr(group, name)
    return group, getattr(group, method)


def case_id(case):
    return case.path


@pytest.mark.parametrize("case", SETTERS, ids=case_id)
def test_setter_stores_value_and_chains(case):
    options = Options()
    group, method = resolve(options, case.path)
    assert method(*case.args()) is group
    assert case.read(options) == case.expected


QUERIES = {"clone", "defaultOutputMode", "resolved_output_mode", "toDict", "location",
           "checkIsFrozen", "loadFromFile", "get"}
GROUPS = ["", "Training", "Distributed", "TensorLocations", "Precision", "Jit", "_Popart",
          "Simulation"]


def test_setter_table_covers_every_public_method():
    options = Options()
    listed = {case.path for case in SETTERS}
    for name in GROUPS:
        group = getattr(options, name) if name else options
        for method in dir(type(group)):
            attribute = getattr(type(group), method)
            if method.startswith("_") or not callable(attribute) or method in QUERIES:
                continue
            assert (f"{name}.{method}" if name else method) in listed, method


def test_simulation_overrides_are_stored_as_given():
    options = Options()
    options.Simulation.system("mk2", 16, clock_hz=1.2e9, host_link_bandwidth=8e9)
    options.Simulation.costModel(compute_efficiency=0.3, profile="tutorial")
    assert options.Simulation.overrides == {"clock_hz": 1.2e9, "host_link_bandwidth": 8e9}
    assert options.Simulation.cost_overrides == {"compute_efficiency": 0.3, "profile": "tutorial"}
    options.Simulation.system("mk1")
    simulation = options.Simulation
    assert (simulation.preset, simulation.num_ipus, simulation.overrides) == ("mk1", None, {})


def test_a_setter_of_several_settings_is_recorded_as_its_call():
    """A report lists ``Simulation.system("bow", 128)`` as the call's arguments, as a
    sweep spec gives them, not as whichever of its settings was stored last."""
    from poptorch_shim._run.model_reports import user_options

    options = Options()
    options.Simulation.system("bow", 128)
    options.replicationFactor(2)
    assert user_options(options) == {"replicationFactor": 2, "Simulation.system": ["bow", 128]}
    options.Simulation.system("mk2", 8, clock_hz=1.2e9)
    assert user_options(options)["Simulation.system"] == ["mk2", 8, {"clock_hz": 1.2e9}]


def test_defaults():
    options = Options()
    assert (options.device_iterations, options.replication_factor, options.input_group_size,
            options.Training.gradient_accumulation) == (1, 1, 1, 1)
    assert options.Training.reduction_type is ReductionType.Mean
    assert options.output_mode is OutputMode.Default
    assert options.sync_pattern is SyncPattern.Full
    assert options.execution_strategy is None
    assert (options.random_seed, options.model_name, options.profile_dir) == (None, None, None)
    assert (options.synthetic_data, options.log_cycle_count, options.frozen) == (False,) * 3
    assert (options.Distributed.process_id, options.Distributed.num_processes) == (0, 1)
    assert options.recomputation is RecomputationType.NoRecompute
    assert all(options.TensorLocations.location(kind) is None
               for kind in ("activation", "weight", "optimizer", "accumulator"))
    simulation = options.Simulation
    assert (simulation.preset, simulation.num_ipus, simulation.overrides,
            simulation.cost_overrides, simulation.loader_rate) == ("mk2", None, {}, {}, None)


BAD_CALLS = [
    ("deviceIterations", ("3",), TypeError,
     ["Options.deviceIterations", "device_iterations", "'3'", "int"]),
    ("deviceIterations", (0,), ValueError, ["device_iterations", ">= 1", "got 0"]),
    ("deviceIterations", (True,), TypeError, ["device_iterations", "True"]),
    ("deviceIterations", (2.0,), TypeError, ["device_iterations", "2.0"]),
    ("replicationFactor", (-2,), ValueError, ["replication_factor", "got -2"]),
    ("inputReplicaGrouping", (0, CommGroupType.Consecutive), ValueError,
     ["input_group_size", "got 0"]),
    ("inputReplicaGrouping", (2, CommGroupType.All), ValueError,
     ["CommGroupType.All", "Consecutive"]),
    ("inputReplicaGrouping", (2, 1), TypeError, ["input_group_type", "CommGroupType"]),
    ("outputMode", ("All",), TypeError, ["output_mode", "OutputMode", "'All'"]),
    ("outputMode", (OutputMode.EveryN,), ValueError, ["EveryN", "output_return_period"]),
    ("outputMode", (OutputMode.EveryN, 0), ValueError, ["output_return_period", "got 0"]),
    ("syncPattern", (1,), TypeError, ["sync_pattern", "SinglePipeline"]),
    ("randomSeed", ("1",), TypeError, ["random_seed", "'1'"]),
    ("useIpuId", (-1,), ValueError, ["ipu_id", "got -1"]),
    ("useIpuModel", ("yes",), TypeError, ["use_model", "bool"]),
    ("modelName", (3,), TypeError, ["model_name", "str"]),
    ("enableSyntheticData", (1,), TypeError, ["enabled", "bool"]),
    ("enableProfiling", (3,), TypeError, ["profile_dir", "3"]),
    ("Training.gradientAccumulation", (0,), ValueError, ["gradient_accumulation", "got 0"]),
    ("Training.accumulationAndReplicationReductionType", (ReductionType.NoReduction,),
     ValueError, ["ReductionType.Mean", "ReductionType.Sum"]),
    ("Distributed.configureProcessId", (4, 4), ValueError,
     ["process_id=4", "num_processes=4", "0 to 3"]),
    ("Distributed.configureProcessId", (0, 0), ValueError, ["num_processes", "got 0"]),
    ("TensorLocations.numIOTiles", (33,), AssertionError, ["even", "32 and 192", "33"]),
    ("TensorLocations.numIOTiles", (194,), AssertionError, ["194"]),
    ("TensorLocations.setWeightLocation", ({"onChip": False},), TypeError,
     ["setWeightLocation", "TensorLocationSettings"]),
    ("TensorLocations.location", ("weights",), ValueError, ["'weights'", "weight"]),
    ("Precision.setPartialsType", (torch.int32,), ValueError, ["torch.float", "torch.int32"]),
    ("Precision.enableStochasticRounding", ("on",), TypeError, ["enabled", "'on'"]),
    ("_Popart.set", ("syntheticDataMode", 5), ValueError, ["syntheticDataMode", "got 5"]),
    ("_Popart.set", ("autoRecomputation", 9), ValueError,
     ["autoRecomputation", "Pipeline", "got 9"]),
    ("_Popart.set", ("engineOptions", {"autoReport.all": True}), TypeError, ["strings", "True"]),
    ("_Popart.set", ("instrumentWithHardwareCycleCounter", 1), TypeError, ["bool", "got 1"]),
    ("Simulation.system", ("mk3",), ValueError, ["'mk3'", "mk2", "gc2", "bow"]),
    ("Simulation.system", ("mk2", 0), ValueError, ["num_ipus", "got 0"]),
    ("Simulation.loaderRate", (0,), ValueError, ["items_per_second", "got 0"]),
    ("Simulation.loaderRate", ("fast",), TypeError, ["loader_rate", "'fast'"]),
    ("Simulation.timingOnly", ("yes",), TypeError, ["timing_only", "'yes'"]),
]


@pytest.mark.parametrize("path, args, error, fragments", BAD_CALLS,
                         ids=[f"{c[0]}{c[1]!r}" for c in BAD_CALLS])
def test_bad_value_is_refused_with_the_value_in_the_message(path, args, error, fragments):
    options = Options()
    before = options.toDict()
    _, method = resolve(options, path)
    with pytest.raises(error) as raised:
        method(*args)
    for fragment in fragments:
        assert fragment in str(raised.value)
    assert options.toDict() == before, "a refused call must change nothing"


def test_simulation_override_must_be_plain_data():
    with pytest.raises(TypeError, match=r"override clock_hz must be a number or a str, got \[1\]"):
        Options().Simulation.system("mk2", clock_hz=[1])


def test_tensor_location_settings_checks_its_values():
    with pytest.raises(ValueError, match="min_elements_for_off_chip must be >= 0, got -1"):
        TensorLocationSettings().minElementsForOffChip(-1)
    with pytest.raises(TypeError, match="on_chip must be a bool"):
        TensorLocationSettings().useOnChipStorage("no")
    assert TensorLocationSettings().useOnChipStorage(True).useOnChipStorage(None).toDict() == {}


def test_tensor_location_is_copied_when_set():
    settings = TensorLocationSettings().useOnChipStorage(False)
    options = Options()
    options.TensorLocations.setWeightLocation(settings)
    settings.useOnChipStorage(True)
    assert options.TensorLocations.location("weight").on_chip is False


@pytest.mark.parametrize("name, fragments", [
    ("deviceIteration", ["'deviceIteration'", "Did you mean 'deviceIterations'"]),
    ("replicationfactor", ["'replicationfactor'", "Did you mean"]),
    ("devce_iterations", ["'devce_iterations'", "Did you mean 'device_iterations'"]),
])
def test_unknown_attribute_is_named(name, fragments):
    with pytest.raises(AttributeError) as raised:
        getattr(Options(), name)
    for fragment in fragments:
        assert fragment in str(raised.value)


def test_unknown_attribute_of_a_group_is_named():
    with pytest.raises(AttributeError, match="Options.Training has no option or method "
                                             "'gradientAcumulation'. Did you mean "
                                             "'gradientAccumulation'"):
        Options().Training.gradientAcumulation(4)


@pytest.mark.parametrize("name, value, fragment", [
    ("replication_factor", 4, "call Options.replicationFactor(...)"),
    ("deviceIterations", 4, "it is a method"),
    ("Training", None, "read-only"),
    ("replicas", 4, "has no option or method 'replicas'"),
])
def test_attributes_cannot_be_assigned(name, value, fragment):
    options = Options()
    with pytest.raises(AttributeError) as raised:
        setattr(options, name, value)
    assert fragment in str(raised.value)
    assert options.replication_factor == 1


@pytest.mark.parametrize("case", SETTERS, ids=case_id)
def test_every_setter_refuses_after_freeze(case):
    options = Options()
    options._freeze()
    before = options.toDict()
    _, method = resolve(options, case.path)
    with pytest.raises(FrozenOptionsError) as raised:
        method(*case.args())
    message = str(raised.value)
    assert message.startswith("Can't modify frozen Options")
    assert f"Options.{case.path}()" in message
    assert isinstance(raised.value, AttributeError)  # the type PopTorch raises
    assert options.toDict() == before


def test_frozen_check_comes_before_argument_checks():
    options = Options()
    options._freeze()
    with pytest.raises(FrozenOptionsError, match="Options.deviceIterations"):
        options.deviceIterations("not even an int")


def test_freeze_reaches_stored_tensor_locations_and_internal_set():
    options = Options()
    options.TensorLocations.setWeightLocation(TensorLocationSettings())
    options._freeze()
    assert options.frozen and options.Training.frozen and options._Popart.frozen
    with pytest.raises(FrozenOptionsError, match="TensorLocationSettings.useOnChipStorage"):
        options.TensorLocations.location("weight").useOnChipStorage(False)
    with pytest.raises(FrozenOptionsError, match="Options.replicationFactor"):
        options._set("replication_factor", 2)


@pytest.mark.parametrize("copier", [Options.clone, copy.deepcopy], ids=["clone", "deepcopy"])
def test_copy_of_frozen_options_is_unfrozen_and_independent(copier):
    options = Options().deviceIterations(4)
    options.TensorLocations.setWeightLocation(TensorLocationSettings())
    options._freeze()
    copied = copier(options)
    assert not copied.frozen
    assert copied.Precision._popart is copied._Popart  # groups still share PopART options
    copied.deviceIterations(8).Training.gradientAccumulation(2)
    copied.TensorLocations.location("weight").useOnChipStorage(False)
    copied._Popart.set("autoRecomputation", 3)
    assert (options.device_iterations, options.Training.gradient_accumulation) == (4, 1)
    assert options.TensorLocations.location("weight").on_chip is None
    assert options.recomputation is RecomputationType.NoRecompute
    assert options.frozen


def test_freeze_checks_input_group_size_divides_replication_factor():
    options = Options().replicationFactor(4).inputReplicaGrouping(3, CommGroupType.Orthogonal)
    with pytest.raises(ValueError, match=r"input_group_size \(3\) must divide "
                                         r"replication_factor \(4\)"):
        options._freeze()
    assert not options.frozen
    options.inputReplicaGrouping(2, CommGroupType.Orthogonal)._freeze()
    assert options.frozen


def test_to_dict_holds_every_setting_as_a_copy():
    options = Options().deviceIterations(50).replicationFactor(4)
    options.Training.gradientAccumulation(8)
    options.Distributed.configureProcessId(2, 4)
    options.TensorLocations.setOptimizerLocation(TensorLocationSettings().useOnChipStorage(False))
    options.setExecutionStrategy(STRATEGY).enableSyntheticData(True)
    options._Popart.set("engineOptions", {"autoReport.all": "true"})
    options.Simulation.system("bow", 4, clock_hz=1.85e9).loaderRate(1000.0)
    flat = options.toDict()
    expected = {"device_iterations": 50, "replication_factor": 4, "gradient_accumulation": 8,
                "process_id": 2, "num_processes": 4, "location_optimizer": {"onChip": False},
                "location_weight": None, "syntheticDataMode": 2,
                "engineOptions": {"autoReport.all": "true"}, "output_mode": OutputMode.Default,
                "sim_preset": "bow", "sim_num_ipus": 4, "sim_overrides": {"clock_hz": 1.85e9},
                "sim_loader_rate": 1000.0}
    assert {key: flat[key] for key in expected} == expected
    assert "execution_strategy" not in flat
    flat["engineOptions"]["autoReport.all"] = "false"
    flat["sim_overrides"]["clock_hz"] = 0
    assert options.engine_options == {"autoReport.all": "true"}
    assert options.Simulation.overrides == {"clock_hz": 1.85e9}


@pytest.mark.parametrize("round_trip", [Options.clone, lambda o: pickle.loads(pickle.dumps(o))],
                         ids=["clone", "pickle"])
def test_to_dict_survives_a_round_trip(round_trip):
    options = Options().deviceIterations(3).outputMode(OutputMode.EveryN, 3)
    options.Training.accumulationAndReplicationReductionType(ReductionType.Sum)
    options.Precision.setPartialsType(torch.float)
    options._Popart.set("autoRecomputation", 3)
    assert round_trip(options).toDict() == options.toDict()


def test_pickled_frozen_options_stay_frozen():
    options = Options()
    options._freeze()
    assert pickle.loads(pickle.dumps(options)).frozen


def test_repr_shows_every_setting_as_poptorch_does():
    """PopTorch prints every value, defaults included, then every group; two
    options print alike exactly when their settings agree."""
    assert repr(Options()) == repr(Options())
    options = Options().replicationFactor(4).outputMode(OutputMode.All)
    options.Training.gradientAccumulation(8)
    options.TensorLocations.setWeightLocation(TensorLocationSettings().useOnChipStorage(False))
    text = repr(options)
    assert text.startswith("Options(") and f"{id(options):x}" not in text
    for fragment in ["replication_factor=4", "output_mode=OutputMode.All", "device_iterations=1",
                     "Training=_TrainingOptions(gradient_accumulation=8,",
                     "Distributed=_DistributedOptions(process_id=0, num_processes=1)",
                     "location_weight=TensorLocationSettings(", "on_chip=False"]:
        assert fragment in text, fragment
    assert repr(Options()) != text


@pytest.mark.parametrize("mode, training, expected", [
    (None, True, OutputMode.Final),
    (None, False, OutputMode.All),
    (OutputMode.Default, True, OutputMode.Final),
    (OutputMode.Sum, True, OutputMode.Sum),
    (OutputMode.All, True, OutputMode.All),
    (OutputMode.Final, False, OutputMode.Final),
])
def test_default_output_mode_resolves_by_model_kind(mode, training, expected):
    options = Options()
    if mode is not None:
        options.outputMode(mode)
    assert options.defaultOutputMode() == (mode in (None, OutputMode.Default))
    assert options.resolved_output_mode(training) is expected


def test_distributed_reads_openmpi_variables_at_construction(monkeypatch):
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "3")
    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "4")
    options = Options()
    assert (options.Distributed.processId, options.Distributed.numProcesses) == (3, 4)
    options.Distributed.disable()
    assert (options.Distributed.process_id, options.Distributed.num_processes) == (0, 1)


def test_distributed_env_var_names(monkeypatch):
    monkeypatch.setenv("MY_RANK", "1")
    monkeypatch.setenv("MY_SIZE", "2")
    options = Options()
    assert options.Distributed.setEnvVarNames("MY_SIZE", "MY_RANK") is options.Distributed
    assert (options.Distributed.process_id, options.Distributed.num_processes) == (1, 2)
    monkeypatch.setenv("MY_SIZE", "two")
    with pytest.raises(ValueError, match="MY_SIZE must hold an integer, got 'two'"):
        options.Distributed.setEnvVarNames("MY_SIZE", "MY_RANK")


def test_profile_dir_from_enable_profiling(tmp_path):
    options = Options().enableProfiling(str(tmp_path))
    assert options.profile_dir == str(tmp_path)
    assert options.engine_options["autoReport.all"] == "true"
    assert Options().enableProfiling().profile_dir == "."


def test_profile_dir_from_popart_engine_options(tmp_path):
    options = Options()
    options._Popart.set("engineOptions", {"autoReport.all": "true",
                                          "autoReport.directory": str(tmp_path)})
    assert options.profile_dir == str(tmp_path)


def test_profile_dir_from_deprecated_popart_alias(tmp_path):
    options = Options()
    with pytest.warns(DeprecationWarning, match="_Popart"):
        options.Popart.set("engineOptions", {"autoReport.all": "true",
                                             "autoReport.directory": str(tmp_path)})
    assert options.profile_dir == str(tmp_path)


def test_profile_dir_is_none_unless_auto_report_all_is_true(tmp_path):
    options = Options()
    options._Popart.setEngineOptions({"autoReport.all": "false",
                                      "autoReport.directory": str(tmp_path)})
    assert options.profile_dir is None


def test_poplar_engine_options_variable_overrides(monkeypatch, tmp_path):
    options = Options().enableProfiling("/somewhere/else")
    monkeypatch.setenv("POPLAR_ENGINE_OPTIONS",
                       f'{{"autoReport.all": "true", "autoReport.directory": "{tmp_path}"}}')
    assert options.profile_dir == str(tmp_path)
    monkeypatch.setenv("POPLAR_ENGINE_OPTIONS", "{autoReport")
    with pytest.raises(ValueError, match="POPLAR_ENGINE_OPTIONS must hold a JSON object"):
        options.profile_dir


def test_random_seed_also_seeds_torch():
    Options().randomSeed(7)
    first = torch.rand(3)
    torch.manual_seed(7)
    assert torch.equal(first, torch.rand(3))


def test_deprecated_popart_alias_is_the_same_group():
    options = Options()
    with pytest.warns(DeprecationWarning):
        assert options.Popart is options._Popart


class PopdistLikeOptions(Options):
    """What popdist.poptorch.Options does: values come from the environment,
    the public setters refuse."""

    def __init__(self, local_replicas):
        super().__init__()
        self._set("replication_factor", local_replicas)
        self.Distributed._set("num_processes", 4)
        self.Distributed._set("process_id", 1)

    def replicationFactor(self, replication_factor):
        raise RuntimeError("Cannot call replicationFactor with popdist.poptorch.Options")


def test_subclass_can_override_setters_and_store_internally():
    options = PopdistLikeOptions(2)
    assert options.replication_factor == 2
    assert (options.Distributed.process_id, options.Distributed.num_processes) == (1, 4)
    with pytest.raises(RuntimeError, match="Cannot call replicationFactor with "
                                           "popdist.poptorch.Options"):
        options.replicationFactor(2)
    assert options.deviceIterations(3) is options
    clone = options.clone()
    assert type(clone) is PopdistLikeOptions and clone.replication_factor == 2
    with pytest.raises(TypeError, match="replication_factor must be an int"):
        options._set("replication_factor", "2")


def test_distributed_group_class_can_be_swapped():
    """popdist wraps the Distributed group by changing its class."""

    class _Distributed(type(Options().Distributed)):
        def configureProcessId(self, process_id, num_processes):
            raise RuntimeError("Cannot call Distributed.configureProcessId with "
                               "popdist.poptorch.Options")

    options = Options()
    options.Distributed.__class__ = _Distributed
    with pytest.raises(RuntimeError, match="configureProcessId"):
        options.Distributed.configureProcessId(0, 2)
    assert options.Distributed.num_processes == 1


def test_a_misspelt_option_is_hinted_once_in_the_traceback():
    """Python adds its own "Did you mean" to an AttributeError's traceback;
    the options' message has one already."""
    script = "import poptorch_shim as p\np.Options().deviceIteration(2)\n"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=120)
    last = result.stderr.strip().splitlines()[-1]
    assert last.count("Did you mean") == 1 and "'deviceIterations'" in last, last


@pytest.mark.parametrize("guess", ["engineOptions", "setEngineOptions"])
def test_a_guess_at_setting_engine_options_says_where_they_are_set(guess):
    with pytest.raises(AttributeError, match=r"set with opts\._Popart\.setEngineOptions"):
        getattr(Options(), guess)({"autoReport.all": "true"})
