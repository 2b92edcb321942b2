"""Behaviours PopTorch's own tests exercise, checked the way they check them:
PopTorch's exception types and words, its log lines, its private surface and
the inputs it accepts."""
import logging
import pickle
import re

import pytest
import torch
import torch.nn as nn

import poptorch_shim as poptorch
from poptorch_shim import popdist


def double(x):
    return x * 2


class TwoBlocks(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x):
        poptorch.Block.useAutoId()
        with poptorch.Block(ipu_id=0):
            x = self.a(x)
        with poptorch.Block(ipu_id=1):
            x = self.b(x)
            return x, x.sum(), poptorch.identity_loss(x ** 2, reduction="mean")


# Public API --------------------------------------------------------------------
def test_module_repr_shows_begin_blocks_and_so_does_the_wrapped_model():
    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.l1, self.l2 = nn.Linear(2, 2), nn.Linear(2, 2)

        def forward(self, x):
            return self.l2(self.l1(x))

    model = Model()
    assert "BeginBlock(" not in poptorch.module_repr(model)
    poptorch.BeginBlock(model.l1, ipu_id=1)
    text = poptorch.module_repr(model)
    assert re.search(r"\(l1\):\s*BeginBlock\(user_id=None, ipu_id=1\) Linear", text)
    assert not re.search(r"\(l2\):\s*BeginBlock", text)
    wrapped = poptorch.inferenceModel(model, poptorch.Options().deviceIterations(2))
    assert re.search(r"\(l1\):\s*BeginBlock\(user_id=None, ipu_id=1\)", repr(wrapped))


def test_begin_block_of_a_function_is_a_picklable_module_that_calls_it():
    wrapped = poptorch.BeginBlock(double, user_id="fn", ipu_id=0)
    assert isinstance(wrapped, nn.Module)
    copy = pickle.loads(pickle.dumps(wrapped))
    assert torch.equal(copy(torch.ones(2)), torch.full((2,), 2.0))


def test_max_repeat_logs_is_an_option_of_its_own():
    opts = poptorch.Options().maxRepeatLogs(None)
    assert opts.max_repeat_logs == (1 << 64) - 1
    assert poptorch.Options().maxRepeatLogs(2).toDict()["max_repeat_logs"] == 2
    assert poptorch.Options().max_repeat_logs == 4


def test_a_tensor_location_reads_by_its_popart_name():
    opts = poptorch.Options()
    opts.TensorLocations.setWeightLocation(
        poptorch.TensorLocationSettings().useOnChipStorage(False))
    assert opts.TensorLocations.location_weight["onChip"] is False
    with pytest.raises(KeyError):
        opts.TensorLocations.location_weight["useReplicatedTensorSharding"]


@pytest.mark.parametrize("call", [
    lambda opts: opts.Distributed.configureProcessId(1),
    lambda opts: opts.Distributed.configureProcessId(1, 2),
    lambda opts: opts.Distributed.disable(),
    lambda opts: opts.replicationFactor(1),
])
def test_popdist_options_refuse_the_layout_setters_whatever_their_arguments(call):
    assert popdist  # imported for its side effect on the package
    from poptorch_shim.popdist.poptorch import Options
    with pytest.raises(RuntimeError, match=r"Cannot call `.*` with popdist\.poptorch\.Options"):
        call(Options())


# Errors ---------------------------------------------------------------------------
def test_pipeline_depth_is_a_poptorch_error_in_poptorch_s_words():
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(2)
    model = poptorch.trainingModel(TwoBlocks(), opts)
    with pytest.raises(poptorch.Error, match=re.escape(
            "must be greater than or equal to the number of pipeline stages (3) when using "
            "poptorch.PipelinedExecution. Please note that a model with 2 pipeline stages in "
            "PopTorch will have an additional 1 stages when training.")) as caught:
        model(torch.randn(4, 4))
    assert isinstance(caught.value, ValueError)
    inference = poptorch.inferenceModel(TwoBlocks())
    with pytest.raises(poptorch.Error, match=re.escape(
            "poptorch.Options().deviceIterations must be greater than or equal to the number "
            "of pipeline stages (2) when using PopTorch.PipelinedExecution.")):
        inference(torch.randn(4, 4))


def test_num_io_tiles_and_an_offline_device_assert_as_poptorch_does():
    with pytest.raises(AssertionError, match="numIOTiles must be an even number between 32 "
                                             "and 192"):
        poptorch.Options().TensorLocations.numIOTiles(33)
    model = poptorch.inferenceModel(nn.Linear(2, 2), poptorch.Options().useOfflineIpuTarget())
    with pytest.raises(AssertionError, match="Trying to run a model on an offline device"):
        model(torch.ones(1, 2))


@pytest.mark.parametrize("traceable", [True, False])
def test_an_operation_after_a_block_ends_has_no_active_block(traceable):
    class Model(nn.Module):
        def forward(self, x):
            poptorch.Block.useAutoId()
            with poptorch.Block(ipu_id=0):
                x = x * 4
                if not traceable and bool(x.sum() > -1e9):   # torch.fx cannot trace it
                    x = x * 1
            return x * 4

    opts = poptorch.Options().deviceIterations(2)
    opts.setExecutionStrategy(poptorch.PipelinedExecution(poptorch.AutoStage.AutoIncrement))
    model = poptorch.inferenceModel(Model(), opts)
    with pytest.raises(poptorch.Error, match="No active Block, all the ops must belong to a "
                                             "Block"):
        model.compile(torch.randn(2, 5))


def test_a_block_started_without_a_scope_lasts_to_the_end():
    class Model(nn.Module):
        def forward(self, x):
            poptorch.Block.useAutoId()
            poptorch.Block.start(ipu_id=0)
            x = x * 4
            poptorch.Block.start(ipu_id=1)
            return x * 2

    opts = poptorch.Options().deviceIterations(2)
    model = poptorch.inferenceModel(Model(), opts)
    assert torch.equal(model(torch.ones(2, 3)), torch.full((2, 3), 8.0))


@pytest.mark.parametrize("replicas, auto_round, reserved", [(3, True, 4), (4, False, 4)])
def test_an_ipu_count_is_rounded_up_only_when_asked(replicas, auto_round, reserved, caplog):
    opts = poptorch.Options().replicationFactor(replicas).autoRoundNumIPUs(auto_round)
    model = poptorch.inferenceModel(nn.Linear(2, 2), opts)
    with caplog.at_level(logging.WARNING, logger="poptorch"):
        out = model(torch.ones(replicas, 2))
    assert out.shape == (replicas, 2)
    warned = [r.getMessage() for r in caplog.records if r.name == "poptorch"]
    if reserved != replicas:
        assert warned == [f"Reserving {reserved} IPUs when the model specifices the use of only "
                          f"{replicas}, because PopTorch must reserve a power of 2 or maximum "
                          f"of 64 IPUs per process. {reserved - replicas} will be reserved but "
                          "not used."]
    else:
        assert not warned


def test_an_ipu_count_poptorch_cannot_reserve_is_refused():
    model = poptorch.inferenceModel(nn.Linear(2, 2), poptorch.Options().replicationFactor(3))
    with pytest.raises(poptorch.Error, match=re.escape(
            "The model specifies the use of 3 IPUs, however PopTorch must reserve a minimum of 4 "
            "in order to allow the model to run, because PopTorch must reserve a power of 2 or "
            "maximum of 64 IPUs per process. Please reconfigure your model to use a different "
            "number of IPUs or set poptorch.Options().autoRoundNumIPUs(True).")):
        model(torch.ones(3, 2))


def test_the_ipus_poptorch_reserves():
    from poptorch_shim._execution.engine_config import round_up_num_ipus
    assert [round_up_num_ipus(n) for n in (1, 2, 3, 5, 8, 9, 64, 65, 128, 192)] == \
        [1, 2, 4, 8, 8, 16, 64, 128, 128, 192]


# Log lines -------------------------------------------------------------------------
@pytest.fixture
def debug_log():
    poptorch.setLogLevel("DEBUG")
    yield
    poptorch.setLogLevel("WARN")


def test_each_option_and_default_is_logged_as_poptorch_logs_it(debug_log, caplog):
    opts = poptorch.Options().replicationFactor(2).enableSyntheticData(True)
    opts.setExecutionStrategy(poptorch.ShardedExecution())
    with caplog.at_level(logging.DEBUG, logger="poptorch"):
        poptorch.inferenceModel(nn.Linear(2, 2), opts)(torch.ones(2, 2))
    lines = [r.getMessage() for r in caplog.records if r.name == "poptorch"]
    for expected in ("poptorch.Options set replication_factor to value 2",
                     "poptorch.Options set device_iterations to value 1",
                     "poptorch.Options set execution_mode to value 1",
                     "poptorch.Options set syntheticDataMode to value 2",
                     "enablePipelining set to value 0",
                     "enableReplicatedGraphs set to value 1"):
        assert expected in lines, lines


def test_a_pipeline_logs_its_stages_and_recomputation(debug_log, caplog):
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(3)
    opts._Popart.set("dotChecks", ["FINAL"])
    with caplog.at_level(logging.DEBUG, logger="poptorch"):
        poptorch.trainingModel(TwoBlocks(), opts)(torch.randn(3, 4))
    lines = [r.getMessage() for r in caplog.records if r.name == "poptorch"]
    assert "poptorch.Options set execution_mode to value 0" in lines
    assert "poptorch.Options added FINAL to dotChecks" in lines
    assert "enablePipelining set to value 1" in lines
    assert "autoRecomputation set to value pipeline" in lines
    assert ("Pipelined execution: 2 model stage(s) on 2 IPU(s), 3 pipeline stage(s) "
            "(training), recomputation on") in lines


def test_nothing_is_logged_at_the_default_level(caplog):
    with caplog.at_level(logging.DEBUG, logger="poptorch_shim"):
        poptorch.inferenceModel(nn.Linear(2, 2))(torch.ones(1, 2))
    assert not [r for r in caplog.records if r.name == "poptorch"]


# Private surface -----------------------------------------------------------------
def test_the_execution_strategy_is_readable_as_poptorch_holds_it():
    opts = poptorch.Options()
    assert isinstance(opts._execution_strategy, poptorch.PipelinedExecution)
    opts.setExecutionStrategy(poptorch.ShardedExecution())
    assert isinstance(opts._execution_strategy, poptorch.ShardedExecution)


@pytest.mark.parametrize("key, value, words", [
    ("asdfasdf", True, "Unknown bool option asdfasdf"),
    ("dotChecks", torch.empty(1, 1), "Unknown value type torch.Tensor for option dotChecks"),
])
def test_validate_options_refuses_unknown_options_and_values(key, value, words):
    opts = poptorch.Options()
    opts._Popart.set(key, value)
    with pytest.raises(poptorch.Error, match=re.escape(words)):
        poptorch.poptorch_core._validateOptions(opts.toDict())
    poptorch.poptorch_core._validateOptions(poptorch.Options().toDict())


# Inputs --------------------------------------------------------------------------
def test_identity_loss_is_the_loss_of_a_model_split_at_blocks():
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(3)
    model = TwoBlocks()
    before = model.b.weight.detach().clone()
    out, aux, loss = poptorch.trainingModel(model, opts)(torch.randn(3, 4))
    assert loss.dim() == 0 and aux.dim() == 0
    assert not torch.equal(before, model.b.weight)


class Sums(nn.Module):
    def forward(self, x, y):
        return x.sum(0, keepdim=True) + y.sum(0, keepdim=True)


def test_one_micro_batch_takes_inputs_of_different_batch_sizes():
    out = poptorch.inferenceModel(Sums())(torch.ones(2, 3), torch.ones(5, 3))
    assert torch.equal(out, torch.full((1, 3), 7.0))


def test_each_input_is_narrowed_by_its_own_first_dimension():
    """As PopTorch's _narrow_tensor: 2 micro-batches of 1 row of x and 2 of y."""
    x, y = torch.tensor([[1.0], [2.0]]), torch.tensor([[10.0], [20.0], [30.0], [40.0]])
    out = poptorch.inferenceModel(Sums(), poptorch.Options().deviceIterations(2))(x, y)
    assert out.flatten().tolist() == [1 + 10 + 20, 2 + 30 + 40]
    with pytest.raises(ValueError, match=r"the batch dimension \(3\) of the input of shape "
                                         r"\(3, 1\) must be a multiple of deviceIterations "
                                         r"\(2\) .* = 2"):
        poptorch.inferenceModel(Sums(), poptorch.Options().deviceIterations(2))(
            x, torch.ones(3, 1))


class Step(nn.Module):
    """A generation step: a step counter, then the batch (optimum-graphcore's
    decoder takes ``t`` first), or Lightning's batch and ``batch_idx``."""

    def forward(self, t, input_ids, attention_mask):
        return input_ids * attention_mask + t.reshape(-1, 1)[:1]


@pytest.mark.parametrize("iterations", [1, 4])
def test_the_micro_batch_size_is_what_most_inputs_carry(iterations):
    model = poptorch.inferenceModel(Step(), poptorch.Options().deviceIterations(iterations))
    ids = torch.ones(2 * iterations, 5, dtype=torch.long)
    out = model(torch.full((iterations,), 3), ids, ids)
    assert out.shape == (2 * iterations, 5) and model.device.work.micro_batch_size == 2


def test_float16_and_float32_operands_run_in_float32():
    class Mixed(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 3).half()

        def forward(self, x):
            return self.fc(x)

    model = Mixed()
    x = torch.randn(2, 3)
    out = poptorch.inferenceModel(model)(x)
    expected = nn.functional.linear(x, model.fc.weight.float(), model.fc.bias.float())
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("setting", [lambda opts: opts.useOfflineIpuTarget(),
                                     lambda opts: opts.useIpuModel(True)])
def test_an_offline_target_or_an_ipu_model_takes_any_ipu_count(setting):
    opts = poptorch.Options().replicationFactor(3)
    setting(opts)
    model = poptorch.inferenceModel(nn.Linear(2, 2), opts)
    model.compile(torch.ones(3, 2))
    assert model.isCompiled()


def test_validating_options_logs_the_popart_ones(debug_log, caplog):
    opts = poptorch.Options()
    opts._Popart.set("hardwareInstrumentations", {0, 1})
    opts._Popart.set("reportOptions", {"reportOptA": "A"})
    opts._Popart.set("enableOutlining", True)
    with caplog.at_level(logging.DEBUG, logger="poptorch"):
        poptorch.poptorch_core._validateOptions(opts.toDict())
    lines = [r.getMessage() for r in caplog.records if r.name == "poptorch"]
    assert {"poptorch.Options added 0 to hardwareInstrumentations",
            "poptorch.Options added 1 to hardwareInstrumentations",
            "poptorch.Options set reportOptions[reportOptA] to A",
            "poptorch.Options set enableOutlining to value true"} <= set(lines)


def test_the_pipeline_line_is_logged_at_info(caplog):
    poptorch.setLogLevel("INFO")
    try:
        opts = poptorch.Options()
        opts.Training.gradientAccumulation(3)
        with caplog.at_level(logging.INFO, logger="poptorch"):
            poptorch.trainingModel(TwoBlocks(), opts)(torch.randn(3, 4))
    finally:
        poptorch.setLogLevel("WARN")
    lines = [r.getMessage() for r in caplog.records if r.name == "poptorch"]
    assert lines == ["Pipelined execution: 2 model stage(s) on 2 IPU(s), 3 pipeline stage(s) "
                     "(training), recomputation on"]


@pytest.mark.parametrize("use_model, line", [
    (True, "From the user configuration: Ipu model: Enabled"),
    (False, "From the user configuration: Ipu model: Disabled"),
    (None, None),
])
def test_the_ipu_model_choice_is_logged_where_the_script_made_it(use_model, line, caplog):
    """PopTorch echoes useIpuModel at INFO when the script set it, even to its
    default; a script that left it alone gets no line."""
    opts = poptorch.Options()
    if use_model is not None:
        opts.useIpuModel(use_model)
    poptorch.setLogLevel("INFO")
    try:
        with caplog.at_level(logging.INFO, logger="poptorch"):
            poptorch.inferenceModel(nn.Linear(2, 2), opts)(torch.ones(1, 2))
    finally:
        poptorch.setLogLevel("WARN")
    lines = [r.getMessage() for r in caplog.records if r.name == "poptorch"]
    echoed = [text for text in lines if text.startswith("From the user configuration")]
    assert echoed == ([] if line is None else [line])


def test_each_call_logs_the_simulated_cycle_count_it_instruments(debug_log, caplog):
    model = poptorch.inferenceModel(nn.Linear(2, 2), poptorch.Options().logCycleCount(True))
    with caplog.at_level(logging.DEBUG, logger="poptorch"):
        model(torch.ones(1, 2))
        model(torch.ones(1, 2))
    counts = [r.getMessage() for r in caplog.records
              if r.getMessage().startswith("Total number of IPU cycles: ")]
    assert len(counts) == 2
    assert counts[-1] == f"Total number of IPU cycles: {model.cycleCount()}"
    assert model.cycleCount() > 0


def test_without_log_cycle_count_no_cycles_are_logged(debug_log, caplog):
    with caplog.at_level(logging.DEBUG, logger="poptorch"):
        poptorch.inferenceModel(nn.Linear(2, 2))(torch.ones(1, 2))
    assert not [r for r in caplog.records if "Total number of IPU cycles" in r.getMessage()]


def test_the_console_shows_levels_in_lower_case_as_poptorch_does(debug_log, capfd):
    poptorch.inferenceModel(nn.Linear(2, 2))(torch.ones(1, 2))
    err = capfd.readouterr().err
    line = next(text for text in err.splitlines() if "enablePipelining set to value 0" in text)
    assert re.fullmatch(r"\[\d\d:\d\d:\d\d\.\d{3}\] \[poptorch:python\] \[debug\] "
                        r"enablePipelining set to value 0", line), line


class FourBlocks(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(4))

    def forward(self, x):
        for number, layer in enumerate(self.layers):
            with poptorch.Block(f"B{number}"):
                x = layer(x)
        return x


@pytest.mark.parametrize("make, phases, stages", [
    (lambda: poptorch.ParallelPhasedExecution("B0", "B1", "B2", "B3"), 4, 2),
    (lambda: poptorch.ParallelPhasedExecution("B0", "B1", "B2", "B3")
     .sendTensorsOffChipAfterFwd(), 7, 2),
    (lambda: poptorch.SerialPhasedExecution("B0", "B1", "B2", "B3"), 4, 1),
])
def test_the_phased_strategies_log_their_phase_count(make, phases, stages, debug_log, caplog):
    """PopTorch's compiler numbers the phases as listed and logs their count
    (the highest phase + 1, 3 more when tensors go off chip) and its stages."""
    opts = poptorch.Options()
    opts.setExecutionStrategy(make())
    with caplog.at_level(logging.DEBUG, logger="poptorch"):
        poptorch.inferenceModel(FourBlocks(), opts)(torch.ones(1, 4))
    lines = [r.getMessage() for r in caplog.records if r.name == "poptorch"]
    assert f"executionPhaseSettings.phases set to value {phases}" in lines
    assert f"executionPhaseSettings.stages set to value {stages}" in lines
