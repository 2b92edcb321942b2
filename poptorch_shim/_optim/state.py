"""Optimizer-state accounting for ``poptorch.optim``: which state tensors the
IPU keeps per weight and in which data type, the bytes they and the gradient
accumulators take, and the checks PopTorch makes when a model is compiled with
an optimizer.

Kept apart from :mod:`poptorch_shim.optim` so the optimizer classes stay about
the update rules; the model's memory estimate and compile step use this. It
sits below the optimizer classes (which need ``state_slots`` to round FP16
state after each step): an optimizer of PopTorch's own that keeps Adam's
moments (``LAMB``) says so by deriving from :class:`AdamMoments`.
"""
from collections.abc import Iterable
from typing import Any

import torch

from ipusim.cost import optimizer as optimizer_programs
from ipusim.cost.optimizer import UpdateProgram


class AdamMoments:
    """Marks an optimizer class that keeps Adam's two moments per weight
    (``exp_avg`` and ``exp_avg_sq``), as torch's Adam and AdamW do."""


def _require_supported(optimizer: torch.optim.Optimizer) -> None:
    if not isinstance(optimizer, (torch.optim.SGD, torch.optim.Adam, torch.optim.AdamW,
                                  torch.optim.RMSprop, AdamMoments)):
        raise ValueError(f"Unsupported optimizer type {type(optimizer).__name__}. Types "
                         "supported: torch.optim.SGD, Adam, AdamW, RMSprop and "
                         "poptorch.optim.SGD, Adam, AdamW, RMSprop, LAMB. Use one of those.")


def state_slots(optimizer: torch.optim.Optimizer,
                group: dict[str, Any]) -> dict[str, torch.dtype | None]:
    """The state tensors the IPU keeps per weight of ``group``, by torch state
    key, with their data type (None: the weight's own type). Torch optimizers
    get PopTorch's defaults (FP32 state, separate SGD variant)."""
    _require_supported(optimizer)
    first = getattr(optimizer, "first_order_momentum_accum_type", torch.float32)
    second = getattr(optimizer, "second_order_momentum_accum_type", torch.float32)
    if isinstance(optimizer, (AdamMoments, torch.optim.Adam, torch.optim.AdamW)):
        return {"exp_avg": first, "exp_avg_sq": second}
    if isinstance(optimizer, torch.optim.SGD):
        if group["momentum"] == 0:
            return {}
        if getattr(optimizer, "use_combined_accum", False):
            return {"momentum_buffer": None}
        return {"momentum_buffer": getattr(optimizer, "velocity_accum_type", torch.float32)}
    slots = {"square_avg": first}  # RMSprop
    if group["centered"]:
        slots["grad_avg"] = second
    if group["momentum"] > 0:
        slots["momentum_buffer"] = torch.float32
    return slots


def _selected(optimizer: torch.optim.Optimizer, params: Iterable[torch.Tensor] | None):
    """(group, param) pairs of ``optimizer``, limited to ``params`` if given."""
    wanted = None if params is None else {id(p) for p in params}
    for group in optimizer.param_groups:
        for p in group["params"]:
            if wanted is None or id(p) in wanted:
                yield group, p


def optimizer_state_bytes(optimizer: torch.optim.Optimizer,
                          params: Iterable[torch.Tensor] | None = None) -> int:
    """Bytes of optimizer state the IPU keeps for ``optimizer``'s weights (or
    the subset ``params``, e.g. one pipeline stage's): SGD 0 (1 velocity with
    momentum), Adam/AdamW/LAMB 2 moments, RMSprop 1 (+1 centred, +1 momentum),
    each in its declared accumulator type. Works for torch's own optimizers."""
    total = 0
    for group, p in _selected(optimizer, params):
        for dtype in state_slots(optimizer, group).values():
            total += p.numel() * (dtype or p.dtype).itemsize
    return total


def accumulator_bytes(optimizer: torch.optim.Optimizer,
                      params: Iterable[torch.Tensor] | None = None) -> int:
    """Bytes of the gradient accumulators the IPU adds when
    ``gradientAccumulation > 1``: one ``accum_type`` tensor per weight, except
    that combined-variant SGD accumulates into its velocity (a weight-typed
    tensor of its own only when momentum is 0)."""
    _require_supported(optimizer)
    combined = getattr(optimizer, "use_combined_accum", False)
    accum = getattr(optimizer, "accum_type", torch.float32)
    total = 0
    for group, p in _selected(optimizer, params):
        if combined:
            total += 0 if group["momentum"] else p.numel() * p.element_size()
        else:
            total += p.numel() * accum.itemsize
    return total


def check_ipu_optimizer(optimizer: torch.optim.Optimizer) -> None:
    """Raise the errors PopTorch raises when a model is compiled with
    ``optimizer``: unsupported types, Nesterov momentum, AMSGrad, RMSprop
    groups that disagree on ``centered``; also ``maximize``, which the IPU
    optimizers cannot do."""
    _require_supported(optimizer)
    groups = optimizer.param_groups
    for i, group in enumerate(groups):
        if group.get("nesterov"):
            raise ValueError(f"Nesterov momentum is currently not supported (group {i} has "
                             "nesterov=True). Use nesterov=False.")
        if group.get("amsgrad"):
            raise ValueError(f"Only non-amsgrad Adam/AdamW optimizers are supported (group "
                             f"{i} has amsgrad=True). Use amsgrad=False.")
        if group.get("maximize"):
            raise ValueError(f"maximize=True is not supported: IPU optimizers always "
                             f"minimise the loss (group {i}). Negate the loss instead.")
        if isinstance(optimizer, torch.optim.RMSprop) and \
                group["centered"] != groups[0]["centered"]:
            raise ValueError("All parameter groups must have the same value for the "
                             f"'centered' attribute (Group 0: {groups[0]['centered']} / "
                             f"Group {i}: {group['centered']}).")


def _widest_share(params: list[torch.Tensor]) -> int:
    """The element size that holds most of the parameters' bytes (4 for none)."""
    by_width: dict[int, int] = {}
    for p in params:
        by_width[p.element_size()] = by_width.get(p.element_size(), 0) + p.numel()
    return max(by_width, key=lambda width: (by_width[width] * width, width)) if by_width else 4


def update_program(optimizer: torch.optim.Optimizer | None) -> UpdateProgram:
    """The operators PopART runs over each weight tensor to apply ``optimizer``
    (:mod:`ipusim.cost.optimizer`), in the weights' and its state's types; PopTorch's
    default SGD for none. The weights' type is the one holding most of their bytes,
    and any group's weight decay or momentum turns it on for all."""
    if optimizer is None:
        return optimizer_programs.DEFAULT_PROGRAM
    _require_supported(optimizer)
    groups = optimizer.param_groups
    params = [p for group in groups for p in group["params"]]
    weight = _widest_share(params)
    accum = getattr(optimizer, "accum_type", None) or torch.float32
    first = getattr(optimizer, "first_order_momentum_accum_type", None) or torch.float32
    second = getattr(optimizer, "second_order_momentum_accum_type", None) or torch.float32
    widths = {"weight_width": weight, "accum_width": accum.itemsize}
    decay = any(group.get("weight_decay", 0) for group in groups)
    momentum = any(group.get("momentum", 0) for group in groups)
    if isinstance(optimizer, torch.optim.SGD):
        combined = bool(getattr(optimizer, "use_combined_accum", False))
        velocity = getattr(optimizer, "velocity_accum_type", None) or torch.float32
        return optimizer_programs.sgd(momentum=momentum, weight_decay=decay, combined=combined,
                                      velocity_width=velocity.itemsize, **widths)
    moments = {"first_width": first.itemsize, "second_width": second.itemsize}
    if isinstance(optimizer, torch.optim.RMSprop):
        return optimizer_programs.rmsprop(centred=any(g["centered"] for g in groups),
                                          momentum=momentum, **moments, **widths)
    lamb = not isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW))
    return optimizer_programs.adam(
        decoupled=isinstance(optimizer, torch.optim.AdamW), lamb=lamb,
        bias_correction=getattr(optimizer, "bias_correction", True), **moments, **widths)
