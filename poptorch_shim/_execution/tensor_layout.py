"""A model's parameters as the tensors PopLibs lays out on the tiles.

Each parameter becomes an :class:`ipusim.analysis.tile_memory.Variable` named by its
path in the model (``encoder.layer.3.attention.self.query.weight``), with the module
that owns it and the layout PopLibs gives it: an embedding table is a sliceable
tensor (its rows kept whole on a tile, its columns spread over the tiles), the
weights of a matmul or convolution are poplin's, every other parameter is mapped
linearly. Where the model runs as one stage they stand for its weights on the
tiles; a model split over several stages keeps each stage's measured weight bytes.
"""
from __future__ import annotations

import torch

from ipusim.analysis.tile_memory import LINEAR, MATMUL_WEIGHTS, SLICEABLE, Variable

_MATMUL_MODULES = (torch.nn.Linear, torch.nn.Bilinear, torch.nn.modules.conv._ConvNd)
_SLICED_MODULES = (torch.nn.Embedding, torch.nn.EmbeddingBag)


def parameter_variables(model: torch.nn.Module) -> tuple[Variable, ...]:
    """The model's parameters (each once, shared ones too) as always-live weights of
    stage 0 on IPU 0, each laid out as its module's operator lays it out."""
    out, seen = [], set()
    for path, module in model.named_modules():
        for name, parameter in module.named_parameters(recurse=False):
            if id(parameter) in seen:
                continue
            seen.add(id(parameter))
            layout, column = LINEAR, 1
            if isinstance(module, _SLICED_MODULES) and name == "weight":
                layout, column = SLICEABLE, int(parameter.shape[0])
            elif isinstance(module, _MATMUL_MODULES) and name == "weight":
                layout = MATMUL_WEIGHTS
            out.append(Variable(f"{path}.{name}" if path else name, 0,
                                parameter.numel() * parameter.element_size(),
                                parameter.element_size(), "weights", True, layout, column,
                                stage=0, module=path))
    return tuple(out)
