"""``Options.setAvailableMemoryProportion``: each IPU's matmuls are planned within
the proportion of tile memory it gives, as poplin plans them."""
from __future__ import annotations

import pytest
import torch

import poptorch_shim as poptorch

FORWARD = "forward"


class TwoLayers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(4096, 4096)
        self.second = torch.nn.Linear(4096, 4096)

    def forward(self, x):
        with poptorch.Block(ipu_id=0):
            x = self.first(x)
        with poptorch.Block(ipu_id=1):
            return self.second(x)


def forward_us(proportions: dict | None) -> list[float]:
    """Each stage's forward of one micro-batch on the simulated timeline, in µs."""
    opts = poptorch.Options()
    opts.Simulation.timingOnly(True)
    opts.setExecutionStrategy(poptorch.ShardedExecution())
    if proportions is not None:
        opts.setAvailableMemoryProportion(proportions)
    model = poptorch.inferenceModel(TwoLayers(), opts)
    model(torch.zeros(1024, 4096))
    events = model.timeline.events
    forward = events[events["kind"] == FORWARD]
    return [float((rows["end_ps"] - rows["start_ps"]).sum()) / 1e6
            for _, rows in forward.groupby("ipu")]


def test_less_memory_on_one_ipu_slows_only_its_own_matmuls():
    default = forward_us(None)
    tight = forward_us({"IPU1": 0.02})
    assert tight[0] == default[0]
    assert tight[1] > default[1]
    # The default is PopTorch's 0.6, however it is given.
    assert forward_us({"IPU0": 0.6, "IPU1": 0.6}) == default


class OneBounded(torch.nn.Module):
    """Two equal matmuls on one IPU; ``poptorch.set_available_memory`` on the output
    of the first (through its bias add and a ReLU PopTorch looks past for it)."""

    def __init__(self, proportion: float | None, after_relu: bool = False):
        super().__init__()
        self.first = torch.nn.Linear(4096, 4096)
        self.second = torch.nn.Linear(4096, 4096, bias=False)
        self.proportion, self.after_relu = proportion, after_relu

    def forward(self, x):
        x = self.first(x)
        if self.after_relu:
            x = torch.relu(x)
        if self.proportion is not None:
            x = poptorch.set_available_memory(x, self.proportion)
        return self.second(x)


def matmul_kernels(model: torch.nn.Module) -> list:
    opts = poptorch.Options()
    opts.Simulation.timingOnly(True)
    executor = poptorch.inferenceModel(model, opts)
    executor(torch.zeros(1024, 4096))
    forward = executor.device.work.stages[0].forward
    return sorted(((kernel.available_memory or 0.0), kernel.op) for kernel, count in
                  forward.kernels if kernel.kind.value == "matmul" for _ in range(count))


def test_set_available_memory_bounds_the_matmul_that_made_the_tensor_alone():
    assert matmul_kernels(OneBounded(None)) == [(0.0, "aten::addmm"), (0.0, "aten::mm")]
    assert matmul_kernels(OneBounded(0.02)) == [(0.0, "aten::mm"), (0.02, "aten::addmm")]
    # A ReLU between: PopTorch looks up to two operators back for the matmul.
    assert matmul_kernels(OneBounded(0.02, after_relu=True)) == [(0.0, "aten::mm"),
                                                                 (0.02, "aten::addmm")]


def test_the_bound_slows_that_matmul_on_the_timeline():
    def forward_ps(proportion):
        opts = poptorch.Options()
        opts.Simulation.timingOnly(True)
        executor = poptorch.inferenceModel(OneBounded(proportion), opts)
        executor(torch.zeros(1024, 4096))
        events = executor.timeline.events
        rows = events[events["kind"] == FORWARD]
        return int((rows["end_ps"] - rows["start_ps"]).sum())
    assert forward_ps(0.02) > forward_ps(None) == forward_ps(0.6)


def test_set_available_memory_takes_a_tensor_and_a_proportion():
    with pytest.raises(poptorch.Error, match="You may only set available memory for "
                                             "torch.tensor values. <class 'int'> is not"):
        poptorch.set_available_memory(3, 0.5)
    with pytest.raises(poptorch.Error, match=r"available_memory_proportion must be a proportion "
                                             r"in \(0, 1\], got 1.5"):
        poptorch.set_available_memory(torch.ones(2), 1.5)
    x = torch.ones(2)
    assert poptorch.set_available_memory(x, 0.3) is x   # outside a model: the identity
