"""The step's shape: built once from the options, read by the loader, the model
and the simulated run configuration alike."""
import re

import pytest
import torch

import poptorch_shim as poptorch
from ipusim import Stage, Work
from poptorch_shim._core.batching import MicroBatchCounts, gradient_accumulation_for
from poptorch_shim._execution.engine_config import run_config
from poptorch_shim._execution.step_shape import StepShape

ONE_STAGE = Work((Stage("model"),))

MODES = [(poptorch.OutputMode.All, None), (poptorch.OutputMode.Final, None),
         (poptorch.OutputMode.EveryN, 3), (poptorch.OutputMode.Sum, None)]


def options(mode=poptorch.OutputMode.Default, period=None) -> poptorch.Options:
    opts = poptorch.Options().deviceIterations(2).replicationFactor(4)
    opts.inputReplicaGrouping(2, poptorch.CommGroupType.Consecutive)
    opts.Training.gradientAccumulation(3)
    return opts.outputMode(mode, period) if period else opts.outputMode(mode)


def test_the_shape_counts_a_call_as_the_options_ask():
    shape = StepShape.of(options(), training=True)
    assert (shape.micro_batches_per_step, shape.input_groups, shape.micro_batches) == (6, 2, 12)
    assert shape.output_mode is poptorch.OutputMode.Final
    assert StepShape.of(options(), training=False).output_mode is poptorch.OutputMode.All


@pytest.mark.parametrize("mode,period", MODES)
def test_the_rows_assembled_are_those_the_simulated_device_returns(mode, period):
    opts = options(mode, period)
    shape = StepShape.of(opts, training=True)
    run = run_config(opts, shape, training=True, work=ONE_STAGE)
    sent = [mb for mb in range(run.micro_batches_per_step) if run.returns_outputs(mb)]
    assert run.micro_batches_per_step == shape.micro_batches_per_step
    if mode is poptorch.OutputMode.Sum:  # added up on the device: one result goes back
        assert sent == [shape.micro_batches_per_step - 1]
        assert list(shape.returned_rows(shape.micro_batches_per_step)) == [0, 1, 2, 3, 4, 5]
    else:
        assert list(shape.returned_rows(shape.micro_batches_per_step)) == sent
    expected = {"All": [0, 1, 2, 3, 4, 5], "Final": [5], "EveryN": [2, 5], "Sum": [5]}
    assert expected[mode.name] == sent


def test_a_return_period_that_does_not_divide_a_call_is_refused_with_the_numbers():
    shape = StepShape.of(options(poptorch.OutputMode.EveryN, 4), training=True)
    with pytest.raises(ValueError, match=r"EveryN, 4\).*gradientAccumulation = 6"):
        shape.check_output_period()


def test_the_data_loader_reads_a_step_of_the_shape():
    opts = options()
    loader = poptorch.DataLoader(opts, list(range(240)), batch_size=5)
    assert loader.combinedBatchSize == 5 * StepShape.of(opts).micro_batches == 60


def test_the_counts_of_a_call_and_an_update_are_the_shapes():
    opts = options()
    counts = MicroBatchCounts.of(opts)
    shape = StepShape.of(opts, training=True)
    assert (counts.micro_batches_per_step, counts.micro_batches) == \
        (shape.micro_batches_per_step, shape.micro_batches) == (6, 12)
    assert counts.micro_batches_per_update == 3 * 4  # every replica's accumulated steps
    # the advisor keeps a global batch of 12 micro-batches of 8 items
    assert gradient_accumulation_for(12 * 8, replicas=4, micro_batch_size=8) == 3
    assert gradient_accumulation_for(12 * 8, replicas=2, micro_batch_size=16) == 3
    assert gradient_accumulation_for(12 * 8, replicas=8, micro_batch_size=8) is None


@pytest.mark.parametrize("ipus, strategy, set_to, expected", [
    (4, poptorch.PipelinedExecution, None, True),     # PopTorch's default for a pipeline
    (4, poptorch.PipelinedExecution, 0, False),       # the script's own value wins
    (1, poptorch.PipelinedExecution, None, False),    # one IPU: nothing pipelined
    (4, poptorch.ShardedExecution, None, False),      # not pipelined: no default
    (4, poptorch.ShardedExecution, 3, True),
])
def test_a_pipeline_over_several_ipus_recomputes_unless_the_script_says_otherwise(
        ipus, strategy, set_to, expected):
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(2 * ipus)
    if set_to is not None:
        opts._Popart.set("autoRecomputation", set_to)
    work = Work(tuple(Stage(f"s{k}", ipu=k) for k in range(ipus)))
    shape = StepShape.of(opts, training=True)
    run = run_config(opts, shape, training=True, work=work,
                     strategy=strategy(*[f"s{k}" for k in range(ipus)]))
    assert run.recompute is expected
    opts.Training.gradientAccumulation(1)
    inference = run_config(opts, StepShape.of(opts, training=False), training=False, work=work,
                           strategy=strategy(*[f"s{k}" for k in range(ipus)]))
    assert inference.recompute is False


class AddScalar(torch.nn.Module):
    def forward(self, x, scale):
        return x * scale


def test_a_0_d_input_is_refused_where_a_call_has_several_micro_batches_as_poptorch_asserts():
    # PopTorch counts a 0-d input's batch dimension as 1, which must divide into the
    # call's micro-batches (PoplarExecutor._narrow_tensor asserts it).
    model = poptorch.inferenceModel(AddScalar(), poptorch.Options().deviceIterations(2))
    with pytest.raises(AssertionError, match=re.escape(
            "Invalid batch dimension: In the input torch.Size([]), the batch dimension (1) must "
            "be a multiple of Options.deviceIterations(2) * (Options.replicationFactor(1) / "
            "Options.inputReplicaGrouping.input_group_size(1)) * "
            "Options.Training.gradientAccumulation(1) = 2 because")):
        model(torch.ones(4, 3), torch.tensor(2.0))
    # One micro-batch a call: PopTorch passes it whole.
    single = poptorch.inferenceModel(AddScalar())
    torch.testing.assert_close(single(torch.ones(4, 3), torch.tensor(2.0)), torch.full((4, 3), 2.0))
