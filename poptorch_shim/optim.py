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
import inspect
import math
import numbers
import warnings
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

import torch

from poptorch_shim._optimizer_state import (_state_slots, accumulator_bytes,
                                            check_ipu_optimizer, optimizer_state_bytes)

__all__ = ["SGD", "Adam", "AdamW", "RMSprop", "LAMB", "VariableAttributes",
           "optimizer_state_bytes", "accumulator_bytes", "check_ipu_optimizer"]

_ACCUM_TYPES = (torch.float16, torch.float32)
_FP16_MAX = 65500.0  # PopTorch's default max_weight_norm for LAMB.
_GLOBAL_VARS = ["loss_scaling"]  # PopTorch variables kept on the optimizer, not per group.


def _explicit(arguments: Dict[str, Any]) -> Dict[str, Any]:
    """The constructor arguments the user gave (not None), from ``locals()``."""
    return {name: value for name, value in arguments.items()
            if value is not None and name not in ("self", "params", "__class__")}


def _check_positive(name: str, value: Any, rule: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or \
            math.isnan(value) or value <= 0:
        raise ValueError(f"{name} must be a number greater than 0, got {value!r}. {rule}")
    return float(value)


def _check_loss_scaling(value: Any) -> float:
    value = _check_positive(
        "loss_scaling", value, "The loss is multiplied by this factor and the gradients "
        "divided by it; pass a positive factor such as 128.0, or 1.0 to disable it.")
    if math.isinf(value):
        raise ValueError("loss_scaling must be finite, got inf. Pass a positive factor "
                         "such as 128.0, or 1.0 to disable loss scaling.")
    return value


def _check_accum_type(name: str, value: Optional[torch.dtype]) -> torch.dtype:
    if value is None:
        return torch.float32
    if value not in _ACCUM_TYPES:
        raise ValueError(f"{name} must be set to either torch.float16 or torch.float32, "
                         f"not {value!r}. It is the data type the IPU stores these values "
                         "in: torch.float16 halves their memory, torch.float32 (the "
                         "default) keeps full precision.")
    return value


class VariableAttributes:
    """Which optimizer attributes are variable (may change between steps
    without recompiling) and which are constants baked into the IPU program.

    Reached through any PopTorch optimizer's ``variable_attrs``; the
    attributes passed to the constructor start as variable.

    >>> opt = poptorch.optim.SGD(params, lr=0.01)
    >>> opt.variable_attrs.isConstant("momentum")
    True
    """

    def __init__(self, variable_attributes: List[str], allowed_attributes: List[str]) -> None:
        self._allowed = list(allowed_attributes)
        self._variable = [attr for attr in variable_attributes if attr in self._allowed]

    def isConstant(self, attr: str) -> bool:
        """Whether ``attr`` is a constant of the compiled program."""
        self._check(attr, "isConstant")
        return attr not in self._variable

    def markAsConstant(self, attr: str) -> None:
        """Bake ``attr`` into the program: changing it later needs a new model."""
        self._check(attr, "markAsConstant")
        self._variable = [a for a in self._variable if a != attr]

    def markAsVariable(self, attr: str) -> None:
        """Make ``attr`` an input of the program so ``setOptimizer`` can change it."""
        self._check(attr, "markAsVariable")
        if attr not in self._variable:
            self._variable.append(attr)

    def _check(self, attr: str, method: str) -> None:
        if attr not in self._allowed:
            raise ValueError(f"VariableAttributes.{method}: unknown attribute {attr!r}. "
                             f"This optimizer's attributes are {self._allowed}; pass one "
                             "of those.")

    def __repr__(self) -> str:
        return f"VariableAttributes(variable={self._variable}, allowed={self._allowed})"


def _unhooked(step: Callable) -> Callable:
    """A torch ``step`` without the hook wrapper torch adds, so hooks run once."""
    return step.__wrapped__ if getattr(step, "hooked", False) else step


class _PopTorchOptimizer:
    """What every PopTorch optimizer adds to its torch base: loss scaling,
    ``variable_attrs``, global gradient clipping, FP16 state rounding, and
    pickling of the attributes torch's ``__getstate__`` would drop."""
    _torch_base: type = torch.optim.Optimizer
    _global_attrs: Tuple[str, ...] = ()

    def _finish_init(self, explicit: Dict[str, Any], loss_scaling: Optional[float]) -> None:
        self.loss_scaling = 1.0 if loss_scaling is None else loss_scaling
        allowed = list(self.defaults) + _GLOBAL_VARS
        self.variable_attrs = VariableAttributes(list(explicit), allowed)

    @property
    def loss_scaling(self) -> float:
        """Factor the IPU scales the loss by (and the gradients back by)."""
        return self._loss_scaling

    @loss_scaling.setter
    def loss_scaling(self, value: float) -> None:
        self._loss_scaling = _check_loss_scaling(value)

    @torch.no_grad()
    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:
        """One update: re-evaluate ``closure`` if given, clip the gradients to
        ``max_grad_norm``, apply the update rule, round FP16 state."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._clip_gradients()
        self._update()
        self._round_state()
        return loss

    def _update(self) -> None:
        _unhooked(self._torch_base.step)(self)

    def _clip_gradients(self) -> None:
        """Scale all gradients by ``max / max(norm, max)``, the norm taken over
        every gradient of the optimizer together (PopART's ``clipAllWeights``)."""
        max_norm = getattr(self, "max_grad_norm", math.inf)
        grads = [p.grad for group in self.param_groups for p in group["params"]
                 if p.grad is not None]
        if math.isinf(max_norm) or not grads:
            return
        norm = torch.linalg.vector_norm(
            torch.stack([torch.linalg.vector_norm(g, dtype=torch.float32) for g in grads]))
        if norm > max_norm:
            torch._foreach_mul_(grads, float(max_norm / norm))

    def _round_state(self) -> None:
        for group in self.param_groups:
            half = [key for key, dtype in _state_slots(self, group).items()
                    if dtype == torch.float16]
            for p in group["params"]:
                state = self.state.get(p, {})
                for key in half:
                    if key in state and state[key].dtype != torch.float16:
                        state[key].copy_(state[key].to(torch.float16))

    def __getstate__(self) -> Dict[str, Any]:
        state = self._torch_base.__getstate__(self)
        for name in ("_loss_scaling", "variable_attrs") + self._global_attrs:
            state[name] = getattr(self, name)
        return state


class SGD(_PopTorchOptimizer, torch.optim.SGD):
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

    def __init__(self, params: Iterable, lr: float, momentum: Optional[float] = None,
                 dampening: Optional[float] = None, weight_decay: Optional[float] = None,
                 nesterov: Optional[bool] = None, maximize: Optional[bool] = None,
                 foreach: Optional[bool] = None, differentiable: Optional[bool] = None,
                 loss_scaling: Optional[float] = None,
                 velocity_scaling: Optional[float] = None,
                 use_combined_accum: Optional[bool] = None,
                 accum_type: Optional[torch.dtype] = None,
                 velocity_accum_type: Optional[torch.dtype] = None,
                 max_grad_norm: Optional[float] = None) -> None:
        explicit = _explicit(locals())
        torch.optim.SGD.__init__(self, params, **_torch_args(explicit, torch.optim.SGD))
        self.use_combined_accum = bool(use_combined_accum)
        self.accum_type = _check_accum_type("accum_type", accum_type)
        self.velocity_accum_type = _check_accum_type("velocity_accum_type",
                                                     velocity_accum_type)
        self.max_grad_norm = _max_grad_norm(max_grad_norm)
        if self.use_combined_accum:
            self.defaults["velocity_scaling"] = 1.0 if velocity_scaling is None \
                else velocity_scaling
            for i, group in enumerate(self.param_groups):
                group.setdefault("velocity_scaling", self.defaults["velocity_scaling"])
                _check_positive(f"velocity_scaling (group {i})", group["velocity_scaling"],
                                "The velocity is stored multiplied by this factor; pass a "
                                "positive factor, or 1.0 to disable it.")
        elif velocity_scaling is not None:
            warnings.warn("velocity_scaling value ignored when using the separate variant "
                          "(use_combined_accum=False). Pass use_combined_accum=True to use "
                          "it, or drop the argument.", UserWarning, stacklevel=2)
        self._finish_init(explicit, loss_scaling)


class Adam(_PopTorchOptimizer, torch.optim.Adam):
    """Adam with L2 weight decay, as ``torch.optim.Adam``, plus loss scaling,
    FP16/FP32 accumulator types and global gradient clipping
    (``max_grad_norm``). AMSGrad is not supported."""
    _torch_base = torch.optim.Adam
    _global_attrs = ("accum_type", "first_order_momentum_accum_type",
                     "second_order_momentum_accum_type", "max_grad_norm")

    def __init__(self, params: Iterable, lr: Optional[float] = None,
                 betas: Optional[Tuple[float, float]] = None, eps: Optional[float] = None,
                 weight_decay: Optional[float] = None, amsgrad: Optional[bool] = None,
                 foreach: Optional[bool] = None, maximize: Optional[bool] = None,
                 capturable: Optional[bool] = None, differentiable: Optional[bool] = None,
                 fused: Optional[bool] = None, loss_scaling: Optional[float] = None,
                 accum_type: Optional[torch.dtype] = None,
                 first_order_momentum_accum_type: Optional[torch.dtype] = None,
                 second_order_momentum_accum_type: Optional[torch.dtype] = None,
                 max_grad_norm: Optional[float] = None) -> None:
        explicit = _explicit(locals())
        _check_no_amsgrad(amsgrad)
        self._torch_base.__init__(self, params, **_torch_args(explicit, self._torch_base))
        _set_accum_types(self, accum_type, first_order_momentum_accum_type,
                         second_order_momentum_accum_type)
        self.max_grad_norm = _max_grad_norm(max_grad_norm)
        self._finish_init(explicit, loss_scaling)


class AdamW(_PopTorchOptimizer, torch.optim.AdamW):
    """Adam with decoupled weight decay, as ``torch.optim.AdamW`` (default
    ``weight_decay`` 1e-2), plus loss scaling, accumulator types, gradient
    clipping and ``bias_correction=False`` (PopART's AdamNoBias: the moments
    are used without dividing by ``1 - beta ** step``)."""
    _torch_base = torch.optim.AdamW
    _global_attrs = ("bias_correction", "accum_type", "first_order_momentum_accum_type",
                     "second_order_momentum_accum_type", "max_grad_norm")

    def __init__(self, params: Iterable, lr: Optional[float] = None,
                 betas: Optional[Tuple[float, float]] = None, eps: Optional[float] = None,
                 weight_decay: Optional[float] = None, amsgrad: Optional[bool] = None,
                 maximize: Optional[bool] = None, foreach: Optional[bool] = None,
                 capturable: Optional[bool] = None, differentiable: Optional[bool] = None,
                 fused: Optional[bool] = None, loss_scaling: Optional[float] = None,
                 bias_correction: Optional[bool] = None,
                 accum_type: Optional[torch.dtype] = None,
                 first_order_momentum_accum_type: Optional[torch.dtype] = None,
                 second_order_momentum_accum_type: Optional[torch.dtype] = None,
                 max_grad_norm: Optional[float] = None) -> None:
        explicit = _explicit(locals())
        _check_no_amsgrad(amsgrad)
        self._torch_base.__init__(self, params, **_torch_args(explicit, self._torch_base))
        self.bias_correction = True if bias_correction is None else bool(bias_correction)
        _set_accum_types(self, accum_type, first_order_momentum_accum_type,
                         second_order_momentum_accum_type)
        self.max_grad_norm = _max_grad_norm(max_grad_norm)
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
                direction = _adam_direction(self.state[p], grad, group["betas"],
                                            group["eps"], bias_correction=False)
                p.mul_(1 - group["lr"] * group["weight_decay"])
                p.add_(direction, alpha=-group["lr"])


class RMSprop(_PopTorchOptimizer, torch.optim.RMSprop):
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

    def __init__(self, params: Iterable, lr: Optional[float] = None,
                 alpha: Optional[float] = None, eps: Optional[float] = None,
                 weight_decay: Optional[float] = None, momentum: Optional[float] = None,
                 centered: Optional[bool] = None, foreach: Optional[bool] = None,
                 maximize: Optional[bool] = None, differentiable: Optional[bool] = None,
                 loss_scaling: Optional[float] = None,
                 accum_type: Optional[torch.dtype] = None,
                 first_order_momentum_accum_type: Optional[torch.dtype] = None,
                 second_order_momentum_accum_type: Optional[torch.dtype] = None,
                 use_tf_variant: Optional[bool] = None) -> None:
        explicit = _explicit(locals())
        torch.optim.RMSprop.__init__(self, params,
                                     **_torch_args(explicit, torch.optim.RMSprop))
        _set_accum_types(self, accum_type, first_order_momentum_accum_type,
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


class LAMB(_PopTorchOptimizer, torch.optim.Optimizer):
    """Layer-wise Adaptive Moments (You et al. 2019, "Large Batch Optimization
    for Deep Learning: Training BERT in 76 minutes").

    Per weight tensor: Adam moments (bias-corrected unless
    ``bias_correction=False``), the update ``u = m / (sqrt(v) + eps) + wd * w``,
    and the step ``w -= lr * phi(||w||) / ||u|| * u`` with
    ``phi(z) = min(z, max_weight_norm)``; the trust ratio is 1 when either norm
    is zero. ``max_weight_norm`` defaults to PopTorch's 65500 (pass
    ``math.inf`` to disable the clamp) and can be set per parameter group.
    """
    _global_attrs = ("bias_correction", "accum_type", "first_order_momentum_accum_type",
                     "second_order_momentum_accum_type")

    def __init__(self, params: Iterable, lr: Optional[float] = None,
                 betas: Optional[Tuple[float, float]] = None, eps: Optional[float] = None,
                 weight_decay: Optional[float] = None,
                 bias_correction: Optional[bool] = None,
                 loss_scaling: Optional[float] = None,
                 max_weight_norm: Optional[float] = None,
                 accum_type: Optional[torch.dtype] = None,
                 first_order_momentum_accum_type: Optional[torch.dtype] = None,
                 second_order_momentum_accum_type: Optional[torch.dtype] = None) -> None:
        explicit = _explicit(locals())
        defaults = dict(lr=1e-3 if lr is None else lr,
                        betas=(0.9, 0.999) if betas is None else tuple(betas),
                        eps=1e-8 if eps is None else eps,
                        weight_decay=1e-2 if weight_decay is None else weight_decay,
                        max_weight_norm=_FP16_MAX if max_weight_norm is None
                        else max_weight_norm)
        torch.optim.Optimizer.__init__(self, params, defaults)
        for i, group in enumerate(self.param_groups):
            _check_positive(f"max_weight_norm (group {i})", group["max_weight_norm"],
                            "It caps the weight norm in LAMB's trust ratio; pass a positive "
                            "value, or math.inf for no cap.")
        self.bias_correction = True if bias_correction is None else bool(bias_correction)
        _set_accum_types(self, accum_type, first_order_momentum_accum_type,
                         second_order_momentum_accum_type)
        self._finish_init(explicit, loss_scaling)

    def _update(self) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                update = _adam_direction(self.state[p], p.grad, group["betas"],
                                         group["eps"], self.bias_correction)
                update.add_(p, alpha=group["weight_decay"])
                weight_norm = torch.linalg.vector_norm(p).clamp(max=group["max_weight_norm"])
                update_norm = torch.linalg.vector_norm(update)
                trust = 1.0 if weight_norm == 0 or update_norm == 0 \
                    else float(weight_norm / update_norm)
                p.add_(update, alpha=-group["lr"] * trust)


def _adam_direction(state: Dict[str, Any], grad: torch.Tensor, betas: Tuple[float, float],
                    eps: float, bias_correction: bool) -> torch.Tensor:
    """Advance the Adam moments in ``state`` by ``grad``; return
    ``m_hat / (sqrt(v_hat) + eps)`` (a new tensor)."""
    beta1, beta2 = betas
    if not state:
        state["step"] = torch.zeros((), dtype=torch.float32)
        state["exp_avg"] = torch.zeros_like(grad)
        state["exp_avg_sq"] = torch.zeros_like(grad)
    state["step"] += 1
    exp_avg = state["exp_avg"].mul_(beta1).add_(grad, alpha=1 - beta1)
    exp_avg_sq = state["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    if not bias_correction:
        return exp_avg / (exp_avg_sq.sqrt() + eps)
    step = int(state["step"])
    denom = exp_avg_sq.sqrt() / math.sqrt(1 - beta2 ** step) + eps
    return exp_avg / (1 - beta1 ** step) / denom


def _torch_args(explicit: Dict[str, Any], base: type) -> Dict[str, Any]:
    """The user's arguments that ``base``'s constructor knows."""
    known = inspect.signature(base.__init__).parameters
    return {name: value for name, value in explicit.items() if name in known}


def _max_grad_norm(value: Optional[float]) -> float:
    if value is None:
        return math.inf
    return _check_positive("max_grad_norm", value, "Gradients are scaled down so their "
                           "global norm is at most this; pass a positive value, or leave "
                           "it unset (inf) to disable clipping.")


def _check_no_amsgrad(amsgrad: Optional[bool]) -> None:
    if amsgrad:
        raise ValueError("Only non-amsgrad Adam/AdamW optimizers are supported: got "
                         "amsgrad=True. Leave amsgrad unset (False).")


def _set_accum_types(optimizer: Any, accum: Optional[torch.dtype],
                     first: Optional[torch.dtype], second: Optional[torch.dtype]) -> None:
    optimizer.accum_type = _check_accum_type("accum_type", accum)
    optimizer.first_order_momentum_accum_type = _check_accum_type(
        "first_order_momentum_accum_type", first)
    optimizer.second_order_momentum_accum_type = _check_accum_type(
        "second_order_momentum_accum_type", second)
