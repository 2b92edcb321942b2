"""PopTorch's helpers and error classes: poptorch.Error and its family,
setLogLevel, isRunningOnIpu, custom argument parsers, Liveness on phased
strategies, Blocks with any hashable id, and the errors PopTorch's checks
raise, in its words."""
import logging
import os
import subprocess
import sys

import pytest
import torch

import poptorch_shim as poptorch
from poptorch_shim.popdist.poptorch import Options as PopdistOptions


class Adder(torch.nn.Module):
    """PopTorch's own isRunningOnIpu example: x + y on the IPU, x * y on the CPU."""

    def forward(self, x, y):
        return x + y if poptorch.isRunningOnIpu() else x * y


# Errors ----------------------------------------------------------------------
def test_error_family_is_poptorch_core_s():
    assert poptorch.Error is poptorch.poptorch_core.Error
    assert issubclass(poptorch.RecoverableError, poptorch.Error)
    assert issubclass(poptorch.UnrecoverableError, poptorch.Error)
    error = poptorch.RecoverableError("link lost", "IPU_RESET")
    assert (error.message, error.recovery_action, error.location) == ("link lost", "IPU_RESET", "")
    assert str(poptorch.Error("bad")) == "'poptorch_py_error': bad"


def test_checks_raise_poptorch_error_with_message_and_type():
    model = poptorch.inferenceModel(Adder())
    with pytest.raises(poptorch.Error) as caught:
        model.copyWeightsToHost()
    assert caught.value.message == "Model has not been compiled or has been destroyed."
    assert caught.value.type == "poptorch_py_error"
    assert isinstance(caught.value, RuntimeError)   # what the shim raised before


@pytest.mark.parametrize("strategy, pipelined", [
    (None, True), (poptorch.PipelinedExecution("A"), True),
    (poptorch.ShardedExecution("A"), False)])
def test_inference_gradient_accumulation_in_poptorch_s_words(strategy, pipelined):
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(4)
    if strategy is not None:
        opts.setExecutionStrategy(strategy)
    with pytest.raises(poptorch.Error) as caught:
        poptorch.inferenceModel(Adder(), opts)
    message = str(caught.value)
    assert ("You must set poptorch.Options().Training.gradientAccumulation to 1 or leave it as "
            "its default value (1) when running a poptorch.inferenceModel().") in message
    assert ("Use poptorch.Options().deviceIterations" in message) == pipelined
    assert "gradientAccumulation(4)" in message


def test_options_of_the_wrong_type_are_refused():
    with pytest.raises(poptorch.Error, match="Invalid type: 'options' is of type .*dict.* "
                                             r"\(Expected poptorch.Options\)"):
        poptorch.inferenceModel(Adder(), {"deviceIterations": 2})


def test_popdist_refusals_quote_the_method():
    with pytest.raises(RuntimeError, match=r"^Cannot call `useIpuId` with "
                                           r"popdist\.poptorch\.Options"):
        PopdistOptions().useIpuId(1)


# Offline and on-demand connections ---------------------------------------------
def test_an_offline_model_compiles_but_does_not_run():
    model = poptorch.inferenceModel(Adder(), poptorch.Options().useOfflineIpuTarget())
    model.compile(torch.ones(2), torch.ones(2))
    assert model.isCompiled() and not model.isAttachedToDevice()
    with pytest.raises(AssertionError, match=r"Trying to run a model on an offline device "
                                             r"\(ConnectionType.Never\)"):
        model(torch.ones(2), torch.ones(2))


def test_on_demand_attaches_when_first_run():
    opts = poptorch.Options().connectionType(poptorch.ConnectionType.OnDemand)
    model = poptorch.inferenceModel(Adder(), opts)
    model.compile(torch.ones(2), torch.ones(2))
    assert not model.isAttachedToDevice()
    model(torch.ones(2), torch.ones(2))
    assert model.isAttachedToDevice()


# setLogLevel -------------------------------------------------------------------
@pytest.mark.parametrize("level, expected", [
    ("TRACE", logging.DEBUG), ("DEBUG", logging.DEBUG), ("INFO", logging.INFO),
    ("WARN", logging.WARNING), ("ERR", logging.ERROR), (2, logging.INFO), (4, logging.ERROR)])
def test_set_log_level(level, expected):
    logger = logging.getLogger("poptorch_shim")
    saved = logger.level
    try:
        poptorch.setLogLevel(level)
        assert logger.level == expected
        poptorch.setLogLevel("OFF")
        assert not logger.isEnabledFor(logging.CRITICAL)
    finally:
        logger.setLevel(saved)


def test_set_log_level_refuses_unknown_levels_in_poptorch_s_words():
    with pytest.raises(ValueError, match="Invalid log level integer"):
        poptorch.setLogLevel(5)
    with pytest.raises(ValueError, match="Unknown log level: wibble. Valid values are DEBUG, "
                                         "ERR, INFO, OFF, TRACE and WARN"):
        poptorch.setLogLevel("wibble")


# isRunningOnIpu ----------------------------------------------------------------
def test_is_running_on_ipu_only_inside_the_model():
    x, y = torch.tensor([50.0]), torch.tensor([2.0])
    model = Adder()
    assert poptorch.inferenceModel(model)(x, y) == 52
    assert model(x, y) == 100
    assert not poptorch.isRunningOnIpu()


def test_is_running_on_ipu_in_training_and_in_stages():
    seen = []

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(2, 2)

        def forward(self, x):
            seen.append(poptorch.isRunningOnIpu())
            with poptorch.Block("A", ipu_id=0):
                x = self.fc(x)
            with poptorch.Block("B", ipu_id=1):
                return x.sum()

    opts = poptorch.Options()
    opts.Training.gradientAccumulation(3)   # a pipeline of two stages needs 3
    poptorch.trainingModel(Net(), opts)(torch.ones(6, 2))
    assert seen and all(seen)


# Custom argument parsers -------------------------------------------------------
class Pair:
    """A user input type holding two tensors and a tag."""

    def __init__(self, a, b, tag):
        self.a, self.b, self.tag = a, b, tag


class PairParser(poptorch.ICustomArgParser):
    def yieldTensors(self, struct):
        yield struct.a
        yield struct.b

    def reconstruct(self, original_structure, tensor_iterator):
        return Pair(next(tensor_iterator), next(tensor_iterator), original_structure.tag)


class TaggedPair(Pair):
    """A subclass: served by the parser registered for Pair."""


class PairNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(3, 2)

    def forward(self, pair):
        assert isinstance(pair, Pair) and pair.tag == "t"
        return self.fc(pair.a) * pair.b


def test_custom_inputs_are_batched_through_their_parser():
    poptorch.registerCustomArgParser(Pair, PairParser())
    net = PairNet()
    opts = poptorch.Options().deviceIterations(2).replicationFactor(2)
    a, b = torch.randn(8, 3), torch.randn(8, 2)
    out = poptorch.inferenceModel(net, opts)(TaggedPair(a, b, "t"))
    torch.testing.assert_close(out, (net.fc(a) * b).detach())


def test_custom_inputs_keep_their_compiled_shapes():
    poptorch.registerCustomArgParser(Pair, PairParser())
    model = poptorch.inferenceModel(PairNet())
    model(Pair(torch.randn(4, 3), torch.randn(4, 2), "t"))
    model(Pair(torch.randn(4, 3), torch.randn(4, 2), "t"))
    with pytest.raises(ValueError, match="compiled for"):
        model(Pair(torch.randn(4, 3), torch.randn(4, 1), "t"))


def test_register_custom_arg_parser_checks_its_arguments():
    with pytest.raises(TypeError, match="parser must be an instance of a "
                                        "poptorch.ICustomArgParser subclass"):
        poptorch.registerCustomArgParser(Pair, object())
    with pytest.raises(TypeError):
        PairParser.__bases__[0]()   # the interface itself is abstract


# Liveness ------------------------------------------------------------------------
def test_phased_strategies_take_a_liveness():
    serial = poptorch.SerialPhasedExecution("A", "B")
    assert serial.tensors_liveness is poptorch.Liveness.AlwaysLive
    assert serial.setTensorsLiveness(poptorch.Liveness.OffChipAfterEachPhase) is serial
    assert serial.tensors_liveness is poptorch.Liveness.OffChipAfterEachPhase
    parallel = poptorch.ParallelPhasedExecution("A", "B").sendTensorsOffChipAfterFwd()
    assert parallel.tensors_liveness is poptorch.Liveness.OffChipAfterFwd
    assert not parallel.useSeparateBackwardPhase(False).separate_backward_phase
    with pytest.raises(poptorch.Error, match=r"useSeparateBackwardPhase\(True\): ipusim does "
                                             "not simulate a backward pass in phases of its own"):
        parallel.useSeparateBackwardPhase()
    with pytest.raises(TypeError, match="liveness must be a poptorch.Liveness"):
        serial.setTensorsLiveness(1)


# Blocks with any hashable id -------------------------------------------------------
class IntBlocks(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(3, 3)
        self.fc2 = torch.nn.Linear(3, 1)

    def forward(self, x):
        with poptorch.Block(7, ipu_id=0):
            x = torch.relu(self.fc1(x))
        with poptorch.Block(("head", 1), ipu_id=1):
            return self.fc2(x).sum()


@pytest.mark.parametrize("strategy", [
    None, poptorch.ShardedExecution(),
    poptorch.PipelinedExecution(poptorch.AutoStage.AutoIncrement)])
def test_blocks_with_int_and_tuple_ids_are_placed(strategy):
    torch.manual_seed(0)
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(3)   # a pipeline of two stages needs 3
    if strategy is not None:
        opts.setExecutionStrategy(strategy)
    model = poptorch.trainingModel(IntBlocks(), opts)
    model(torch.randn(6, 3))
    stages = [(stage.name, stage.ipu) for stage in model.device.work.stages]
    assert stages == [("7", 0), ("('head', 1)", 1)]


def test_a_stage_still_lists_str_block_ids_as_poptorch_does():
    with pytest.raises(TypeError, match="can only be staged automatically"):
        poptorch.Stage(7)


def test_custom_outputs_are_assembled_through_their_parser():
    poptorch.registerCustomArgParser(Pair, PairParser())

    class OutputPair(Pair):
        """Seen first among the outputs."""

    class Splitter(torch.nn.Module):
        def forward(self, x):
            return OutputPair(x * 2, x + 1, "t")

    x = torch.arange(12.0).reshape(6, 2)
    out = poptorch.inferenceModel(Splitter(), poptorch.Options().deviceIterations(3))(x)
    assert isinstance(out, Pair) and out.tag == "t"
    torch.testing.assert_close((out.a, out.b), (x * 2, x + 1))


def test_set_log_level_shows_the_shim_s_messages_on_the_console(capfd):
    logger = logging.getLogger("poptorch_shim")
    saved = logger.level
    try:
        poptorch.setLogLevel("INFO")
        poptorch.Options().outputMode(poptorch.OutputMode.All, 3)   # logs at INFO
        assert "[info] output_return_period=3 ignored" in capfd.readouterr().err
        poptorch.setLogLevel("WARN")
        poptorch.Options().outputMode(poptorch.OutputMode.All, 3)
        assert "ignored" not in capfd.readouterr().err
    finally:
        logger.setLevel(saved)


def test_poptorch_log_level_is_read_at_import():
    script = "import logging, poptorch_shim; print(logging.getLogger('poptorch_shim').level)"
    env = {**os.environ, "POPTORCH_LOG_LEVEL": "INFO"}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            env=env, timeout=120)
    assert result.stdout.strip() == str(logging.INFO), result.stderr
    env["POPTORCH_LOG_LEVEL"] = "LOUD"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            env=env, timeout=120)
    assert "POPTORCH_LOG_LEVEL: Unknown log level: LOUD" in result.stderr
