"""What the simulated IPUs do with a staged model: the pipeline schedule,
balance, stash memory, recomputation, offloading and the checks PopTorch
makes before compiling."""
import re

import pytest
import torch
import torch.nn as nn

from poptorch_shim import (
    Error,
    Options,
    RecomputationType,
    TensorLocationSettings,
    inferenceModel,
    trainingModel,
)
from poptorch_shim.blocks import Block
from poptorch_shim.strategies import PipelinedExecution

BLOCKS = ("B1", "B2", "B3", "B4")
WIDTH, GA, MICRO_BATCH = 128, 8, 4


class FourEqualBlocks(nn.Module):
    """Four blocks of the same two layers; the loss is computed in B4."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH))
            for _ in BLOCKS)

    def forward(self, x, target=None):
        for name, block in zip(BLOCKS, self.blocks):
            with Block(name):
                x = block(x)
        if target is None:
            return x
        with Block("B4"):
            return x, nn.functional.cross_entropy(x, target)


def pipelined(ipus=(0, 1, 2, 3)):
    strategy = PipelinedExecution(*BLOCKS)
    for block, ipu in zip(BLOCKS, ipus):
        strategy.stage(block).ipu(ipu)
    return strategy


def options(ipus=(0, 1, 2, 3), accumulation=GA):
    opts = Options()
    opts.setExecutionStrategy(pipelined(ipus))
    opts.Training.gradientAccumulation(accumulation)
    return opts


def data(samples=GA * MICRO_BATCH):
    generator = torch.Generator().manual_seed(0)
    return (torch.randn(samples, WIDTH, generator=generator),
            torch.randint(0, WIDTH, (samples,), generator=generator))


def train_one_step(opts, model=None):
    torch.manual_seed(0)
    model = model or FourEqualBlocks()
    executor = trainingModel(model, opts, optimizer=torch.optim.AdamW(model.parameters()))
    executor(*data())
    return executor


@pytest.fixture(scope="module")
def baseline():
    """The pipeline stashing every activation: PopTorch recomputes a pipeline by
    default, so the script turns it off."""
    opts = options()
    opts._Popart.set("autoRecomputation", int(RecomputationType.NoRecompute))
    return train_one_step(opts)


def test_a_pipeline_recomputes_by_default(baseline):
    default = train_one_step(options())
    assert (default.device.memory["stash"][:3] < baseline.device.memory["stash"][:3]).all()


def compute_time(executor):
    return executor.timeline.per_ipu()["compute(us)"]


def test_the_pipeline_ramps_up_runs_full_then_ramps_down(baseline):
    timeline = baseline.timeline
    stages = 2 * len(BLOCKS) - 1  # P = 2F - 1 pipeline stages in training
    slots = timeline.pipeline_slots()
    occupied = slots.groupby("pipeline_cycle")["pipeline_stage"].nunique()
    cycles = GA + stages - 1
    assert list(occupied.index) == list(range(cycles))
    assert list(occupied) == [min(c + 1, stages, cycles - c) for c in range(cycles)]
    # every IPU computes in every cycle of the main phase (cycles P-1 .. G-1)
    events = timeline.events
    main = events[events["kind"].isin(("forward", "backward"))
                  & events["pipeline_cycle"].between(stages - 1, GA - 1)]
    assert main.groupby("pipeline_cycle")["ipu"].nunique().eq(len(BLOCKS)).all()
    assert len(slots) == GA * stages
    assert timeline.bubble_fraction() == pytest.approx((stages - 1) / (GA + stages - 1),
                                                       abs=1e-12)


def test_moving_a_block_to_another_ipu_shifts_the_work(baseline):
    opts = options(ipus=(0, 0, 2, 3))
    opts._Popart.set("autoRecomputation", int(RecomputationType.NoRecompute))  # as the baseline
    moved = train_one_step(opts)
    assert [s.name for s in moved.device.work.stages] == ["B1+B2", "B3", "B4"]
    before, after = compute_time(baseline), compute_time(moved)
    assert after[0] > 1.5 * before[0]
    assert after[1] == 0 < before[1]
    assert after[2] == before[2]
    assert moved.timeline.duration_ps != baseline.timeline.duration_ps


def test_stash_memory_grows_with_pipeline_depth(baseline):
    stash = baseline.device.memory["stash"]
    assert stash.is_monotonic_decreasing and stash[0] > stash[3]
    # stage k stashes 2 (F - 1 - k) + 1 micro-batches of activations
    stages = baseline.device.work.stages
    assert stash[0] == 7 * stages[0].stash_bytes
    assert stash[2] == 3 * stages[2].stash_bytes


def test_recomputation_trades_compute_for_memory(baseline):
    opts = options()
    opts._Popart.set("autoRecomputation", int(RecomputationType.Pipeline))
    recomputed = train_one_step(opts)
    assert (recomputed.device.memory["stash"][:3] < baseline.device.memory["stash"][:3]).all()
    assert (compute_time(recomputed)[:3] > compute_time(baseline)[:3]).all()
    assert recomputed.timeline.duration_ps > baseline.timeline.duration_ps


def test_offloading_optimizer_state_frees_sram_and_costs_stream_time(baseline):
    opts = options()
    opts.TensorLocations.setOptimizerLocation(TensorLocationSettings().useOnChipStorage(False))
    offloaded = train_one_step(opts)
    memory, before = offloaded.device.memory, baseline.device.memory
    assert (memory["optimizer"] == 0).all() and (before["optimizer"] > 0).all()
    assert (memory["total"] < before["total"]).all()
    assert (offloaded.timeline.per_ipu()["streaming(us)"] > 0).all()
    assert (baseline.timeline.per_ipu()["streaming(us)"] == 0).all()
    assert offloaded.timeline.duration_ps > baseline.timeline.duration_ps


def counting_forwards(model):
    calls = []
    model.blocks[0][0].register_forward_hook(lambda *args: calls.append(1))
    return calls


def test_pipelined_training_needs_gradient_accumulation_of_2f_minus_1_before_any_compute():
    model = FourEqualBlocks()
    calls = counting_forwards(model)
    executor = trainingModel(model, options(accumulation=4))
    with pytest.raises(Error, match=re.escape(
            "poptorch.Options().Training.gradientAccumulation must be greater than or equal to "
            "the number of pipeline stages (7) when using poptorch.PipelinedExecution. Please "
            "note that a model with 4 pipeline stages in PopTorch will have an additional 3 "
            "stages when training. (Got gradientAccumulation(4)")) as caught:
        executor(*data(16))
    assert isinstance(caught.value, ValueError)
    assert not calls and not executor.isCompiled()


def test_pipelined_inference_needs_device_iterations_of_f_before_any_compute():
    model = FourEqualBlocks()
    calls = counting_forwards(model)
    opts = Options().deviceIterations(2)
    opts.setExecutionStrategy(pipelined())
    executor = inferenceModel(model, opts)
    with pytest.raises(Error, match=re.escape(
            "poptorch.Options().deviceIterations must be greater than or equal to the number of "
            "pipeline stages (4) when using PopTorch.PipelinedExecution. (Got "
            "deviceIterations(2)")):
        executor(data(8)[0])
    assert not calls


def test_a_stage_on_an_ipu_the_system_lacks_is_named():
    opts = options(ipus=(0, 1, 2, 7))   # 8 IPUs per replica: a count PopTorch can reserve
    opts.Simulation.system("mk2", 4)
    with pytest.raises(ValueError, match=re.escape(
            "Stage 'B4' is placed on IPU 7 but the system has num_ipus=4 (IPUs 0..3)")):
        train_one_step(opts)


class BlocksWithIpus(nn.Module):
    """Two blocks that name their IPUs, as a PopTorch user writes them without
    setting an execution strategy."""

    def __init__(self):
        super().__init__()
        self.first, self.second = nn.Linear(WIDTH, WIDTH), nn.Linear(WIDTH, 10)

    def forward(self, x, target):
        with Block("encoder", ipu_id=0):
            x = self.first(x).relu()
        with Block("head", ipu_id=1):
            x = self.second(x)
            return x, nn.functional.cross_entropy(x, target)


def test_blocks_without_a_strategy_are_pipelined_as_poptorch_does_by_default():
    torch.manual_seed(0)
    net = BlocksWithIpus()
    reference = BlocksWithIpus()
    reference.load_state_dict(net.state_dict())
    options = Options()
    options.Training.gradientAccumulation(GA)
    model = trainingModel(net, options, torch.optim.SGD(net.parameters(), lr=0.1))
    x, target = torch.randn(GA * MICRO_BATCH, WIDTH), torch.randint(0, 10, (GA * MICRO_BATCH,))
    model(x, target)
    # PipelinedExecution(AutoStage.SameAsIpu): a stage per IPU the blocks name.
    assert [(s.name, s.ipu) for s in model.device.work.stages] == [("encoder", 0), ("head", 1)]
    assert model.device.run.execution.value == "pipelined"
    events = model.timeline.events
    assert events.loc[events["kind"] == "forward", "ipu"].unique().tolist() == [0, 1]
    assert events["pipeline_cycle"].max() + 1 == GA + 3 - 1  # G + P - 1 cycles, P = 2F - 1 = 3
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    nn.functional.cross_entropy(reference(x, target)[0], target).backward()
    optimizer.step()
    for trained, expected in zip(net.parameters(), reference.parameters()):
        torch.testing.assert_close(trained, expected, atol=1e-5, rtol=0)


def test_default_pipelining_asks_for_the_pipeline_depth_poptorch_asks_for():
    options = Options()
    options.Training.gradientAccumulation(2)
    net = BlocksWithIpus()
    model = trainingModel(net, options, torch.optim.SGD(net.parameters(), lr=0.1))
    with pytest.raises(ValueError, match=re.escape(
            "gradientAccumulation must be greater than or equal to the number of pipeline "
            "stages (3) when using poptorch.PipelinedExecution")):
        model(torch.randn(2 * MICRO_BATCH, WIDTH), torch.randint(0, 10, (2 * MICRO_BATCH,)))


def test_blocks_without_ipus_and_without_a_strategy_are_told_where_the_rule_comes_from():
    class NoIpus(BlocksWithIpus):
        def forward(self, x, target):
            with Block("encoder"):
                x = self.first(x).relu()
            with Block("head"):
                return nn.functional.cross_entropy(self.second(x), target)

    net = NoIpus()
    model = trainingModel(net, Options(), torch.optim.SGD(net.parameters(), lr=0.1))
    with pytest.raises(ValueError, match=re.escape(
            "AutoStage.SameAsIpu was selected (by the default execution strategy, "
            "PipelinedExecution(AutoStage.SameAsIpu): no strategy was set) but no IPU was "
            "specified for block 'encoder'")):
        model(torch.randn(MICRO_BATCH, WIDTH), torch.randint(0, 10, (MICRO_BATCH,)))
