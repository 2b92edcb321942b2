"""Custom operators: what ``poptorch.custom_op`` runs for an operator name and domain.

On an IPU a custom operator is a PopART op with Poplar code the user compiled;
here it is a torch *reference* function that computes its outputs (and, through
autograd, its gradient), registered for its name and domain. The cost probe
measures the reference's torch operators as it measures any other, unless a
*cost* is registered with it: a function of the same inputs that returns the
:class:`ipusim.Cost` of the operator on the IPU (its kernels, FLOPs and bytes),
which is charged instead of the reference's operators (its backward is still
measured from the reference's gradient).

PopTorch's own custom operators (domain ``poptorch.custom_ops``) are registered
here with their semantics: ``FastGatherLastDim`` (a gather along the last
dimension, with the shape checks of its PopART op), ``TorchSoftplus``,
``UpsampleBilinear2d`` and ``Embedding``.
"""
from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ipusim import Cost
from poptorch_shim.errors import Error

POPTORCH_DOMAIN = "poptorch.custom_ops"


@dataclass(frozen=True)
class CustomOperator:
    """A registered custom operator: ``reference(*inputs, **attributes)`` returns its
    outputs (a tensor or a sequence of them); ``cost(*inputs, **attributes)``, if
    given, its :class:`ipusim.Cost` on the IPU."""

    name: str
    domain: str
    reference: Callable[..., Any]
    cost: Callable[..., Cost] | None = None


def register(name: str, domain: str, reference: Callable[..., Any],
             cost: Callable[..., Cost] | None = None) -> None:
    """Register (or replace) the custom operator ``domain::name``."""
    for label, value in (("name", name), ("domain", domain)):
        if not isinstance(value, str) or not value:
            raise TypeError(f"registerCustomOp: {label} must be a non-empty str, got {value!r}")
    if not callable(reference):
        raise TypeError(f"registerCustomOp({name!r}, {domain!r}): reference must be callable, "
                        f"got {reference!r}")
    if cost is not None and not callable(cost):
        raise TypeError(f"registerCustomOp({name!r}, {domain!r}): cost must be callable or "
                        f"None, got {cost!r}")
    _REGISTRY[name, domain] = CustomOperator(name, domain, reference, cost)


def registered(name: str, domain: str) -> CustomOperator | None:
    """The operator registered for ``domain::name``, None if there is none."""
    return _REGISTRY.get((name, domain))


def not_registered(name: str, domain: str, domain_version: int) -> Error:
    """The error a run with real compute gives for an operator nobody registered."""
    return Error(
        f"custom_op: no implementation of the custom operator {domain}::{name} (version "
        f"{domain_version}) is registered. On an IPU it is PopART code; ipusim computes it "
        f"with a torch function of its inputs and attributes: call "
        f"poptorch.registerCustomOp({name!r}, {domain!r}, reference, cost=None) before the "
        "model runs (the user guide's 'Custom operators' says how), or run timing-only "
        "(Options.Simulation.timingOnly), which prices it from its example outputs.")


def _ipu_model_in_use() -> bool:
    """Whether ``POPTORCH_IPU_MODEL`` or ``POPTORCH_SMALL_IPU_MODEL`` asks for an IPU
    Model, as PopTorch reads them (a number, non-zero for yes)."""
    for variable in ("POPTORCH_IPU_MODEL", "POPTORCH_SMALL_IPU_MODEL"):
        value = os.environ.get(variable)
        if value is not None and int(value) != 0:
            return True
    return False


def _fast_gather_last_dim(data: torch.Tensor, index: torch.Tensor, axis: int = -1,
                          **_: Any) -> torch.Tensor:
    """``FastGatherLastDim``: ``data`` gathered along its last dimension at ``index``,
    which has data's dimensions but the last (FastGatherLastDim.cpp's setup). Its
    codelets run on hardware only."""
    if _ipu_model_in_use():
        raise Error("FastGatherLastDimOp requires hardware but IPU model is enabled")
    if data.dim() != index.dim():
        raise Error("FastGatherLastDimOp::setup(), Input and Index tensors do not have same "
                    f"rank in Op (input {tuple(data.shape)}, index {tuple(index.shape)})")
    if tuple(data.shape[:-1]) != tuple(index.shape[:-1]):
        raise Error("FastGatherLastDimOp::setup(), Index tensor must have same dimensions as "
                    f"Input except for last dim. Op (input {tuple(data.shape)}, index "
                    f"{tuple(index.shape)})")
    return torch.gather(data, axis, index.long())


def _softplus(x: torch.Tensor, beta: float = 1.0, threshold: float = 1.0,
              **_: Any) -> torch.Tensor:
    """``TorchSoftplus``: torch's softplus with PopART's defaults for its attributes."""
    return torch.nn.functional.softplus(x, beta=beta, threshold=threshold)


def _upsample_bilinear2d(x: torch.Tensor, scaling_factor: float = 2.0, align_corners: int = 0,
                         **_: Any) -> torch.Tensor:
    """``UpsampleBilinear2d``: an NCHW tensor scaled by ``scaling_factor`` both ways."""
    return torch.nn.functional.interpolate(x, scale_factor=scaling_factor, mode="bilinear",
                                           align_corners=bool(align_corners))


def _embedding(weight: torch.Tensor, indices: torch.Tensor, padding_idx: int | None = None,
               **_: Any) -> torch.Tensor:
    """``Embedding``: the rows of ``weight`` at ``indices`` (no gradient to ``padding_idx``)."""
    return torch.nn.functional.embedding(indices, weight, padding_idx=padding_idx)


#: PopTorch's own, then the user's, by (name, domain).
_REGISTRY: dict[tuple[str, str], CustomOperator] = {
    (name, POPTORCH_DOMAIN): CustomOperator(name, POPTORCH_DOMAIN, reference)
    for name, reference in (("FastGatherLastDim", _fast_gather_last_dim),
                            ("TorchSoftplus", _softplus),
                            ("UpsampleBilinear2d", _upsample_bilinear2d),
                            ("Embedding", _embedding))}
