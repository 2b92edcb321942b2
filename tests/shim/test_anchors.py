"""Anchored tensors: ``Options.anchorTensor``, ``getTensorNames`` and
``getAnchoredTensor`` return the torch compute's own gradients, activations
and weights, per micro-batch and replica, through PopTorch's output modes."""
import copy
import json

import pytest
import torch

import poptorch_shim as poptorch
from poptorch_shim import OutputMode


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(4, 5)
        self.relu = torch.nn.ReLU()
        self.fc2 = torch.nn.Linear(5, 3)
        self.loss = torch.nn.MSELoss()

    def forward(self, x, labels=None):
        out = self.fc2(self.relu(self.fc1(x)))
        if self.training:
            return out, self.loss(out, labels)
        return out


def data(n, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(n, 4, generator=gen), torch.randn(n, 3, generator=gen)


def micro_batch_gradients(model, x, y, micro_batches):
    """Plain torch: each micro-batch's gradient of fc1.weight, before any update."""
    grads = []
    for xs, ys in zip(x.chunk(micro_batches), y.chunk(micro_batches)):
        model.zero_grad()
        model(xs, ys)[1].backward()
        grads.append(model.fc1.weight.grad.clone())
    return grads


def test_tensor_names_follow_poptorch():
    model = poptorch.trainingModel(Net())
    with pytest.raises(poptorch.Error, match="Model must be compiled before calling "
                                             "getTensorNames"):
        model.getTensorNames()
    model.compile(*data(2))
    names = model.getTensorNames()
    for name in ["fc1.weight", "fc2.bias", "Gradient___fc1.weight", "UpdatedVar___fc2.bias",
                 "fc1/Linear:0", "relu/ReLU:0", "fc2/Linear:0", "loss/MSELoss:0"]:
        assert name in names, name
    assert names.index("fc1/Linear:0") < names.index("relu/ReLU:0") < names.index("fc2/Linear:0")
    inference = poptorch.inferenceModel(Net())
    inference.compile(data(2)[0])
    assert not [name for name in inference.getTensorNames() if "___" in name]


@pytest.mark.parametrize("ga", [1, 3])
def test_gradient_is_each_micro_batch_gradient_of_plain_torch(ga):
    """PopART's Gradient___ tensor is the gradient of one micro-batch, before the
    accumulation and the Mean reduction's division; the Default (Final) output
    mode of training returns the last micro-batch's."""
    torch.manual_seed(0)
    net = Net()
    reference = copy.deepcopy(net)
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(ga)
    opts.anchorTensor("last", "Gradient___fc1.weight")
    opts.anchorTensor("each", "Gradient___fc1.weight", OutputMode.All)
    opts.anchorTensor("total", "Gradient___fc1.weight", OutputMode.Sum)
    model = poptorch.trainingModel(net, opts, torch.optim.SGD(net.parameters(), lr=0.1))
    x, y = data(2 * ga)
    model(x, y)
    expected = micro_batch_gradients(reference, x, y, ga)
    torch.testing.assert_close(model.getAnchoredTensor("last"), expected[-1])
    torch.testing.assert_close(model.getAnchoredTensor("each"), torch.cat(expected))
    torch.testing.assert_close(model.getAnchoredTensor("total"), sum(expected))


def test_every_n_and_replicas_order_values_as_outputs():
    """Values come per micro-batch with the replicas innermost, as outputs do;
    EveryN keeps every N-th micro-batch's."""
    torch.manual_seed(0)
    net = Net()
    reference = copy.deepcopy(net)
    opts = poptorch.Options().deviceIterations(4).replicationFactor(2)
    opts.anchorTensor("relu", "relu/ReLU:0", OutputMode.EveryN, 2)
    model = poptorch.inferenceModel(net, opts)
    x, _ = data(16)
    model(x)
    relu = torch.relu(reference.fc1(x)).detach()
    # micro-batches of 2 rows, stream order (iteration, replica): EveryN(2) keeps
    # iterations 1 and 3, both replicas each.
    chunks = relu.chunk(8)
    torch.testing.assert_close(model.getAnchoredTensor("relu"),
                               torch.cat([chunks[2], chunks[3], chunks[6], chunks[7]]))


def test_updated_weight_is_the_weight_after_each_update():
    torch.manual_seed(0)
    net = Net()
    opts = poptorch.Options().deviceIterations(3)
    opts.anchorTensor("new_bias", "UpdatedVar___fc2.bias", OutputMode.All)
    opts.anchorTensor("old_style", "Gradient___model.fc2.bias")   # PopTorch 2's name
    model = poptorch.trainingModel(net, opts, torch.optim.SGD(net.parameters(), lr=0.5))
    model(*data(6))
    updates = model.getAnchoredTensor("new_bias")
    assert updates.shape == (9,)   # three updates of a bias of 3, concatenated
    torch.testing.assert_close(updates[-3:], net.fc2.bias.detach())
    assert not torch.equal(updates[:3], updates[-3:])
    assert model.getAnchoredTensor("old_style").shape == (3,)


def test_anchoring_an_unknown_tensor_names_the_list():
    opts = poptorch.Options()
    opts.anchorTensor("g", "Gradient___fc9.weight")
    model = poptorch.trainingModel(Net(), opts)
    with pytest.raises(poptorch.Error, match=r"no tensor named 'Gradient___fc9.weight'.*"
                                             r"getTensorNames"):
        model(*data(2))


def test_reading_an_anchor_that_was_not_anchored_or_not_run():
    opts = poptorch.Options()
    opts.anchorTensor("w", "fc1.weight")
    model = poptorch.inferenceModel(Net(), opts)
    model.compile(data(2)[0])
    with pytest.raises(poptorch.Error, match="No tensor with name w found: the model has not "
                                             "run"):
        model.getAnchoredTensor("w")
    model(data(2)[0])
    torch.testing.assert_close(model.getAnchoredTensor("w"), model.model.fc1.weight)
    with pytest.raises(poptorch.Error, match=r"No tensor with name x found.*\['w'\]"):
        model.getAnchoredTensor("x")


def test_anchors_after_the_model_is_made_are_refused():
    opts = poptorch.Options()
    poptorch.trainingModel(Net(), opts)
    with pytest.raises(AttributeError, match="Can't modify frozen Options: "
                                             "Options.anchorTensor"):
        opts.anchorTensor("g", "Gradient___fc1.bias")


def test_a_period_that_does_not_divide_the_values_is_refused():
    opts = poptorch.Options().deviceIterations(3)
    opts.anchorTensor("u", "UpdatedVar___fc1.bias", OutputMode.EveryN, 2)
    model = poptorch.trainingModel(Net(), opts)
    with pytest.raises(ValueError, match="return period 2 must divide the 3 values"):
        model(*data(6))


def test_anchors_of_a_pipelined_model_are_its_stages_tensors():
    """Split into stages on two IPUs, the model's gradients and activations
    are still the plain torch ones of each micro-batch."""

    class Piped(Net):
        def forward(self, x, labels=None):
            with poptorch.Block("A", ipu_id=0):
                hidden = self.relu(self.fc1(x))
            with poptorch.Block("B", ipu_id=1):
                out = self.fc2(hidden)
                return out, self.loss(out, labels)

    torch.manual_seed(0)
    net = Piped()
    reference = copy.deepcopy(net)
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(3)
    opts.anchorTensor("grads", "Gradient___fc1.weight", OutputMode.All)
    opts.anchorTensor("hidden", "relu/ReLU:0", OutputMode.All)
    model = poptorch.trainingModel(net, opts, torch.optim.SGD(net.parameters(), lr=0.1))
    x, y = data(6)
    model(x, y)
    assert [stage.name for stage in model.device.work.stages] == ["A", "B"]
    torch.testing.assert_close(model.getAnchoredTensor("grads"),
                               torch.cat(micro_batch_gradients(reference, x, y, 3)))
    torch.testing.assert_close(model.getAnchoredTensor("hidden"),
                               torch.relu(reference.fc1(x)).detach())


def test_anchors_reach_the_report_as_plain_values():
    """The report stores the options as JSON: anchors go as plain dicts."""
    opts = poptorch.Options()
    opts.anchorTensor("g", "Gradient___fc1.bias", OutputMode.Sum)
    opts.anchorTensor("w", "fc1.weight")
    assert json.loads(json.dumps(opts.toDict()))["anchored_tensors"] == {
        "g": {"long_name": "Gradient___fc1.bias", "output_mode": "Sum",
              "output_return_period": 1},
        "w": {"long_name": "fc1.weight", "output_mode": None, "output_return_period": 1}}
