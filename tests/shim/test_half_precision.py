"""A model in half precision (``model.half()`` with half inputs) runs as in
PopTorch: training and inference compute in float16, outputs and the loss come
back in float16, every optimizer updates float16 weights, and pipelined and
timing-only models keep the dtype."""
import copy

import pytest
import torch

import poptorch_shim as poptorch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3)
        self.norm = torch.nn.BatchNorm2d(4)
        self.fc = torch.nn.Linear(4 * 4 * 4, 5)
        self.loss = torch.nn.CrossEntropyLoss()

    def forward(self, x, labels=None):
        x = torch.relu(self.norm(self.conv(x)))
        out = self.fc(x.flatten(1))
        if labels is None:
            return out
        return out, self.loss(out, labels)


def data(n, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randn(n, 1, 6, 6, generator=gen).half(),
            torch.randint(0, 5, (n,), generator=gen))


def test_training_matches_plain_torch_in_half():
    """Forward and backward in FP16 as torch computes them; the update, as on
    the IPU, in FP32 and rounded to FP16 once."""
    torch.manual_seed(0)
    net = Net().half()
    reference = copy.deepcopy(net)
    x, y = data(8)
    opts = poptorch.Options().deviceIterations(2)
    model = poptorch.trainingModel(net, opts, poptorch.optim.SGD(net.parameters(), lr=0.05))
    out, loss = model(x, y)
    assert out.dtype == loss.dtype == torch.float16 and out.shape == (4, 5) and loss.dim() == 0

    for xs, ys in zip(x.chunk(2), y.chunk(2)):
        reference.zero_grad()
        reference(xs, ys)[1].backward()
        with torch.no_grad():
            for p in reference.parameters():
                p.copy_((p.float() - 0.05 * p.grad.float()).half())
    for ours, theirs in zip(net.parameters(), reference.parameters()):
        assert ours.dtype == torch.float16
        torch.testing.assert_close(ours, theirs)


def test_inference_returns_half_outputs_of_plain_torch():
    torch.manual_seed(0)
    net = Net().half().eval()
    x, _ = data(6)
    out = poptorch.inferenceModel(net, poptorch.Options().deviceIterations(3))(x)
    assert out.dtype == torch.float16
    torch.testing.assert_close(out, net(x))


@pytest.mark.parametrize("optimizer", [poptorch.optim.SGD, poptorch.optim.Adam,
                                       poptorch.optim.AdamW, poptorch.optim.RMSprop,
                                       poptorch.optim.LAMB, torch.optim.SGD])
def test_every_optimizer_updates_half_weights(optimizer):
    torch.manual_seed(0)
    net = Net().half()
    before = copy.deepcopy(net)
    model = poptorch.trainingModel(net, poptorch.Options(), optimizer(net.parameters(), lr=0.01))
    _, loss = model(*data(4))
    assert loss.dtype == torch.float16 and torch.isfinite(loss)
    for new, old in zip(net.parameters(), before.parameters()):
        assert new.dtype == torch.float16 and torch.isfinite(new).all()
    assert not torch.equal(net.fc.weight, before.fc.weight)


def test_pipelined_half_model_trains():
    class Piped(Net):
        def forward(self, x, labels=None):
            with poptorch.Block("convs", ipu_id=0):
                x = torch.relu(self.norm(self.conv(x)))
            with poptorch.Block("head", ipu_id=1):
                out = self.fc(x.flatten(1))
                return out, self.loss(out, labels)

    torch.manual_seed(0)
    net = Piped().half()
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(3)
    model = poptorch.trainingModel(net, opts, poptorch.optim.SGD(net.parameters(), lr=0.01))
    out, loss = model(*data(6))
    assert out.dtype == loss.dtype == torch.float16
    assert [stage.name for stage in model.device.work.stages] == ["convs", "head"]


def test_timing_only_half_model_keeps_the_dtype():
    opts = poptorch.Options().deviceIterations(2)
    opts.Simulation.timingOnly()
    out = poptorch.inferenceModel(Net().half(), opts)(data(4)[0])
    assert out.dtype == torch.float16 and out.shape == (4, 5)
