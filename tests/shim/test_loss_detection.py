"""A training model's loss is found by the torch loss function that made it,
whatever its autograd node is called, whole or split into staged Blocks."""
import ast
import copy
import gc
import inspect
import weakref

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import poptorch_shim as poptorch
from poptorch_shim.blocks import Block
from poptorch_shim.losses import LOSS_FUNCTION_NAMES, LossRecorder
from poptorch_shim.strategies import PipelinedExecution

WIDTH, CLASSES = 5, 3


def l1(out, target):
    return F.l1_loss(out, target)


def bce_with_logits(out, target):
    return F.binary_cross_entropy_with_logits(out, target.sigmoid())


def kl(out, target):
    return F.kl_div(F.log_softmax(out, dim=-1), target.softmax(dim=-1), reduction="batchmean")


def name(loss) -> str:
    return getattr(loss, "__name__", type(loss).__name__)


class WithAuxiliary(nn.Module):
    """Returns an auxiliary scalar that requires grad, then the loss."""

    def __init__(self, loss):
        super().__init__()
        self.fc = nn.Linear(WIDTH, CLASSES)
        self.loss = loss

    def forward(self, x, target):
        out = self.fc(x)
        return out.pow(2).mean(), self.loss(out, target)


class TwoBlocks(nn.Module):
    """The same in two Blocks, the loss in the second."""

    def __init__(self, loss, traceable=True):
        super().__init__()
        self.a, self.b = nn.Linear(WIDTH, WIDTH), nn.Linear(WIDTH, CLASSES)
        self.loss, self.traceable = loss, traceable

    def forward(self, x, target):
        with Block("B1", ipu_id=0):
            x = torch.tanh(self.a(x))
        with Block("B2", ipu_id=1):
            if not self.traceable and bool(torch.isfinite(x).all()):  # torch.fx cannot trace it
                x = x * 1
            out = self.b(x)
            return out.pow(2).mean(), self.loss(out, target)


def data(samples=6):
    generator = torch.Generator().manual_seed(0)
    return (torch.randn(samples, WIDTH, generator=generator),
            torch.randn(samples, CLASSES, generator=generator))


def options(accumulation=1, staged=False):
    opts = poptorch.Options()
    if staged:
        strategy = PipelinedExecution("B1", "B2")
        strategy.stage("B1").ipu(0)
        strategy.stage("B2").ipu(1)
        opts.setExecutionStrategy(strategy)
    opts.Training.gradientAccumulation(accumulation)
    return opts


def assert_trains_like_plain_torch(model, opts, train_on):
    """One SGD step through the shim gives the weights plain torch gets by
    stepping on ``train_on(outputs)`` for the whole batch."""
    reference = copy.deepcopy(model)
    x, y = data()
    poptorch.trainingModel(model, opts, torch.optim.SGD(model.parameters(), lr=0.1))(x, y)
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    train_on(reference(x, y)).backward()
    optimizer.step()
    for ours, theirs in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-5)


def test_the_loss_functions_are_those_the_loss_modules_call():
    try:
        source = inspect.getsource(nn.modules.loss)
    except OSError:
        pytest.skip("torch's source is not installed")
    called = {node.func.attr for node in ast.walk(ast.parse(source))
              if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and isinstance(node.func.value, ast.Name) and node.func.value.id == "F"}
    assert {"l1_loss", "kl_div", "binary_cross_entropy_with_logits"} <= called
    assert called <= LOSS_FUNCTION_NAMES
    assert all(callable(getattr(F, name)) for name in LOSS_FUNCTION_NAMES)


def test_the_recorder_knows_the_tensor_a_loss_function_returned_and_holds_it_weakly():
    out, target = torch.randn(4, CLASSES, requires_grad=True), torch.randn(4, CLASSES)
    with LossRecorder() as losses:
        loss = F.l1_loss(out, target)
        scaled = F.l1_loss(out, target) * 2
        nan = F.l1_loss(out, torch.full_like(target, float("nan")))
        plain = out.abs().mean()
    assert loss in losses and nan in losses
    assert scaled not in losses and plain not in losses
    dead = weakref.ref(loss)
    del loss
    gc.collect()
    assert dead() is None


@pytest.mark.parametrize("accumulation", [1, 3])
@pytest.mark.parametrize("loss", [l1, bce_with_logits, kl, nn.L1Loss()], ids=name)
def test_the_loss_function_is_trained_on_beside_an_auxiliary_scalar(loss, accumulation):
    """With several micro-batches, the later ones find the loss where the first did."""
    torch.manual_seed(0)
    assert_trains_like_plain_torch(WithAuxiliary(loss), options(accumulation),
                                   lambda outputs: outputs[1])


def test_a_loss_logged_beside_the_total_it_is_a_term_of_is_ambiguous():
    class LoggedTerm(WithAuxiliary):
        def forward(self, x, target):
            out = self.fc(x)
            term = l1(out, target)
            return out.pow(2).mean() + 0.1 * term, term

    with pytest.raises(RuntimeError, match="returns 2 single-element tensors.*identity_loss"):
        poptorch.trainingModel(LoggedTerm(l1), options())(*data())


def test_two_loss_functions_are_two_losses():
    class TwoLosses(WithAuxiliary):
        def forward(self, x, target):
            out = self.fc(x)
            return l1(out, target), kl(out, target)

    with pytest.raises(RuntimeError, match="returns 2 losses.*identity_loss"):
        poptorch.trainingModel(TwoLosses(l1), options())(*data())


def test_identity_loss_wins_over_a_loss_function():
    class Marked(WithAuxiliary):
        def forward(self, x, target):
            aux, loss = super().forward(x, target)
            return loss, poptorch.identity_loss(aux, reduction="none")

    torch.manual_seed(0)
    assert_trains_like_plain_torch(Marked(l1), options(), lambda outputs: outputs[1])


@pytest.mark.filterwarnings("ignore:poptorch. torch.fx cannot trace")
@pytest.mark.parametrize("traceable", [True, False], ids=["fx-split", "eager"])
@pytest.mark.parametrize("loss", [l1, nn.L1Loss(), kl], ids=name)
def test_a_staged_model_finds_the_loss_function_in_its_last_block(loss, traceable):
    torch.manual_seed(0)
    assert_trains_like_plain_torch(TwoBlocks(loss, traceable), options(3, staged=True),
                                   lambda outputs: outputs[1])
