"""``Options.setAvailableMemoryProportion``: each IPU's matmuls are planned within
the proportion of tile memory it gives, as poplin plans them."""
from __future__ import annotations

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
