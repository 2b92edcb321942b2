"""Small models for the sweep tests: a factory as ``ipusim sweep`` calls it."""
import torch
from torch import nn

import poptorch_shim as poptorch


class Layers(nn.Module):
    """A stack of linear layers with a loss, each layer a block."""

    def __init__(self, width: int, layers: int):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(layers))

    def forward(self, x, labels):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x, nn.functional.cross_entropy(x, labels)


def pipelined(width: int = 32, layers: int = 4, ipus: int = 2, micro_batch: int = 4,
              sram_per_tile_bytes: int | None = None, accumulation: int = 8):
    """The layers over ``ipus`` IPUs (blocks L0, L1, ...), on 8 simulated Mk2
    IPUs (with less SRAM per tile if asked), SGD with momentum."""
    model = Layers(width, layers)
    for index, layer in enumerate(model.layers):
        poptorch.BeginBlock(layer, f"L{index}", ipu_id=index * ipus // layers)
    opts = poptorch.Options()
    overrides = {} if sram_per_tile_bytes is None else {"sram_per_tile_bytes": sram_per_tile_bytes}
    opts.Simulation.system("mk2", 8, **overrides)
    opts.Training.gradientAccumulation(accumulation)
    optimizer = poptorch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    inputs = (torch.randn(micro_batch, width), torch.randint(0, width, (micro_batch,)))
    return model, inputs, opts, optimizer


def one_ipu(width: int = 32, layers: int = 2, micro_batch: int = 4):
    """The layers on one IPU and no blocks: nothing is pipelined."""
    model = Layers(width, layers)
    opts = poptorch.Options()
    opts.Simulation.system("mk2", 8)
    opts.Training.gradientAccumulation(4)
    optimizer = poptorch.optim.SGD(model.parameters(), lr=0.1)
    inputs = (torch.randn(micro_batch, width), torch.randint(0, width, (micro_batch,)))
    return model, inputs, opts, optimizer
