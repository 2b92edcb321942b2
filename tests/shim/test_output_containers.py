"""Outputs (and inputs) of any container PopTorch walks: a dict subclass such as
transformers' ``ModelOutput``, a dataclass, a namedtuple, assembled per output
mode like a tuple. Taken for one opaque leaf, a ``deviceIterations(4)`` call
returned one micro-batch's logits."""
from collections import OrderedDict, namedtuple
from dataclasses import dataclass, fields

import pytest
import torch
from torch import nn

import poptorch_shim as poptorch


@dataclass
class ModelOutput(OrderedDict):
    """transformers' ModelOutput in little: a dataclass and an ordered dict whose
    entries are the fields that are set."""
    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None

    def __post_init__(self):
        for field in fields(self):
            if getattr(self, field.name) is not None:
                self[field.name] = getattr(self, field.name)


@dataclass
class Pair:
    first: torch.Tensor
    second: torch.Tensor


class Scores(dict):
    """A dict subclass whose __init__ takes something else."""

    def __init__(self, logits: torch.Tensor):
        super().__init__(logits=logits)


Both = namedtuple("Both", "doubled halved")


class Classifier(nn.Module):
    def __init__(self, wrap):
        super().__init__()
        torch.manual_seed(0)
        self.linear, self.wrap = nn.Linear(4, 3), wrap

    def forward(self, x, labels=None):
        logits = self.linear(x)
        loss = None if labels is None else nn.functional.cross_entropy(logits, labels)
        return self.wrap(logits, loss)


WRAPS = {
    "ModelOutput": lambda logits, loss: ModelOutput(loss=loss, logits=logits),
    "dataclass": lambda logits, loss: Pair(logits, logits * 2),
    "dict subclass": lambda logits, loss: Scores(logits),
    "namedtuple": lambda logits, loss: Both(logits * 2, logits / 2),
}


def entries(out) -> list:
    if isinstance(out, dict):
        return list(out.values())
    return list(out) if isinstance(out, tuple) else [out.first, out.second]


@pytest.mark.parametrize("name", sorted(WRAPS))
def test_every_micro_batchs_outputs_come_back_with_device_iterations(name):
    x = torch.randn(8, 4)  # 4 device iterations of micro-batches of 2
    model = Classifier(WRAPS[name])
    out = poptorch.inferenceModel(model, poptorch.Options().deviceIterations(4))(x)
    expected = model(x)  # the whole batch at once, on the CPU
    assert type(out) is type(expected)
    torch.testing.assert_close(entries(out), entries(expected))


def test_a_model_output_keeps_its_unset_fields_unset():
    out = poptorch.inferenceModel(Classifier(WRAPS["ModelOutput"]),
                                  poptorch.Options().deviceIterations(2))(torch.randn(4, 4))
    assert list(out) == ["logits"] and out.loss is None and out.logits.shape == (4, 3)


def test_sum_and_final_modes_assemble_a_model_output():
    x = torch.randn(8, 4)
    model = Classifier(WRAPS["ModelOutput"])
    opts = poptorch.Options().deviceIterations(4).outputMode(poptorch.OutputMode.Sum)
    summed = poptorch.inferenceModel(model, opts)(x)
    torch.testing.assert_close(summed.logits, model.linear(x).reshape(4, 2, 3).sum(0))
    opts = poptorch.Options().deviceIterations(4).outputMode(poptorch.OutputMode.Final)
    torch.testing.assert_close(poptorch.inferenceModel(model, opts)(x).logits,
                               model.linear(x[6:]))


def test_a_training_model_finds_its_loss_in_a_model_output():
    x, labels = torch.randn(8, 4), torch.tensor([0, 1, 2, 0, 1, 2, 0, 1])
    model = Classifier(WRAPS["ModelOutput"])
    before = model.linear.weight.detach().clone()
    opts = poptorch.Options().deviceIterations(2).outputMode(poptorch.OutputMode.All)
    out = poptorch.trainingModel(model, opts)(x, labels)
    assert isinstance(out, ModelOutput) and out.loss.shape == (2,)
    assert not torch.equal(model.linear.weight, before)


def test_timing_only_returns_the_container_of_placeholders():
    opts = poptorch.Options().deviceIterations(4)
    opts.Simulation.timingOnly(True)
    out = poptorch.inferenceModel(Classifier(WRAPS["dataclass"]), opts)(torch.randn(8, 4))
    assert isinstance(out, Pair) and out.first.shape == out.second.shape == (8, 3)


def test_inputs_of_a_dataclass_are_split_into_micro_batches():
    class Sums(nn.Module):
        def forward(self, pair):
            return pair.first + pair.second

    pair = Pair(torch.arange(8.0).reshape(4, 2), torch.ones(4, 2))
    out = poptorch.inferenceModel(Sums(), poptorch.Options().deviceIterations(2))(pair)
    torch.testing.assert_close(out, pair.first + 1)
