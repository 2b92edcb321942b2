"""Blocks and execution strategies: PopTorch's API, and how blocks become stages."""
import re

import pytest
import torch
import torch.nn as nn

import poptorch_shim as poptorch
from poptorch_shim._execution import staged
from poptorch_shim._execution.staged import StagedModel
from poptorch_shim.blocks import (
    BeginBlock,
    Block,
    BlockFunction,
    BlockRecorder,
    current_block,
    recording,
    removeBlocks,
)
from poptorch_shim.enums import AutoStage
from poptorch_shim.strategies import (
    ParallelPhasedExecution,
    Phase,
    PipelinedExecution,
    PlacedStage,
    SerialPhasedExecution,
    ShardedExecution,
    Stage,
)


class FourBlocks(nn.Module):
    """Four linear layers, one per block, the last block with its loss."""

    def __init__(self, ipus=(None, None, None, None)):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(6, 6) for _ in range(4))
        self.ipus = ipus

    def forward(self, x, target=None):
        x = x.view(-1, 6)
        for index, (layer, ipu) in enumerate(zip(self.layers, self.ipus)):
            with Block(f"B{index + 1}", ipu_id=ipu):
                x = layer(x)
        if target is None:
            return x
        with Block("B4"):
            return x, nn.functional.cross_entropy(x, target)


def layout(model, strategy, *args):
    return StagedModel(model, strategy).stage_layout(args, {})


X, Y = torch.randn(4, 6), torch.tensor([0, 1, 2, 3])


# Blocks --------------------------------------------------------------------
def test_blocks_outside_a_model_run_change_nothing():
    model = FourBlocks()
    plain = nn.Sequential(*model.layers)
    assert torch.equal(model(X), plain(X))
    assert current_block() is None


def test_a_block_scope_ends_the_block_and_a_start_lasts_until_the_next():
    recorder = BlockRecorder()
    with recording(recorder):
        with Block("A", ipu_id=2):
            pass
        assert current_block() is None   # PopTorch: leaving the scope ends the block
        Block.start("B")
        assert current_block().user_id == "B"
    assert recorder.ipus == {"A": 2, "B": None}
    assert current_block() is None


def test_automatic_ids_count_from_zero_after_use_auto_id():
    recorder = BlockRecorder()
    with recording(recorder):
        Block.useAutoId()
        for _ in range(2):
            with Block():
                pass
        with Block("named"):
            pass
        Block.useAutoId()
        with Block(ipu_id=1):
            pass
    assert recorder.ipus == {"0": 1, "1": None, "named": None}


def test_block_function_and_begin_block_start_their_blocks():
    seen = []
    recorder = BlockRecorder(on_start=lambda mark: seen.append((mark.user_id, mark.ipu_id)))

    @BlockFunction("F", ipu_id=1)
    def double(x):
        return x * 2

    layer = BeginBlock(nn.Linear(2, 2), "L", ipu_id=3)
    function = BeginBlock(torch.relu, "R")
    with recording(recorder):
        double(torch.ones(1))
        layer(torch.ones(1, 2))
        function(torch.ones(1))
    assert seen == [("F", 1), ("L", 3), ("R", None)]
    assert double.__name__ == "double"


def test_begin_block_twice_is_refused_until_blocks_are_removed():
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 2))
    BeginBlock(model[0], "A")
    with pytest.raises(ValueError, match="already been assigned to a block"):
        BeginBlock(model[0], "B")
    removeBlocks(model)
    assert not model[0]._forward_pre_hooks
    BeginBlock(model[0], "B")


def test_block_ids_must_be_hashable():
    with pytest.raises(TypeError, match=r"user_id must be hashable .* got \['B'\]"):
        Block(["B"])
    with pytest.raises(TypeError, match="ipu_id must be a non-negative int"):
        BeginBlock(nn.Linear(1, 1), "A", ipu_id=-1)


# Strategies ----------------------------------------------------------------
def test_strategy_api_as_in_poptorch():
    strategy = PipelinedExecution("B1", Stage("B2", "B3"), ["B4"])
    assert strategy.stage("B2") is strategy.stage("B3")
    assert strategy.stage("B1").ipu(2) is strategy.stage("B1")
    assert strategy.stage("B2").blocks == ("B2", "B3")
    assert (PipelinedExecution.execution_kind, ShardedExecution.execution_kind,
            SerialPhasedExecution.execution_kind, ParallelPhasedExecution.execution_kind) == (
        "pipelined", "sharded", "phased", "parallel_phased")
    phased = SerialPhasedExecution(Phase(Stage("A"), Stage("B")), ["C", "D"], "E")
    phased.phase(0).ipus(0, 1)
    assert phased.stage("B")._ipu == 1
    assert phased.phase(1).stage(0).blocks == ("C", "D")


@pytest.mark.parametrize("build,error,message", [
    (lambda: PipelinedExecution("A").stage("B"), ValueError,
     "unknown block 'B'; the strategy's blocks are ['A']"),
    (lambda: PipelinedExecution("A", Stage("A", "B")), ValueError,
     "block 'A' is associated with more than one stage"),
    (lambda: Stage("A", 1), TypeError, "block ids must be one or more strings"),
    (lambda: Stage("A").ipu(-1), TypeError, "ipu must be a non-negative int, got -1"),
    (lambda: Phase(Stage("A"), Stage("B")).ipus(0), ValueError,
     "Phase contains 2 stages but you provided 1 ipus"),
    (lambda: SerialPhasedExecution(), ValueError, "there is no AutoStage for phased execution"),
    (lambda: SerialPhasedExecution("A").phase(1), IndexError, "phases are numbered 0..0, got 1"),
])
def test_strategy_misuse_is_an_error_that_says_why(build, error, message):
    with pytest.raises(error, match=re.escape(message)):
        build()


def test_placement_takes_ipus_from_the_strategy_then_the_block_then_the_position():
    strategy = PipelinedExecution("A", "B", "C")
    strategy.stage("A").ipu(3)
    seen = {"A": 0, "B": 5, "C": None}
    assert strategy.place(seen, seen) == (PlacedStage("A", 3, ("A",)), PlacedStage("B", 5, ("B",)),
                                          PlacedStage("C", 2, ("C",)))


def test_consecutive_stages_on_one_ipu_merge_and_empty_blocks_take_no_stage():
    strategy = ShardedExecution("A", "B", "C", "D")
    for block, ipu in zip("ABCD", (0, 1, 0, 0)):
        strategy.stage(block).ipu(ipu)
    seen = dict.fromkeys("ABCD")
    assert [s.name for s in strategy.place(seen, {"A", "C", "D"})] == ["A+C+D"]
    assert [(s.name, s.ipu) for s in strategy.place(seen, seen)] == [("A", 0), ("B", 1),
                                                                     ("C+D", 0)]


def test_phased_stages_default_to_their_place_in_the_phase_and_never_merge():
    seen = dict.fromkeys("ABCD")
    serial = SerialPhasedExecution(["A"], Phase(Stage("B"), Stage("C")), "D")
    assert [(s.name, s.ipu) for s in serial.place(seen, seen)] == [("A", 0), ("B", 0), ("C", 1),
                                                                   ("D", 0)]
    parallel = ParallelPhasedExecution(["A"], Phase(Stage("B"), Stage("C")), "D")
    assert [(s.name, s.ipu) for s in parallel.place(seen, seen)] == [("A", 0), ("B", 1), ("C", 3),
                                                                     ("D", 0)]


def test_parallel_phases_must_alternate_between_even_and_odd_ipus():
    seen = dict.fromkeys("ABC")
    parallel = ParallelPhasedExecution("A", "B", "C")
    parallel.stage("B").ipu(2)
    with pytest.raises(ValueError, match=re.escape(
            "phase 1 places stage 'B' on IPU 2, but even phases must run on even IPUs and odd "
            "phases on odd IPUs. Place it on an odd IPU (for example "
            "strategy.stage('B').ipu(1))")):
        parallel.place(seen, seen)


def test_auto_stages_follow_the_blocks_ipus_or_their_order():
    seen = {"A": 1, "B": 0, "C": 1}
    assert [(s.name, s.ipu) for s in PipelinedExecution().place(seen, seen)] == [("B", 0),
                                                                                ("A+C", 1)]
    increment = PipelinedExecution(AutoStage.AutoIncrement)
    assert [(s.name, s.ipu) for s in increment.place(seen, seen)] == [("A", 1), ("B", 0),
                                                                      ("C", 1)]
    with pytest.raises(ValueError, match=re.escape(
            "poptorch.AutoStage.SameAsIpu was selected but no IPU was specified for block 'X'")):
        PipelinedExecution().place({"X": None}, {"X"})


# Blocks of a traced model --------------------------------------------------
def test_the_guide_network_splits_into_its_four_blocks():
    strategy = PipelinedExecution("B1", "B2", "B3", "B4")
    for ipu, block in enumerate(("B1", "B2", "B3", "B4")):
        strategy.stage(block).ipu(ipu)
    assert layout(FourBlocks(), strategy, X, Y) == [("B1", 0), ("B2", 1), ("B3", 2), ("B4", 3)]


def test_blocks_with_ipu_ids_make_the_default_pipeline():
    assert layout(FourBlocks(ipus=(0, 0, 1, 1)), PipelinedExecution(), X, Y) == [
        ("B1+B2", 0), ("B3+B4", 1)]


def test_consecutive_blocks_on_one_ipu_merge_into_one_stage():
    strategy = ShardedExecution("B1", "B2", "B3", "B4")
    for block, ipu in zip(("B1", "B2", "B3", "B4"), (0, 0, 1, 0)):
        strategy.stage(block).ipu(ipu)
    assert layout(FourBlocks(), strategy, X, Y) == [("B1+B2", 0), ("B3", 1), ("B4", 0)]


def test_begin_block_on_leaf_modules_places_them():
    model = nn.Sequential(nn.Linear(6, 6), nn.ReLU(), nn.Linear(6, 6))
    BeginBlock(model[0], "first", ipu_id=0)
    BeginBlock(model[2], "second", ipu_id=1)
    assert layout(model, PipelinedExecution(), X) == [("first", 0), ("second", 1)]


def test_a_model_without_blocks_is_one_stage_under_an_automatic_strategy():
    assert layout(nn.Linear(6, 6), PipelinedExecution(), X) == [("model", 0)]


def test_a_block_the_strategy_does_not_list_is_an_error_naming_the_expected_ones():
    with pytest.raises(ValueError, match=re.escape(
            "Unknown Block 'B4': the model starts a block that the execution strategy "
            "PipelinedExecution does not list. List of expected Blocks: ['B1', 'B2', 'B3']")):
        layout(FourBlocks(), PipelinedExecution("B1", "B2", "B3"), X, Y)


def test_a_strategy_block_the_model_never_starts_is_an_error():
    with pytest.raises(ValueError, match=re.escape(
            "lists Block(s) ['B5'] that the model never starts; the model's blocks are "
            "['B1', 'B2', 'B3', 'B4']")):
        layout(FourBlocks(), PipelinedExecution("B1", "B2", "B3", "B4", "B5"), X, Y)


def test_stages_listed_against_the_data_flow_are_an_error():
    with pytest.raises(ValueError, match=re.escape(
            "Block 'B2' (stage 'B2') uses a result of block 'B1', which runs in the later stage "
            "'B1'")):
        layout(FourBlocks(), PipelinedExecution("B2", "B1", "B3", "B4"), X, Y)


class DataDependent(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(6, 6), nn.Linear(6, 6)

    def forward(self, x):
        with Block("A", ipu_id=0):
            x = self.a(x)
        with Block("B", ipu_id=1):
            if x.sum() > 0:  # control flow on data: torch.fx cannot trace it
                x = x * 2
            return self.b(x)


def test_an_untraceable_model_warns_and_still_finds_its_stages(monkeypatch):
    monkeypatch.setattr(staged, "_told_eager", False)  # said once per process
    with pytest.warns(UserWarning, match="torch.fx cannot trace DataDependent to split it at its "
                                         "Blocks .*TraceError.* It runs eagerly"):
        assert layout(DataDependent(), PipelinedExecution(), X) == [("A", 0), ("B", 1)]


class HeadOnIpu1(nn.Module):
    """Layers before the model's one block, which BeginBlock puts on IPU 1."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 6), nn.ReLU())
        self.head = BeginBlock(nn.Linear(6, 2), ipu_id=1)

    def forward(self, x):
        return self.head(self.body(x))


def test_layers_before_the_first_block_are_a_stage_on_ipu_0_as_poptorch_places_them():
    # PopTorch's compiler puts operations in stage 0 on IPU 0 until a block starts.
    assert layout(HeadOnIpu1(), PipelinedExecution.default(), X) == [
        ("(before the first block)", 0), ("0", 1)]
    model = HeadOnIpu1()
    executor = poptorch.inferenceModel(model, poptorch.Options().deviceIterations(2))
    torch.testing.assert_close(executor(X), model(X))
    assert [(stage.ipu, stage.weight_bytes) for stage in executor.device.work.stages] == [
        (0, 4 * (6 * 6 + 6)), (1, 4 * (6 * 2 + 2))]


def test_a_strategy_that_lists_its_stages_charges_earlier_work_to_the_first():
    strategy = PipelinedExecution("0")
    strategy.stage("0").ipu(1)
    assert layout(HeadOnIpu1(), strategy, X) == [("0", 1)]
