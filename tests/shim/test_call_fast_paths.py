"""What makes a call cheap gives exactly what the general path does.

A call splits its inputs and flattens its outputs without torch's generic
tree walk when they are plain tensors, and replays the simulated step from
the last one when the system starts it idle. Each shortcut is checked
against the general path: the same trees, the same micro-batches, the same
event record call after call.
"""
from collections import namedtuple

import pandas as pd
import pytest
import torch
from support.models import LinearClassifier
from torch.utils._pytree import tree_flatten, tree_map

import poptorch_shim as poptorch
from ipusim import Simulation
from poptorch_shim._execution.engine_config import cost_model
from poptorch_shim._execution.step_shape import StepShape, flatten, flatten_inputs, split

Pair = namedtuple("Pair", "a b")
T = torch.arange(12.0).reshape(4, 3)
U = torch.ones(4)


@pytest.mark.parametrize("value", [
    T, (T,), (T, U), (T, torch.tensor(2.0)), [T, U], (T, (U,)), (T, None), (T, 3), Pair(T, U),
    {"x": T}, (), torch.nn.Parameter(U)], ids=repr)
def test_flatten_is_torchs_tree_flatten(value):
    leaves, spec = flatten(value)
    expected_leaves, expected_spec = tree_flatten(value)
    assert spec == expected_spec
    assert len(leaves) == len(expected_leaves)
    assert all(a is b for a, b in zip(leaves, expected_leaves))


@pytest.mark.parametrize("args,kwargs", [
    ((T, U), {}), ((T,), {"target": U}), ((), {"b": U, "a": T}), ((T, [U]), {}),
    ((T, 0.5), {}), ((T,), {"mask": None}), ((T, (U, U)), {"y": {"z": T}}),
    ((T.clone().requires_grad_(), torch.nn.Parameter(U.clone())), {})], ids=repr)
def test_split_cuts_every_batched_tensor_as_the_generic_walk_does(args, kwargs):
    shape = StepShape(device_iterations=2, gradient_accumulation=1, replicas=2)
    leaves, spec = flatten_inputs(args, kwargs)
    assert spec == tree_flatten((args, kwargs))[1]
    assert all(a is b for a, b in zip(leaves, tree_flatten((args, kwargs))[0]))

    def cut(index, leaf):
        if isinstance(leaf, torch.Tensor) and leaf.dim() > 0:
            return leaf[index:index + 1]
        return leaf

    expected = [tree_map(lambda leaf, i=i: cut(i, leaf), (args, kwargs)) for i in range(4)]
    micro_batches = split((args, kwargs), shape)
    assert len(micro_batches) == 4
    for got, want in zip(micro_batches, expected):
        got_leaves, got_spec = tree_flatten(got)
        want_leaves, want_spec = tree_flatten(want)
        assert got_spec == want_spec
        for a, b in zip(got_leaves, want_leaves):
            if isinstance(b, torch.Tensor):
                assert torch.equal(a, b) and a.data_ptr() == b.data_ptr()  # views, no copies
            else:
                assert a is b


def data(n: int, seed: int = 0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(n, 6, generator=gen), torch.randint(0, 3, (n,), generator=gen)


def simulated_without_replay(model, steps: int) -> pd.DataFrame:
    """The event record of ``steps`` calls of ``model``'s engine, every call simulated."""
    device = model.device
    reference = Simulation(device.work, device.run, device.spec, cost_model(model.options),
                           replay_steps=False)
    for _ in range(steps):
        reference.step()
    return reference.timeline.events


def training(ga: int = 2, replicas: int = 2, di: int = 2, lr: float = 0.1):
    torch.manual_seed(0)
    net = LinearClassifier(6, 3)
    opts = poptorch.Options().deviceIterations(di).replicationFactor(replicas)
    opts.Training.gradientAccumulation(ga)
    return poptorch.trainingModel(net, opts, torch.optim.SGD(net.parameters(), lr=lr))


def test_the_record_of_every_call_is_what_simulating_each_call_gives():
    model = training()
    x, y = data(16)
    for _ in range(4):
        model(x, y)
    assert model.device.simulation._replay.template is not None  # calls were replayed
    pd.testing.assert_frame_equal(model.timeline.events, simulated_without_replay(model, 4))
    assert len(set(model.device.step_durations)) == 1


def test_a_new_learning_rate_changes_the_weights_not_the_timing():
    model = training()
    x, y = data(16)
    model(x, y)
    model.setOptimizer(torch.optim.SGD(model.model.parameters(), lr=0.5))
    before = model.model.fc.weight.detach().clone()
    model(x, y)
    model(x, y)
    assert not torch.equal(model.model.fc.weight, before)
    pd.testing.assert_frame_equal(model.timeline.events, simulated_without_replay(model, 3))


def test_a_changed_option_is_a_new_engine_with_its_own_calls():
    x, y = data(16)
    two, four = training(ga=2), training(ga=4, di=1)  # the same 16 samples per call
    for _ in range(3):
        two(x, y)
        four(x, y)
    assert two.device.step_durations[-1] != four.device.step_durations[-1]
    for model in (two, four):
        pd.testing.assert_frame_equal(model.timeline.events, simulated_without_replay(model, 3))


def test_a_refused_batch_size_leaves_the_calls_replaying_exactly():
    model = training()
    x, y = data(16)
    model(x, y)
    with pytest.raises(ValueError, match="micro-batches of 1 samples but the model was compiled "
                                         "for 2"):
        model(*data(8))
    model(x, y)
    pd.testing.assert_frame_equal(model.timeline.events, simulated_without_replay(model, 2))


class KeepsNormFrozen(torch.nn.Module):
    """Overrides ``train`` to keep its batch norm in eval mode."""

    def __init__(self):
        super().__init__()
        self.norm = torch.nn.BatchNorm1d(6)
        self.fc = torch.nn.Linear(6, 3)

    def train(self, mode: bool = True):
        super().train(mode)
        self.norm.eval()
        return self

    def forward(self, x, target):
        out = self.fc(self.norm(x))
        return out, torch.nn.functional.cross_entropy(out, target)


def test_a_model_that_overrides_train_gets_its_own_mode_on_every_call():
    net = KeepsNormFrozen()
    for module in net.modules():
        module.training = True  # every flag already says train: train() must still run
    model = poptorch.trainingModel(net, poptorch.Options(),
                                   torch.optim.SGD(net.parameters(), lr=0.1))
    x, y = data(4)
    model(x, y)
    model(x, y)
    assert torch.equal(net.norm.running_mean, torch.zeros(6))  # frozen: never updated
    assert all(module.training for module in net.modules())  # the flags come back as they were


def test_a_model_in_eval_mode_trains_and_comes_back_in_eval_mode():
    net = LinearClassifier(6, 3).eval()
    model = poptorch.trainingModel(net, poptorch.Options(),
                                   torch.optim.SGD(net.parameters(), lr=0.1))
    modes_seen = []
    net.fc.register_forward_hook(lambda module, args, out: modes_seen.append(module.training))
    model(*data(4))
    model(*data(4))
    assert modes_seen[-2:] == [True, True]
    assert not any(module.training for module in net.modules())
