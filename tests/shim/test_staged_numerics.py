"""Stage-by-stage compute gives plain torch's numbers, and profiles each stage.

The batching guide's four-block Network (the batching guide, listing 4.5, as the
parallel-execution scenario writes it) is trained
with each execution strategy on 8 micro-batches of 2 and compared with plain
torch on the concatenated batch of 16. AdamW divides each gradient by its
own magnitude, which turns float32 rounding of near-zero gradients (summed
per micro-batch instead of over the batch) into visible weight differences,
so the AdamW runs are in float64; SGD runs in float32.
"""
import copy

import pytest
import torch
import torch.nn as nn

from poptorch_shim import Options, inferenceModel, trainingModel
from poptorch_shim._execution.compute import WholeModel
from poptorch_shim._execution.staged import StagedModel
from poptorch_shim._run.runner import install_aliases
from poptorch_shim.blocks import BeginBlock, Block
from poptorch_shim.strategies import (
    ParallelPhasedExecution,
    PipelinedExecution,
    SerialPhasedExecution,
    ShardedExecution,
    Stage,
)

install_aliases()  # the guide's Network is a PopTorch script's: it does `import poptorch`
from scenarios.parallel_execution import Network, TrainingModelWithLoss  # noqa: E402

BLOCKS = ("B1", "B2", "B3", "B4")


def strategy(kind, ipus=(0, 1, 2, 3)):
    made = {"pipelined": PipelinedExecution, "sharded": ShardedExecution,
            "phased": SerialPhasedExecution, "parallel": ParallelPhasedExecution}[kind](*BLOCKS)
    for block, ipu in zip(BLOCKS, ipus):
        made.stage(block).ipu(ipu)
    return made


def batches(steps, dtype, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [(torch.rand(16, 1, 28, 28, generator=generator, dtype=dtype),
             torch.randint(0, 10, (16,), generator=generator)) for _ in range(steps)]


def optimizer_for(name, params):
    if name == "adamw":
        return torch.optim.AdamW(params, lr=1e-3)
    return torch.optim.SGD(params, lr=0.1, momentum=0.9)


def train_with_poptorch(net, options, name, data):
    model = trainingModel(TrainingModelWithLoss(net), options,
                          optimizer=optimizer_for(name, net.parameters()))
    for x, y in data:
        model(x, y)
    return model


def train_plainly(net, name, data):
    with_loss, optimizer = TrainingModelWithLoss(net), optimizer_for(name, net.parameters())
    for x, y in data:
        optimizer.zero_grad()
        with_loss(x, y)[1].backward()
        optimizer.step()


@pytest.mark.parametrize("kind,ipus", [("pipelined", (0, 1, 2, 3)), ("sharded", (0, 1, 0, 1)),
                                       ("phased", (0, 0, 0, 0)), ("phased", (0, 0, 1, 1)),
                                       ("parallel", (0, 1, 0, 1))])
@pytest.mark.parametrize("name,dtype", [("adamw", torch.float64), ("sgd", torch.float32)])
def test_training_matches_plain_torch_on_the_whole_batch(kind, ipus, name, dtype):
    torch.manual_seed(0)
    net = Network().to(dtype)
    reference = copy.deepcopy(net)
    data = batches(1, dtype)
    options = Options()
    options.setExecutionStrategy(strategy(kind, ipus))
    options.Training.gradientAccumulation(8)
    model = train_with_poptorch(net, options, name, data)
    train_plainly(reference, name, data)
    assert [s.name for s in model.device.work.stages] == list(BLOCKS)
    for trained, expected in zip(net.parameters(), reference.parameters()):
        torch.testing.assert_close(trained, expected, atol=1e-5, rtol=0)


def train_whole(net, data, accumulation):
    """The reference: the model in one piece, micro-batch by micro-batch, the
    gradients scaled and accumulated as the shim does, then one update."""
    runner = WholeModel(TrainingModelWithLoss(net))
    optimizer = optimizer_for("adamw", net.parameters())
    for x, y in data:
        optimizer.zero_grad()
        for xs, ys in zip(x.chunk(accumulation), y.chunk(accumulation)):
            runner.run((xs, ys), {}, True, 1.0 / accumulation)
        optimizer.step()


def test_staged_training_is_bit_identical_to_running_the_whole_model():
    torch.manual_seed(0)
    staged_net = Network()
    whole_net = copy.deepcopy(staged_net)
    data = batches(1, torch.float32)
    options = Options()
    options.setExecutionStrategy(strategy("pipelined"))
    options.Training.gradientAccumulation(8)
    train_with_poptorch(staged_net, options, "adamw", data)
    train_whole(whole_net, data, 8)
    for staged, expected in zip(staged_net.parameters(), whole_net.parameters()):
        assert torch.equal(staged, expected)


def test_pipelined_inference_returns_plain_torch_outputs():
    torch.manual_seed(0)
    net = Network()
    options = Options().deviceIterations(4)
    options.setExecutionStrategy(strategy("pipelined"))
    model = inferenceModel(TrainingModelWithLoss(net), options)
    x = batches(1, torch.float32)[0][0][:8]
    torch.testing.assert_close(model(x), net(x), atol=1e-6, rtol=0)


def test_each_stage_is_profiled_on_real_tensors():
    torch.manual_seed(0)
    model = TrainingModelWithLoss(Network())
    x, y = batches(1, torch.float32)[0]
    args = (x[:2], y[:2])
    stages, _ = StagedModel(model, strategy("pipelined")).profile(args, {}, training=True)
    (whole,), _ = WholeModel(copy.deepcopy(model)).profile(args, {}, training=True)
    assert [(s.name, s.ipu) for s in stages] == [("B1", 0), ("B2", 1), ("B3", 2), ("B4", 3)]
    # what crosses each boundary: 2 x 784, 2 x 784, 2 x 128 floats; the last
    # stage's outputs: the softmax (2 x 10) and the loss
    assert [s.activation_bytes for s in stages] == [6272, 6272, 1024, 84]
    layers = [model.model.layer1, model.model.layer2, model.model.layer3, model.model.layer4]
    assert [s.weight_bytes for s in stages] == [
        sum(p.numel() * 4 for p in layer.parameters()) for layer in layers]
    # each stage stashes its input activations (not its weights) for the backward
    assert [s.stash_bytes for s in stages][:3] == [6272, 6272, 6272]
    assert sum(s.forward.flops for s in stages) == whole.forward.flops
    assert sum(s.backward.flops for s in stages) == whole.backward.flops
    # B1's input needs no gradient: its backward is the weight gradient alone
    assert stages[0].backward.flops == stages[0].forward.flops
    assert stages[1].backward.flops == 2 * stages[1].forward.flops


class SkipAndTied(nn.Module):
    """B1's output feeds B3 past B2; B4 reuses B1's weight (tied weights) and
    starts with an in-place ReLU on what crosses into it."""

    def __init__(self):
        super().__init__()
        self.first, self.second, self.third = nn.Linear(5, 5), nn.Linear(5, 5), nn.Linear(5, 5)

    def forward(self, x, target):
        with Block("B1"):
            a = self.first(x)
        with Block("B2"):
            b = self.second(a)
        with Block("B3"):
            c = self.third(b) + a
        with Block("B4"):
            c = nn.functional.relu(c, inplace=True)
            out = nn.functional.linear(c, self.first.weight)
            return out, nn.functional.cross_entropy(out, target)


def test_skip_connections_tied_weights_and_in_place_ops_get_plain_torch_gradients():
    torch.manual_seed(0)
    model = SkipAndTied()
    reference = copy.deepcopy(model)
    x, y = torch.randn(3, 5), torch.tensor([0, 4, 2])
    staged = StagedModel(model, PipelinedExecution(*BLOCKS))
    staged.run((x, y), {}, training=True, loss_scale=0.5)
    (reference(x, y)[1] * 0.5).backward()
    for param, expected in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(param.grad, expected.grad, atol=1e-6, rtol=0)
    stages, _ = staged.profile((x, y), {}, training=True)
    # the tied weight counts once, in B1 where it is first used; B4 holds no weights
    assert [s.weight_bytes for s in stages] == [120, 120, 120, 0]
    # B1's output crosses both later boundaries on its way to B3
    assert [s.activation_bytes for s in stages][:3] == [60, 120, 60]


class DataDependent(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(6, 6), nn.Linear(6, 4)

    def forward(self, x, target):
        with Block("A", ipu_id=0):
            x = torch.tanh(self.a(x))
        with Block("B", ipu_id=1):
            if bool(torch.isfinite(x).all()):  # control flow on data: torch.fx cannot trace it
                x = x * 2
            out = self.b(x)
            return out, nn.functional.cross_entropy(out, target)


@pytest.mark.filterwarnings("ignore:poptorch. torch.fx cannot trace")
def test_an_untraceable_model_trains_eagerly_with_its_work_charged_to_its_stages():
    torch.manual_seed(0)
    model = DataDependent()
    reference = copy.deepcopy(model)
    x, y = torch.randn(8, 6), torch.randint(0, 4, (8,))
    options = Options()
    options.setExecutionStrategy(PipelinedExecution())
    options.Training.gradientAccumulation(4)
    executor = trainingModel(model, options, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    executor(x, y)
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    reference(x, y)[1].backward()
    optimizer.step()
    for param, expected in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(param, expected, atol=1e-6, rtol=0)

    args = (x[:2], y[:2])
    stages, _ = StagedModel(copy.deepcopy(model), PipelinedExecution()).profile(args, {}, True)
    (whole,), _ = WholeModel(copy.deepcopy(model)).profile(args, {}, True)
    assert [(s.name, s.ipu) for s in stages] == [("A", 0), ("B", 1)]
    assert sum(s.forward.flops for s in stages) == whole.forward.flops
    assert sum(s.backward.flops for s in stages) == whole.backward.flops
    assert [s.weight_bytes for s in stages] == [168, 112]
    assert stages[0].activation_bytes == 2 * 6 * 4
    assert stages[0].backward.flops == 2 * 2 * 6 * 6  # A's weight gradient


class ExchangeInOnePhase(nn.Module):
    """PopTorch's 2x2 parallel phased model, small: phase 1's two stages each
    use the other's result (they run at once on IPUs 1 and 3)."""

    def __init__(self):
        super().__init__()
        self.w = nn.ParameterList([nn.Parameter(torch.randn(4, 4)) for _ in range(6)])

    def forward(self, x, target):
        with Block("0"):
            a, b = torch.split(x, 4)
            a = torch.relu(self.w[0] @ a)
        with Block("1"):
            b = torch.relu(self.w[1] @ b)
        with Block("2"):
            a2 = torch.relu(self.w[2] @ b)
        with Block("3"):
            b2 = torch.relu(self.w[3] @ a)
        with Block("4"):   # stage "2+4" uses the result of stage "3+5", and the other way
            a3 = torch.relu(self.w[4] @ b2)
        with Block("5"):
            b3 = torch.relu(self.w[5] @ a2)
            out = a3 + b3
            return out, nn.functional.l1_loss(out, target)


def test_the_stages_of_one_phase_exchange_results_both_ways():
    torch.manual_seed(0)
    model = ExchangeInOnePhase()
    reference = copy.deepcopy(model)
    x, target = torch.randn(8, 1), torch.randn(4, 1)
    phased = ParallelPhasedExecution([Stage("0"), Stage("1")], [Stage("2", "4"), Stage("3", "5")])
    phased.phase(0).ipus(0, 2)
    phased.phase(1).ipus(1, 3)
    options = Options()
    options.setExecutionStrategy(phased)
    executor = trainingModel(model, options, optimizer=torch.optim.SGD(model.parameters(), lr=0.1))
    out, loss = executor(x, target)
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    expected, expected_loss = reference(x, target)
    expected_loss.backward()
    optimizer.step()
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=0)
    for param, want in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(param, want, atol=1e-6, rtol=0)
    stages, _ = StagedModel(copy.deepcopy(model), phased).profile((x, target), {}, True)
    assert [(s.name, s.ipu) for s in stages] == [("0", 0), ("1", 2), ("2+4", 1), ("3+5", 3)]
    assert all(s.forward.flops > 0 and s.weight_bytes == 2 * 4 * 4 * 4 for s in stages[2:])


def test_a_later_pipeline_stage_feeding_an_earlier_one_is_still_refused():
    model = ExchangeInOnePhase()
    with pytest.raises(ValueError, match="uses a result of block '3'"):
        StagedModel(model, PipelinedExecution(Stage("0"), Stage("1"), Stage("2", "4"),
                                              Stage("3", "5"))).profile(
            (torch.randn(8, 1), torch.randn(4, 1)), {}, True)


class Positions(nn.Embedding):
    """transformers' WhisperPositionalEmbedding: a slice of its own weight."""

    def forward(self, ids, past: int = 0):
        return self.weight[past:past + ids.shape[-1]]


class Decoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.tokens, self.positions = nn.Embedding(10, 8), Positions(16, 8)
        self.head = nn.Linear(8, 10)

    def forward(self, ids):
        x = self.tokens(ids) + self.positions(ids)
        if x.sum() > 0:   # data-dependent: torch.fx cannot trace it, so it runs eagerly
            x = x * 2
        return self.head(x)


@pytest.mark.filterwarnings("ignore:poptorch. torch.fx cannot trace")
def test_an_eager_inference_model_may_return_views_of_its_parameters():
    torch.manual_seed(0)
    model = Decoder().eval()
    model.head = BeginBlock(model.head, ipu_id=1)
    ids = torch.randint(0, 10, (4, 5))
    expected = model(ids)
    executor = inferenceModel(model, Options().deviceIterations(2))
    torch.testing.assert_close(executor(ids), expected)
    stages = executor.device.work.stages
    # The layers before the first block are on IPU 0, as PopTorch places them; the head,
    # on IPU 1, multiplies a micro-batch of 2 sequences of 5 positions by its 8 x 10 weight.
    assert [stage.ipu for stage in stages] == [0, 1]
    assert stages[1].forward.flops == 2 * (2 * 5) * 8 * 10
