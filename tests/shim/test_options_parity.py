"""Options as PopTorch has them: loadFromFile, POPTORCH_DEFAULT_OPTIONS, the
getters for what the setters set, copies, checkIsFrozen, popdist's toDict,
and a misspelt name hinted once wherever it is misspelt."""
import copy
import traceback

import pytest
import torch

import poptorch_shim as poptorch
from poptorch_shim import ConnectionType, MeanReductionStrategy, OutputMode, ReductionType
from poptorch_shim.options import ConfigFileError
from poptorch_shim.popdist.poptorch import Options as PopdistOptions


# loadFromFile -------------------------------------------------------------------
def test_load_from_file_runs_each_line_as_a_setter(tmp_path):
    path = tmp_path / "ipu.conf"
    path.write_text("deviceIterations(4)\n"
                    "setExecutionStrategy(poptorch.ShardedExecution())\n"
                    "  replicationFactor(2)\n"
                    " \n"
                    "Training.gradientAccumulation(3)  # inline comments are ignored\n"
                    "# comments are ignored\n"
                    "outputMode(poptorch.OutputMode.Sum)\n")
    opts = poptorch.Options().loadFromFile(str(path))
    assert (opts.device_iterations, opts.replication_factor) == (4, 2)
    assert opts.Training.gradient_accumulation == 3 and opts.output_mode is OutputMode.Sum
    assert type(opts.execution_strategy).__name__ == "ShardedExecution"
    override = tmp_path / "override.conf"
    override.write_text("deviceIterations(1)\n")
    opts.loadFromFile(str(override))
    assert (opts.device_iterations, opts.replication_factor) == (1, 2)


def test_a_malformed_line_names_its_line_and_file(tmp_path):
    path = tmp_path / "tmp.conf"
    path.write_text("deviceIterations(1)\n\n# a comment\noutputMode(poptorch.OutputMode.All\n")
    with pytest.raises(ConfigFileError) as caught:
        poptorch.Options().loadFromFile(str(path))
    message = str(caught.value)
    assert message.startswith("SyntaxError at line 4 of tmp.conf: ")
    assert message.endswith("\n> options.outputMode(poptorch.OutputMode.All")


def test_a_wrong_value_in_a_file_is_the_setter_s_own_error(tmp_path):
    path = tmp_path / "bad.conf"
    path.write_text("deviceIterations(0)\n")
    with pytest.raises(ValueError, match="device_iterations must be >= 1, got 0"):
        poptorch.Options().loadFromFile(str(path))


# POPTORCH_DEFAULT_OPTIONS ---------------------------------------------------------
def test_default_options_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("POPTORCH_DEFAULT_OPTIONS",
                       '{"deviceIterations": 2, "replicationFactor": 1, '
                       f'"logDir": "{tmp_path}", "enableSyntheticData": true, '
                       '"Precision.enableFloatingPointExceptions": true, '
                       '"connectionType": "ConnectionType.OnDemand", '
                       '"_Popart.set": ["saveInitializersToFile", "my_file.onnx"]}')
    from_env = poptorch.Options()
    monkeypatch.delenv("POPTORCH_DEFAULT_OPTIONS")
    by_hand = poptorch.Options().deviceIterations(2).replicationFactor(1).logDir(str(tmp_path))
    by_hand.enableSyntheticData(True).connectionType(ConnectionType.OnDemand)
    by_hand.Precision.enableFloatingPointExceptions(True)
    by_hand._Popart.set("saveInitializersToFile", "my_file.onnx")
    assert repr(from_env) == repr(by_hand) != repr(poptorch.Options())


def test_the_script_overrides_the_environment(monkeypatch):
    monkeypatch.setenv("POPTORCH_DEFAULT_OPTIONS", '{"deviceIterations": 8}')
    assert poptorch.Options().deviceIterations(2).device_iterations == 2
    assert PopdistOptions().device_iterations == 8


@pytest.mark.parametrize("text, fragment", [
    ("{deviceIterations: 2}", "must hold a JSON object"),
    ('[["deviceIterations", 2]]', "must hold a JSON object mapping setters"),
    ('{"deviceIteration": 2}', "'deviceIteration' names no setter: .*Did you mean "
                               "'deviceIterations'"),
    ('{"device_iterations": 2}', "'device_iterations' is not a setter"),
    ('{"connectionType": "ConnectionType.Sometimes"}', "'ConnectionType.Sometimes' is not a "
                                                       "member of poptorch.ConnectionType"),
    ('{"deviceIterations": "4"}', "device_iterations must be an int"),
])
def test_bad_default_options_are_named(monkeypatch, text, fragment):
    monkeypatch.setenv("POPTORCH_DEFAULT_OPTIONS", text)
    with pytest.raises((ValueError, TypeError), match=fragment):
        poptorch.Options()


# Getters ------------------------------------------------------------------------
def test_getters_under_poptorch_s_names():
    opts = poptorch.Options()
    assert (opts.log_dir, opts.auto_round_num_ipus, opts.connection_type) == \
        (".", False, ConnectionType.Always)
    assert opts.anchored_tensors == {} and opts.broadcast_buffers
    training = opts.Training
    assert training.meanAccumulationAndReplicationReductionStrategy is MeanReductionStrategy.Post
    training.setMeanAccumulationAndReplicationReductionStrategy(MeanReductionStrategy.Running)
    training.accumulationAndReplicationReductionType(ReductionType.Sum)
    assert training.meanAccumulationAndReplicationReductionStrategy is \
        MeanReductionStrategy.Running
    assert training.accumulation_and_replication_reduction_type is ReductionType.Sum
    training.setAutomaticLossScaling(True)
    assert training.automatic_loss_scaling
    opts.Distributed.configureProcessId(5, 15)
    assert (opts.Distributed.distributed_process_id,
            opts.Distributed.num_distributed_processes) == (5, 15)


# Copies and freezing ----------------------------------------------------------------
def populated():
    opts = poptorch.Options().deviceIterations(5)
    opts.Distributed.configureProcessId(5, 15)
    opts.anchorTensor("t1", "tensor1", OutputMode.EveryN, 2)
    opts._Popart.set("dummyKey", 5)
    opts.Training.gradientAccumulation(4)
    opts.TensorLocations.setWeightLocation(poptorch.TensorLocationSettings().useOnChipStorage())
    return opts


@pytest.mark.parametrize("copier", [poptorch.Options.clone, copy.deepcopy],
                         ids=["clone", "deepcopy"])
def test_deep_copies_are_independent_and_unfrozen(copier):
    opts = populated()
    opts._freeze()
    twin = copier(opts)
    twin.deviceIterations(4).anchorTensor("t2", "tensor2", OutputMode.Final)
    twin.Distributed.configureProcessId(2, 15)
    twin._Popart.set("dummyKey", 6)
    twin.TensorLocations.setWeightLocation(
        poptorch.TensorLocationSettings().useOnChipStorage(False))
    assert opts.device_iterations == 5 and list(opts.anchored_tensors) == ["t1"]
    assert opts.Distributed.processId == 5 and opts._Popart.options["dummyKey"] == 5
    assert opts.TensorLocations.location("weight").on_chip
    assert twin.Training.gradient_accumulation == 4 and list(twin.anchored_tensors) == ["t1", "t2"]
    assert opts.frozen and not twin.frozen


def test_a_shallow_copy_shares_its_settings_as_in_poptorch():
    opts = populated()
    alias = copy.copy(opts)
    alias.deviceIterations(7)
    alias.Training.gradientAccumulation(2)
    assert (opts.device_iterations, opts.Training.gradient_accumulation) == (7, 2)


def test_check_is_frozen_raises_once_used():
    opts = poptorch.Options()
    opts.checkIsFrozen()
    opts.Training.checkIsFrozen()
    poptorch.inferenceModel(torch.nn.Linear(2, 2), opts)
    for group in (opts, opts.Training, opts._Popart):
        with pytest.raises(AttributeError, match="Can't modify frozen Options"):
            group.checkIsFrozen()


def test_popdist_options_to_dict_and_check_is_frozen():
    opts = PopdistOptions().deviceIterations(3)
    flat = opts.toDict()
    assert flat["device_iterations"] == 3 and flat["replication_factor"] == 1
    assert (flat["process_id"], flat["num_processes"]) == (0, 1)
    opts.checkIsFrozen()
    opts._freeze()
    with pytest.raises(AttributeError, match="Can't modify frozen Options"):
        opts.checkIsFrozen()


# One hint per misspelling -------------------------------------------------------------
@pytest.mark.parametrize("misspell, expected", [
    (lambda: poptorch.Options().deviceIteration, "deviceIterations"),
    (lambda: poptorch.Options().Training.gradientAcumulation(2), "gradientAccumulation"),
    (lambda: poptorch.Options().Precision.setPartialType, "setPartialsType"),
    (lambda: poptorch.Options().Distributed.processID, "processId"),
    (lambda: poptorch.TensorLocationSettings().useOnChipStorag, "useOnChipStorage"),
    (lambda: PopdistOptions().deviceIteration, "deviceIterations"),
    (lambda: setattr(poptorch.Options(), "deviceIteration", 2), "deviceIterations"),
    (lambda: poptorch.inferenceModel(torch.nn.Linear(2, 2)).getTensorName, "getTensorNames"),
], ids=["options", "training", "precision", "distributed", "tensor-location", "popdist",
        "assignment", "model"])
def test_a_misspelt_name_is_hinted_once(misspell, expected):
    with pytest.raises(AttributeError) as caught:
        misspell()
    shown = traceback.format_exception(caught.value)[-1]
    assert shown.count("Did you mean") == 1 and f"'{expected}'" in shown, shown


# PopTorch's wording, where users search for it ----------------------------------------
@pytest.mark.parametrize("call, phrase", [
    (lambda: poptorch.Options().outputMode(OutputMode.EveryN),
     "EveryN anchor must have output_return_period set to valid positive integer"),
    (lambda: poptorch.Options().Precision.setPartialsType(torch.int8),
     "parameter to setPartialsType should be either torch.float or torch.half"),
    (lambda: poptorch.Phase(poptorch.Stage("A"), poptorch.Stage("B")).ipus(0),
     "Phase contains 2 stages but you provided 1 ipus"),
    (lambda: poptorch.Options().Training.accumulationAndReplicationReductionType(
        ReductionType.NoReduction),
     "accumulationAndReplicationReductionType must be set to poptorch.ReductionType.Mean or "
     "poptorch.ReductionType.Sum"),
])
def test_option_errors_carry_poptorch_s_phrase(call, phrase):
    with pytest.raises(ValueError) as caught:
        call()
    assert phrase in str(caught.value)


def test_a_model_keeps_its_own_copy_of_the_options():
    """As PopTorch does: one Options serves a training and an inference model,
    each resolving the Default output mode in its own copy."""
    opts = poptorch.Options().deviceIterations(2)
    training = poptorch.trainingModel(torch.nn.Linear(2, 2), opts)
    inference = poptorch.inferenceModel(torch.nn.Linear(2, 2), opts)
    assert opts.defaultOutputMode() and opts.frozen
    assert training.options.output_mode is OutputMode.Final
    assert inference.options.output_mode is OutputMode.All
    assert training.options is not opts and training.options.device_iterations == 2
    assert training.options.frozen


def test_available_memory_proportion_keys_name_ipus():
    with pytest.raises(ValueError, match=r"Available memory proportions are expected to be in a "
                                         r"dictionary of \{\"IPU0\": 0.5\} .* Invalid key: 0"):
        poptorch.Options().setAvailableMemoryProportion({0: 0.5})
    with pytest.raises(ValueError, match=r"proportion of IPU1 must be in \(0, 1\], got 1.5"):
        poptorch.Options().setAvailableMemoryProportion({"IPU1": 1.5})


def test_the_cache_directory_comes_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("POPTORCH_CACHE_DIR", str(tmp_path))
    popart = poptorch.Options()._Popart.options
    assert (popart["cachePath"], popart["enableEngineCaching"]) == (str(tmp_path), True)


@pytest.mark.parametrize("accum_type, combined, training, expected", [
    (torch.float32, False, True, MeanReductionStrategy.Post),
    (torch.float16, False, True, MeanReductionStrategy.Running),
    (torch.float16, True, True, MeanReductionStrategy.Post),   # combined: Post only
    (None, False, True, MeanReductionStrategy.Post),
    (None, False, False, MeanReductionStrategy.Post),
])
def test_mean_reduction_strategy_follows_the_optimizer(accum_type, combined, training,
                                                       expected):
    net = torch.nn.Linear(2, 1)
    opts = poptorch.Options()
    if training:
        optimizer = poptorch.optim.SGD(net.parameters(), lr=0.01, accum_type=accum_type,
                                       use_combined_accum=combined)
        model = poptorch.trainingModel(net, opts, optimizer)
    else:
        model = poptorch.inferenceModel(net, opts)
    assert model.options.Training.meanAccumulationAndReplicationReductionStrategy is expected
    assert opts.Training.meanAccumulationAndReplicationReductionStrategy is \
        MeanReductionStrategy.Post   # the user's options are left alone


def test_a_half_accumulating_optimizer_after_compiling_is_refused():
    class Summed(torch.nn.Linear):
        def forward(self, x):
            return super().forward(x).sum()

    net = Summed(2, 1)
    model = poptorch.trainingModel(net, poptorch.Options(),
                                   poptorch.optim.Adam(net.parameters(), lr=0.01))
    model.compile(torch.ones(2, 2))
    with pytest.raises(ValueError, match="Invalid optimizer: the new optimizer would require "
                                         "changing options.Training.meanAccumulation"):
        model.setOptimizer(poptorch.optim.Adam(net.parameters(), lr=0.01,
                                               accum_type=torch.float16))
