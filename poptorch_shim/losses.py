"""The loss of a training model: ``poptorch.identity_loss`` marks it, and
:func:`find_loss` finds it among the model's outputs as PopTorch does, by the
operator that made it (the executor keeps where it found it, in
``_execution/loss_finder.py``).
"""
from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from poptorch_shim._core.poptorch_ops import IDENTITY_LOSS, poptorch_op


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
    if isinstance(x, torch.fx.Proxy):
        # Traced to split the model at its Blocks: one operation of the graph, so
        # that the stage computing it marks its output as the loss when it runs.
        return x.tracer.create_proxy("call_function", identity_loss, (x, reduction), {})
    with poptorch_op(IDENTITY_LOSS):  # one PopTorch operation, whatever torch runs for it
        return _IdentityLoss.apply(reducers[reduction](x))


def _is_marked(tensor: torch.Tensor) -> bool:
    """Whether a tensor was marked with identity_loss."""
    return tensor.grad_fn is not None and type(tensor.grad_fn).__name__ == "_IdentityLossBackward"


#: Names of the torch loss functions: the functions of ``torch.nn.functional``
#: that the loss modules of ``torch.nn.modules.loss`` call. They are every
#: public name ending in ``_loss`` (``l1_loss``, ``nll_loss``, ...), every one
#: naming a ``cross_entropy`` (``binary_cross_entropy_with_logits``,
#: ``linear_cross_entropy``, ...) and ``kl_div``.
LOSS_FUNCTION_NAMES: frozenset[str] = frozenset(
    name for name in dir(F)
    if not name.startswith("_") and (name.endswith("_loss") or "cross_entropy" in name)
) | {"kl_div"}

_LOSS_FUNCTIONS: frozenset[Callable] = frozenset(getattr(F, name) for name in LOSS_FUNCTION_NAMES)


class LossRecorder(TorchFunctionMode):
    """Records, while entered, the tensors that torch loss functions return,
    for :func:`find_loss`: ``with LossRecorder() as losses: output = model(x)``.

    A loss function's autograd node need not say "Loss" (``F.l1_loss`` ends in
    a mean), so losses are known by the call that made them. Only the loss
    functions are looked at; every other call passes straight through. A
    loss function calling another runs with this mode off, and either way
    only the tensor handed back counts. Tensors are held weakly, by identity.
    """

    def __init__(self) -> None:
        super().__init__()
        self._losses: weakref.WeakValueDictionary[int, torch.Tensor] = \
            weakref.WeakValueDictionary()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in _LOSS_FUNCTIONS and isinstance(out, torch.Tensor):
            self._losses[id(out)] = out
        return out

    def __contains__(self, tensor: object) -> bool:
        # by identity: a tensor's == compares values
        return self._losses.get(id(tensor)) is tensor


def _is_loss(tensor: torch.Tensor, losses: LossRecorder | None) -> bool:
    """Whether a tensor came out of a torch loss function: one ``losses``
    recorded, or one whose autograd node is named for a loss."""
    if losses is not None and tensor in losses:
        return True
    return tensor.grad_fn is not None and "Loss" in type(tensor.grad_fn).__name__


def _feeds(term: torch.Tensor, tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` was computed from ``term`` (its autograd node is upstream)."""
    target, seen = term.grad_fn, set()
    pending = [tensor.grad_fn]
    while pending and target is not None:
        node = pending.pop()
        if node is None or id(node) in seen:
            continue
        if node is target:
            return True
        seen.add(id(node))
        pending.extend(upstream for upstream, _ in node.next_functions)
    return False


def find_loss(output: Any, losses: LossRecorder | None = None) -> torch.Tensor:
    """The loss of a training model's output.

    The output itself if it is one tensor; otherwise, as PopTorch finds it by
    the operator that produced it, the one output marked with
    ``poptorch.identity_loss``, else the one computed by a loss function
    (recorded in ``losses`` while the forward ran, or named so by its
    autograd node) that no other output was computed from, else the only
    single-element output that requires grad. Anything ambiguous is an
    error, never a guess: a loss logged beside the total it is a term of
    does not make that total the loss, nor itself.
    """
    if isinstance(output, torch.Tensor):
        candidates = [output]
    else:
        candidates = [leaf for leaf in tree_flatten(output)[0]
                      if isinstance(leaf, torch.Tensor) and leaf.numel() == 1
                      and leaf.requires_grad]
        marked = [leaf for leaf in candidates if _is_marked(leaf)]
        found = marked or [leaf for leaf in candidates if _is_loss(leaf, losses)
                           and not any(other is not leaf and _feeds(leaf, other)
                                       for other in candidates)]
        if len(found) > 1:
            raise RuntimeError(
                f"The model returns {len(found)} losses; PopTorch trains on one. Combine them "
                "into a single loss, e.g. `return out, poptorch.identity_loss(loss_a + loss_b, "
                "reduction='sum')`")
        candidates = found or candidates
        if len(candidates) > 1:
            raise RuntimeError(
                f"The model returns {len(candidates)} single-element tensors that require grad "
                "and none is the output of a loss function that no other output depends on: "
                "mark the one to train on with poptorch.identity_loss(loss, reduction='none')")
    if not candidates or not candidates[-1].requires_grad or candidates[-1].numel() != 1:
        raise RuntimeError(
            "A training model must return its loss: a single-element tensor that requires "
            "grad, alone or among the model's outputs, e.g. "
            "`return output, self.loss(output, target)`")
    return candidates[-1]
