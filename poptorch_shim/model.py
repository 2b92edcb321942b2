"""``trainingModel`` and ``inferenceModel``: a torch model run the PopTorch way.

Each wraps the model in a :class:`PoplarExecutor` (the machinery is in
:mod:`poptorch_shim._execution.executor`): every call runs real torch compute
for each micro-batch and advances the simulated IPU system by one step.
"""
from __future__ import annotations

import torch

from poptorch_shim._execution.executor import PoplarExecutor
from poptorch_shim.options import Options

__all__ = ["PoplarExecutor", "inferenceModel", "trainingModel"]


def trainingModel(model: torch.nn.Module, options: Options | None = None,
                  optimizer: torch.optim.Optimizer | None = None) -> PoplarExecutor:
    """Wrap ``model`` for training on the simulated IPUs (SGD, lr 0.01, if no optimizer)."""
    return PoplarExecutor(model, options, training=True, optimizer=optimizer)


def inferenceModel(model: torch.nn.Module, options: Options | None = None) -> PoplarExecutor:
    """Wrap ``model`` for inference on the simulated IPUs."""
    return PoplarExecutor(model, options, training=False)
