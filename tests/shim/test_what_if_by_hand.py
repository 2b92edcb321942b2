"""A what-if's figures are exactly those of the script run with the change made by hand."""
import pytest
import torch
from support.models import LinearClassifier

import poptorch_shim as poptorch


def train(accumulation: int, calls: int = 3):
    """A two-stage pipelined classifier trained for ``calls`` calls; its timeline."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    poptorch.BeginBlock(model[0], "first", ipu_id=0)
    poptorch.BeginBlock(model[2], "second", ipu_id=1)

    class WithLoss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model, self.loss = model, torch.nn.CrossEntropyLoss()

        def forward(self, x, y):
            out = self.model(x)
            return out, self.loss(out, y)

    opts = poptorch.Options().deviceIterations(2)
    opts.Training.gradientAccumulation(accumulation)
    net = WithLoss()
    training = poptorch.trainingModel(net, opts, torch.optim.SGD(net.parameters(), lr=0.01))
    rows = 2 * accumulation * 4
    for _ in range(calls):
        training(torch.randn(rows, 16), torch.randint(0, 4, (rows,)))
    return training


def test_four_times_the_accumulation_is_what_a_script_with_it_gets():
    recorded = train(accumulation=4)
    verdict = recorded.device.verdict()
    what_if = next(w for w in verdict.what_if if w["change"] ==
                   "four times the gradient accumulation")
    assert what_if["option"] == "opts.Training.gradientAccumulation" and what_if["value"] == 16
    by_hand = train(accumulation=16)
    assert what_if["items_per_s"] == pytest.approx(by_hand.device.timeline.throughput(),
                                                   rel=1e-9)
    assert what_if["speedup"] == pytest.approx(
        by_hand.device.timeline.throughput() / recorded.device.timeline.throughput(), rel=1e-9)


def test_the_verdict_is_worked_out_once_per_number_of_calls():
    model = poptorch.inferenceModel(LinearClassifier(4, 2).fc)
    model(torch.ones(2, 4))
    first = model.device.verdict()
    assert model.device.verdict() is first
    model(torch.ones(2, 4))
    assert model.device.verdict() is not first
