"""``trainingModel`` and ``inferenceModel``: a torch model run the PopTorch way.

Each wraps the model in a :class:`PoplarExecutor` (the machinery is in
:mod:`poptorch_shim._execution.executor`): every call runs real torch compute
for each micro-batch and advances the simulated IPU system by one step.
"""
from __future__ import annotations

import copy

import torch

from poptorch_shim._execution.executor import PoplarExecutor
from poptorch_shim.options import Options

__all__ = ["PoplarExecutor", "inferenceModel", "trainingModel"]


def trainingModel(model: torch.nn.Module | PoplarExecutor, options: Options | None = None,
                  optimizer: torch.optim.Optimizer | None = None) -> PoplarExecutor:
    """Wrap ``model`` (or the model of an executor) for training on the simulated
    IPUs (SGD, lr 0.01, if no optimizer).

    As PopTorch does, the executor runs a shallow copy of the model: they share
    their submodules, parameters and buffers, so either sees the other's weights,
    but not the model's own plain attributes (its ``training`` flag); ``.model``
    is the user's model.
    """
    model = _users_model(model)
    return PoplarExecutor(copy.copy(model), options, training=True, optimizer=optimizer,
                          user_model=model)


def inferenceModel(model: torch.nn.Module | PoplarExecutor,
                   options: Options | None = None) -> PoplarExecutor:
    """Wrap ``model`` (or the model of an executor) for inference on the simulated
    IPUs. As PopTorch does, the executor runs, and its ``.model`` is, a shallow
    copy of the model: the weights are shared (a training model's updates show
    at once), the model's own plain attributes are not."""
    return PoplarExecutor(copy.copy(_users_model(model)), options, training=False)


def _users_model(model: torch.nn.Module | PoplarExecutor) -> torch.nn.Module:
    return model._user_model if isinstance(model, PoplarExecutor) else model
