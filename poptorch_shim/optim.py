"""``poptorch.optim``: PopTorch's optimizers, as real optimizers on the CPU.

``SGD``, ``Adam``, ``AdamW`` and ``RMSprop`` subclass the torch optimizers and
take PopTorch's extra arguments (loss scaling, accumulator data types, gradient
clipping); ``LAMB`` is a full implementation. Arguments left at None get
torch's (or PopTorch's) defaults, and the arguments a user passes are the ones
``variable_attrs`` reports as variable, as in PopTorch.

Loss and velocity scaling. On the IPU the loss is multiplied by
``loss_scaling`` before the backward pass and the gradients are divided by it
again before the update (velocity scaling does the same to SGD's velocity), so
that small FP16 gradients do not underflow. The two factors cancel, and the
gradients a model hands to ``step()`` here are the true gradients: the shim
applies neither factor, exactly as PopTorch's own optimizers do when stepped on
the host. The factors are validated and kept for the IPU program description.

Accumulator data types. Optimizer state declared ``torch.float16`` (for
example ``first_order_momentum_accum_type``) is rounded to FP16 after every
step, so training sees the precision the IPU would store it in;
``optimizer_state_bytes`` counts it at two bytes an element.
"""
import warnings
from collections.abc import Iterable

import torch

from poptorch_shim._optim.base import (
    Optimizer,
    VariableAttributes,
    adam_direction,
    check_accum_type,
    check_no_amsgrad,
    check_positive,
    checked_max_grad_norm,
    explicit_arguments,
    set_accum_types,
    torch_args,
)
from poptorch_shim._optim.lamb import LAMB
from poptorch_shim._optim.state import (
    accumulator_bytes,
    check_ipu_optimizer,
    optimizer_state_bytes,
)

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "RMSprop", "LAMB", "VariableAttributes",
           "optimizer_state_bytes", "accumulator_bytes", "check_ipu_optimizer"]

# The re-exported classes name this module as their home, as before they moved out, so
# reprs and pickles (optimizer checkpoints) keep the public path ``poptorch_shim.optim``.
LAMB.__module__ = VariableAttributes.__module__ = Optimizer.__module__ = __name__


class SGD(Optimizer, torch.optim.SGD):
    """Stochastic gradient descent with optional momentum, as
    ``torch.optim.SGD``, plus loss and velocity scaling.

    ``use_combined_accum=True`` picks PopTorch's memory-saving variant: one
    tensor per weight both accumulates gradients and holds the velocity
    (``velocity_scaling`` applies to it and is stored per group; the accumulator
    types are ignored). The default separate variant keeps a gradient
    accumulator (``accum_type``) and a velocity (``velocity_accum_type``).
    ``max_grad_norm`` clips the global gradient norm. ``lr`` is required.
    """
    _torch_base = torch.optim.SGD
    _global_attrs = ("use_combined_accum", "accum_type", "velocity_accum_type",
                     "max_grad_norm")

    def __init__(self, params: Iterable, lr: float, momentum: float | None = None,
                 dampening: float | None = None, weight_decay: float | None = None,
                 nesterov: bool | None = None, maximize: bool | None = None,
                 foreach: bool | None = None, differentiable: bool | None = None,
                 loss_scaling: float | None = None,
                 velocity_scaling: float | None = None,
                 use_combined_accum: bool | None = None,
                 accum_type: torch.dtype | None = None,
                 velocity_accum_type: torch.dtype | None = None,
                 max_grad_norm: float | None = None) -> None:
        explicit = explicit_arguments(locals())
        torch.optim.SGD.__init__(self, params, **torch_args(explicit, torch.optim.SGD))
        self.use_combined_accum = bool(use_combined_accum)
        self.accum_type = check_accum_type("accum_type", accum_type)
        self.velocity_accum_type = check_accum_type("velocity_accum_type",
                                                    velocity_accum_type)
        self.max_grad_norm = checked_max_grad_norm(max_grad_norm)
        if self.use_combined_accum:
            self.defaults["velocity_scaling"] = 1.0 if velocity_scaling is None \
                else velocity_scaling
            for i, group in enumerate(self.param_groups):
                group.setdefault("velocity_scaling", self.defaults["velocity_scaling"])
                check_positive(f"velocity_scaling (group {i})", group["velocity_scaling"],
                               "The velocity is stored multiplied by this factor; pass a "
                               "positive factor, or 1.0 to disable it.")
        elif velocity_scaling is not None:
            warnings.warn("velocity_scaling value ignored when using the separate variant "
                          "(use_combined_accum=False). Pass use_combined_accum=True to use "
                          "it, or drop the argument.", UserWarning, stacklevel=2)
        self._finish_init(explicit, loss_scaling)


class Adam(Optimizer, torch.optim.Adam):
    """Adam with L2 weight decay, as ``torch.optim.Adam``, plus loss scaling,
    FP16/FP32 accumulator types and global gradient clipping
    (``max_grad_norm``). AMSGrad is not supported."""
    _torch_base = torch.optim.Adam
    _global_attrs = ("accum_type", "first_order_momentum_accum_type",
                     "second_order_momentum_accum_type", "max_grad_norm")

    def __init__(self, params: Iterable, lr: float | None = None,
                 betas: tuple[float, float] | None = None, eps: float | None = None,
                 weight_decay: float | None = None, amsgrad: bool | None = None,
                 foreach: bool | None = None, maximize: bool | None = None,
                 capturable: bool | None = None, differentiable: bool | None = None,
                 fused: bool | None = None, loss_scaling: float | None = None,
                 accum_type: torch.dtype | None = None,
                 first_order_momentum_accum_type: torch.dtype | None = None,
                 second_order_momentum_accum_type: torch.dtype | None = None,
                 max_grad_norm: float | None = None) -> None:
        explicit = explicit_arguments(locals())
        check_no_amsgrad(amsgrad)
        self._torch_base.__init__(self, params, **torch_args(explicit, self._torch_base))
        set_accum_types(self, accum_type, first_order_momentum_accum_type,
                        second_order_momentum_accum_type)
        self.max_grad_norm = checked_max_grad_norm(max_grad_norm)
        self._finish_init(explicit, loss_scaling)


class AdamW(Optimizer, torch.optim.AdamW):
    """Adam with decoupled weight decay, as ``torch.optim.AdamW`` (default
    ``weight_decay`` 1e-2), plus loss scaling, accumulator types, gradient
    clipping and ``bias_correction=False`` (PopART's AdamNoBias: the moments
    are used without dividing by ``1 - beta ** step``)."""
    _torch_base = torch.optim.AdamW
    _global_attrs = ("bias_correction", "accum_type", "first_order_momentum_accum_type",
                     "second_order_momentum_accum_type", "max_grad_norm")

    def __init__(self, params: Iterable, lr: float | None = None,
                 betas: tuple[float, float] | None = None, eps: float | None = None,
                 weight_decay: float | None = None, amsgrad: bool | None = None,
                 maximize: bool | None = None, foreach: bool | None = None,
                 capturable: bool | None = None, differentiable: bool | None = None,
                 fused: bool | None = None, loss_scaling: float | None = None,
                 bias_correction: bool | None = None,
                 accum_type: torch.dtype | None = None,
                 first_order_momentum_accum_type: torch.dtype | None = None,
                 second_order_momentum_accum_type: torch.dtype | None = None,
                 max_grad_norm: float | None = None) -> None:
        explicit = explicit_arguments(locals())
        check_no_amsgrad(amsgrad)
        self._torch_base.__init__(self, params, **torch_args(explicit, self._torch_base))
        self.bias_correction = True if bias_correction is None else bool(bias_correction)
        set_accum_types(self, accum_type, first_order_momentum_accum_type,
                        second_order_momentum_accum_type)
        self.max_grad_norm = checked_max_grad_norm(max_grad_norm)
        self._finish_init(explicit, loss_scaling)

    def _update(self) -> None:
        if self.bias_correction:
            super()._update()
            return
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = -p.grad if group["maximize"] else p.grad
                direction = adam_direction(self.state[p], grad, group["betas"],
                                           group["eps"], bias_correction=False)
                p.mul_(1 - group["lr"] * group["weight_decay"])
                p.add_(direction, alpha=-group["lr"])


class RMSprop(Optimizer, torch.optim.RMSprop):
    """RMSprop, as ``torch.optim.RMSprop``, plus loss scaling and accumulator
    types: ``first_order_momentum_accum_type`` is the squared-gradient average,
    ``second_order_momentum_accum_type`` the centred gradient average (PopART's
    accl1 and accl2; the momentum buffer stays FP32).

    ``use_tf_variant=True`` matches TensorFlow instead: the squared average
    starts at one, ``eps`` goes inside the square root, and the learning rate
    is folded into the momentum buffer.
    """
    _torch_base = torch.optim.RMSprop
    _global_attrs = ("accum_type", "first_order_momentum_accum_type",
                     "second_order_momentum_accum_type", "use_tf_variant")

    def __init__(self, params: Iterable, lr: float | None = None,
                 alpha: float | None = None, eps: float | None = None,
                 weight_decay: float | None = None, momentum: float | None = None,
                 centered: bool | None = None, foreach: bool | None = None,
                 maximize: bool | None = None, differentiable: bool | None = None,
                 loss_scaling: float | None = None,
                 accum_type: torch.dtype | None = None,
                 first_order_momentum_accum_type: torch.dtype | None = None,
                 second_order_momentum_accum_type: torch.dtype | None = None,
                 use_tf_variant: bool | None = None) -> None:
        explicit = explicit_arguments(locals())
        torch.optim.RMSprop.__init__(self, params,
                                     **torch_args(explicit, torch.optim.RMSprop))
        set_accum_types(self, accum_type, first_order_momentum_accum_type,
                        second_order_momentum_accum_type)
        self.use_tf_variant = bool(use_tf_variant)
        self._finish_init(explicit, loss_scaling)

    def _update(self) -> None:
        if not self.use_tf_variant:
            super()._update()
            return
        for group in self.param_groups:
            alpha, lr, momentum = group["alpha"], group["lr"], group["momentum"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = (-p.grad if group["maximize"] else p.grad).add(
                    p, alpha=group["weight_decay"])
                state = self.state[p]
                if not state:
                    state["step"] = torch.zeros((), dtype=torch.float32)
                    state["square_avg"] = torch.ones_like(p)
                    if group["centered"]:
                        state["grad_avg"] = torch.zeros_like(p)
                    if momentum > 0:
                        state["momentum_buffer"] = torch.zeros_like(p)
                state["step"] += 1
                state["square_avg"].mul_(alpha).addcmul_(grad, grad, value=1 - alpha)
                mean_square = state["square_avg"]
                if group["centered"]:
                    state["grad_avg"].lerp_(grad, 1 - alpha)
                    mean_square = mean_square.addcmul(state["grad_avg"], state["grad_avg"],
                                                      value=-1)
                update = grad / (mean_square + group["eps"]).sqrt()
                if momentum > 0:
                    buf = state["momentum_buffer"].mul_(momentum).add_(update, alpha=lr)
                    p.sub_(buf)
                else:
                    p.add_(update, alpha=-lr)
