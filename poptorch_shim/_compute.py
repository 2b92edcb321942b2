"""Real torch compute for one micro-batch, and what each stage of it costs.

A *runner* executes the forward (and in training the backward) of one
micro-batch and can profile the stages it runs. :class:`WholeModel` runs the
model as a single stage on IPU 0; the staged runner for Blocks lives in
:mod:`poptorch_shim._staged`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._pytree import tree_flatten

from ipusim import Cost
from poptorch_shim._cost_probe import measure, tensor_bytes


@dataclass(frozen=True)
class StageProfile:
    """What one stage costs per micro-batch and holds, measured on real tensors."""

    name: str
    ipu: int
    forward: Cost
    backward: Cost
    activation_bytes: int
    stash_bytes: int
    weight_bytes: int


class _IdentityLoss(torch.autograd.Function):
    """Marks a tensor as the model's loss; values and gradients pass unchanged."""

    @staticmethod
    def forward(ctx, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.clone()

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return grad


def identity_loss(x: torch.Tensor, reduction: str) -> torch.Tensor:
    """PopTorch's ``identity_loss``: ``x`` reduced by ``reduction`` ("sum",
    "mean" or "none") and marked as the loss to train on."""
    reducers = {"sum": torch.sum, "mean": torch.mean, "none": lambda t: t}
    if reduction not in reducers:
        raise ValueError(f"identity_loss: reduction must be one of {sorted(reducers)}, "
                         f"got {reduction!r}")
    return _IdentityLoss.apply(reducers[reduction](x))


def _is_marked(tensor: torch.Tensor) -> bool:
    """Whether a tensor was marked with identity_loss."""
    return tensor.grad_fn is not None and type(tensor.grad_fn).__name__ == "_IdentityLossBackward"


def _is_loss(tensor: torch.Tensor) -> bool:
    """Whether a tensor came out of a torch loss function or identity_loss."""
    return tensor.grad_fn is not None and "Loss" in type(tensor.grad_fn).__name__


def find_loss(output: Any) -> torch.Tensor:
    """The loss of a training model's output.

    The output itself if it is one tensor; otherwise, as PopTorch finds it by
    the operator that produced it, the one output marked with
    ``poptorch.identity_loss``, else the one computed by a loss function, else
    the only single-element output that requires grad. Anything ambiguous is
    an error, never a guess.
    """
    if isinstance(output, torch.Tensor):
        candidates = [output]
    else:
        candidates = [leaf for leaf in tree_flatten(output)[0]
                      if isinstance(leaf, torch.Tensor) and leaf.numel() == 1 and leaf.requires_grad]
        marked = [leaf for leaf in candidates if _is_marked(leaf)]
        losses = marked or [leaf for leaf in candidates if _is_loss(leaf)]
        if len(losses) > 1:
            raise RuntimeError(
                f"The model returns {len(losses)} losses; PopTorch trains on one. Combine them "
                "into a single loss, e.g. `return out, poptorch.identity_loss(loss_a + loss_b, "
                "reduction='sum')`")
        candidates = losses or candidates
        if len(candidates) > 1:
            raise RuntimeError(
                f"The model returns {len(candidates)} single-element tensors that require grad "
                "and none comes from a loss function: mark the one to train on with "
                "poptorch.identity_loss(loss, reduction='none')")
    if not candidates or not candidates[-1].requires_grad or candidates[-1].numel() != 1:
        raise RuntimeError(
            "A training model must return its loss: a single-element tensor that requires "
            "grad, alone or among the model's outputs, e.g. "
            "`return output, self.loss(output, target)`")
    return candidates[-1]


def parameter_bytes(module: torch.nn.Module) -> int:
    """Bytes of the module's parameters (what the IPU holds as weights)."""
    return sum(p.numel() * p.element_size() for p in module.parameters())


class WholeModel:
    """Runs the model as one stage on one IPU."""

    strategy = None  # no execution strategy: nothing to place

    def __init__(self, model: torch.nn.Module):
        self.model = model

    def stage_layout(self, args: tuple, kwargs: dict) -> list[tuple[str, int]]:
        """The stages (name, IPU) a micro-batch runs through, known before any compute."""
        return [("model", 0)]

    def run(self, args: tuple, kwargs: dict, training: bool, loss_scale: float) -> Any:
        """Forward one micro-batch; in training also backward, gradients scaled by ``loss_scale``."""
        if not training:
            with torch.no_grad():
                return self.model(*args, **kwargs)
        output = self.model(*args, **kwargs)
        (find_loss(output) * loss_scale).backward()
        return output

    def profile(self, args: tuple, kwargs: dict,
                training: bool) -> tuple[list[StageProfile], Any]:
        """Measure one micro-batch (on whatever model this runner holds): the
        stages' costs, and the output."""
        with torch.set_grad_enabled(training), measure() as forward:
            output = self.model(*args, **kwargs)
        backward_cost = Cost()
        if training:
            with measure() as backward:
                find_loss(output).backward()
            backward_cost = backward.cost
        stage = StageProfile("model", 0, forward.cost, backward_cost,
                             activation_bytes=tensor_bytes(output),
                             stash_bytes=forward.saved_bytes,
                             weight_bytes=parameter_bytes(self.model))
        return [stage], output
