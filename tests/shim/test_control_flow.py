"""``poptorch.for_loop`` and ``poptorch.cond`` with PopTorch's semantics (its
loop_test.py and if_test.py decide the expectations): the loop's body priced
per trip, the branch the condition takes priced as that branch, both for
inference only."""
import pytest
import torch

import poptorch_shim as poptorch
from ipusim import KernelKind


class Doubling(torch.nn.Module):
    def forward(self, x):
        return poptorch.for_loop(10, lambda x: x * 2, [x])[0]


def test_the_body_runs_count_times_on_its_last_outputs():
    assert poptorch.inferenceModel(Doubling())(torch.tensor([1.0])) == 2 ** 10


def test_several_inputs_loop_together_as_on_the_host():
    class Model(torch.nn.Module):
        def forward(self, x, y, z, w):
            return poptorch.for_loop(10, lambda x, y, z, w: (x * y, y + z, x * w, w + 1),
                                     [x, y, z, w])

    inputs = [torch.tensor([v]) for v in (0.1, 0.2, 0.3, 0.4)]
    expected = [t.clone() for t in inputs]
    for _ in range(10):
        x, y, z, w = expected
        expected = [x * y, y + z, x * w, w + 1]
    for got, want in zip(poptorch.inferenceModel(Model())(*inputs), expected):
        torch.testing.assert_close(got, want)


def test_the_bodys_inputs_are_passed_by_value():
    class Model(torch.nn.Module):
        def forward(self, x):
            def body(y):
                y += 1
                return y
            return poptorch.for_loop(3, body, [x])[0]

    x = torch.ones(1, 5, dtype=torch.int32)
    out = poptorch.inferenceModel(Model())(x)
    assert torch.equal(x, torch.ones(1, 5, dtype=torch.int32))
    assert torch.equal(out, torch.full((1, 5), 4, dtype=torch.int32))


class Looped(torch.nn.Module):
    def __init__(self, trips: int):
        super().__init__()
        self.layer = torch.nn.Linear(64, 64)
        self.trips = trips

    def forward(self, x):
        return poptorch.for_loop(self.trips, lambda x: torch.relu(self.layer(x)), [x])[0]


def matmuls(model: torch.nn.Module) -> int:
    executor = poptorch.inferenceModel(model)
    executor(torch.ones(8, 64))
    forward = executor.device.work.stages[0].forward
    return sum(count for kernel, count in forward.kernels if kernel.kind is KernelKind.MATMUL)


def test_the_body_is_priced_per_trip():
    assert [matmuls(Looped(trips)) for trips in (1, 3, 5)] == [1, 3, 5]


def test_a_training_model_refuses_the_loop_in_poptorchs_words():
    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layer1 = torch.nn.Linear(4, 4)

        def forward(self, x):
            out = poptorch.for_loop(2, self.layer1, [x])[0]
            return out, poptorch.identity_loss(out, reduction="sum")

    with pytest.raises(poptorch.Error, match=r"poptorch.for_loop\(\) is only supported in "
                                             r"inference"):
        poptorch.trainingModel(Model())(torch.ones(1, 4))


def test_the_loop_checks_its_arguments_as_poptorch_does():
    with pytest.raises(ValueError, match=r"to be a list of tensors. \(Object is not list\)"):
        poptorch.for_loop(2, lambda x: x, torch.ones(1))
    with pytest.raises(ValueError, match="at index 1 is not torch.tensor"):
        poptorch.for_loop(2, lambda x, y: (x, y), [torch.ones(1), 2])
    with pytest.raises(poptorch.Error, match="the body returned 1 tensors for 2 inputs"):
        poptorch.for_loop(2, lambda x, y: x, [torch.ones(1), torch.ones(1)])


class Branching(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.wide = torch.nn.Linear(16, 16)

    def forward(self, condition, x):
        return poptorch.cond(condition, lambda x: self.wide(x) * 2, [x],
                             lambda x: x - 1, [x])[0]


def test_the_condition_picks_the_branch_on_the_ipu_and_on_the_cpu():
    model = Branching()
    executor = poptorch.inferenceModel(model)
    x = torch.ones(2, 16)
    for flag in (True, False):
        condition = torch.tensor([flag])
        expected = model.wide(x) * 2 if flag else x - 1
        torch.testing.assert_close(executor(condition, x), expected)
        torch.testing.assert_close(model(condition, x), expected)   # CPU: PopTorch's path


def test_the_branch_taken_is_what_is_priced():
    def matmul_count(flag: bool) -> int:
        executor = poptorch.inferenceModel(Branching())
        executor(torch.tensor([flag]), torch.ones(2, 16))
        forward = executor.device.work.stages[0].forward
        return sum(c for k, c in forward.kernels if k.kind is KernelKind.MATMUL)
    assert (matmul_count(True), matmul_count(False)) == (1, 0)


def test_cond_in_training_and_with_bad_inputs_is_refused_as_poptorch_refuses_it():
    class Model(Branching):
        def forward(self, condition, x):
            out = super().forward(condition, x)
            return out, poptorch.identity_loss(out, reduction="sum")

    with pytest.raises(poptorch.Error, match=r"poptorch.cond\(\) is only supported in "
                                             r"inference"):
        poptorch.trainingModel(Model())(torch.tensor([True]), torch.ones(1, 16))
    with pytest.raises(ValueError, match="then_inps and else_inps tensors to be a list"):
        poptorch.cond(torch.tensor([True]), lambda: 1, (), lambda: 2, [])
