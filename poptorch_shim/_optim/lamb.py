"""``LAMB``, PopTorch's layer-wise adaptive optimizer, written out in full
because torch has no LAMB to subclass; re-exported by :mod:`poptorch_shim.optim`.
"""
import math
import numbers
from collections.abc import Iterable

import torch

from poptorch_shim._optim.base import (
    Optimizer,
    adam_direction,
    explicit_arguments,
    set_accum_types,
)
from poptorch_shim._optim.state import AdamMoments

_FP16_MAX = 65500.0  # PopTorch's default max_weight_norm for LAMB.


def check_max_weight_norm(name: str, value: object) -> None:
    """LAMB's cap on the weight norm: 0 or more (PopTorch 3.3 accepts 0.0)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or \
            math.isnan(value) or value < 0:
        raise ValueError(f"{name} must be a number of 0 or more, got {value!r}. It caps the "
                         "weight norm in LAMB's trust ratio: pass a positive value, math.inf "
                         "for no cap, or 0.0 for a trust ratio of 1.")


class LAMB(Optimizer, AdamMoments, torch.optim.Optimizer):
    """Layer-wise Adaptive Moments (You et al. 2019, "Large Batch Optimization
    for Deep Learning: Training BERT in 76 minutes").

    Per weight tensor: Adam moments (bias-corrected unless
    ``bias_correction=False``), the update ``u = m / (sqrt(v) + eps) + wd * w``,
    and the step ``w -= lr * phi(||w||) / ||u|| * u`` with
    ``phi(z) = min(z, max_weight_norm)``; the trust ratio is 1 when either norm
    is zero. ``max_weight_norm`` defaults to PopTorch's 65500 (pass
    ``math.inf`` to disable the clamp) and can be set per parameter group; 0.0
    makes the weight norm 0, so the trust ratio 1: Adam's update with weight
    decay, which optimum-graphcore's trainer gives its bias and norm weights.
    """
    _global_attrs = ("bias_correction", "accum_type", "first_order_momentum_accum_type",
                     "second_order_momentum_accum_type")

    def __init__(self, params: Iterable, lr: float | None = None,
                 betas: tuple[float, float] | None = None, eps: float | None = None,
                 weight_decay: float | None = None,
                 bias_correction: bool | None = None,
                 loss_scaling: float | None = None,
                 max_weight_norm: float | None = None,
                 accum_type: torch.dtype | None = None,
                 first_order_momentum_accum_type: torch.dtype | None = None,
                 second_order_momentum_accum_type: torch.dtype | None = None) -> None:
        explicit = explicit_arguments(locals())
        defaults = dict(lr=1e-3 if lr is None else lr,
                        betas=(0.9, 0.999) if betas is None else tuple(betas),
                        eps=1e-8 if eps is None else eps,
                        weight_decay=1e-2 if weight_decay is None else weight_decay,
                        max_weight_norm=_FP16_MAX if max_weight_norm is None
                        else max_weight_norm)
        torch.optim.Optimizer.__init__(self, params, defaults)
        for i, group in enumerate(self.param_groups):
            check_max_weight_norm(f"max_weight_norm (group {i})", group["max_weight_norm"])
        self.bias_correction = True if bias_correction is None else bool(bias_correction)
        set_accum_types(self, accum_type, first_order_momentum_accum_type,
                        second_order_momentum_accum_type)
        self._finish_init(explicit, loss_scaling)

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                update = adam_direction(self.state[p], p.grad, group["betas"],
                                        group["eps"], self.bias_correction)
                update.add_(p, alpha=group["weight_decay"])
                weight_norm = torch.linalg.vector_norm(p).clamp(max=group["max_weight_norm"])
                update_norm = torch.linalg.vector_norm(update)
                trust = 1.0 if weight_norm == 0 or update_norm == 0 \
                    else float(weight_norm / update_norm)
                p.add_(update, alpha=-group["lr"] * trust)
