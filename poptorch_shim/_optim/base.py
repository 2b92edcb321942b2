"""Machinery shared by every ``poptorch.optim`` optimizer: the checks and
defaults for PopTorch's extra constructor arguments, ``VariableAttributes``, the
``Optimizer`` base class and the Adam update direction, so that
:mod:`poptorch_shim.optim` and :mod:`poptorch_shim._optim.lamb` hold only their update rules.
"""
import inspect
import math
import numbers
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from poptorch_shim._optim.state import state_slots

_ACCUM_TYPES = (torch.float16, torch.float32)
_GLOBAL_VARS = ["loss_scaling"]  # PopTorch variables kept on the optimizer, not per group.


def explicit_arguments(arguments: dict[str, Any]) -> dict[str, Any]:
    """The constructor arguments the user gave (not None), from ``locals()``."""
    return {name: value for name, value in arguments.items()
            if value is not None and name not in ("self", "params", "__class__")}


def check_positive(name: str, value: Any, rule: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or \
            math.isnan(value) or value <= 0:
        raise ValueError(f"{name} must be a number greater than 0, got {value!r}. {rule}")
    return float(value)


def _check_loss_scaling(value: Any) -> float:
    value = check_positive(
        "loss_scaling", value, "The loss is multiplied by this factor and the gradients "
        "divided by it; pass a positive factor such as 128.0, or 1.0 to disable it.")
    if math.isinf(value):
        raise ValueError("loss_scaling must be finite, got inf. Pass a positive factor "
                         "such as 128.0, or 1.0 to disable loss scaling.")
    return value


def check_accum_type(name: str, value: torch.dtype | None) -> torch.dtype:
    if value is None:
        return torch.float32
    if value not in _ACCUM_TYPES:
        raise ValueError(f"{name} must be set to either torch.float16 or torch.float32, "
                         f"not {value!r}. It is the data type the IPU stores these values "
                         "in: torch.float16 halves their memory, torch.float32 (the "
                         "default) keeps full precision.")
    return value


def torch_args(explicit: dict[str, Any], base: type) -> dict[str, Any]:
    """The user's arguments that ``base``'s constructor knows."""
    known = inspect.signature(base.__init__).parameters
    return {name: value for name, value in explicit.items() if name in known}


def checked_max_grad_norm(value: float | None) -> float:
    if value is None:
        return math.inf
    return check_positive("max_grad_norm", value, "Gradients are scaled down so their "
                          "global norm is at most this; pass a positive value, or leave "
                          "it unset (inf) to disable clipping.")


def check_no_amsgrad(amsgrad: bool | None) -> None:
    if amsgrad:
        raise ValueError("Only non-amsgrad Adam/AdamW optimizers are supported: got "
                         "amsgrad=True. Leave amsgrad unset (False).")


def set_accum_types(optimizer: Any, accum: torch.dtype | None,
                    first: torch.dtype | None, second: torch.dtype | None) -> None:
    optimizer.accum_type = check_accum_type("accum_type", accum)
    optimizer.first_order_momentum_accum_type = check_accum_type(
        "first_order_momentum_accum_type", first)
    optimizer.second_order_momentum_accum_type = check_accum_type(
        "second_order_momentum_accum_type", second)


class VariableAttributes:
    """Which optimizer attributes are variable (may change between steps
    without recompiling) and which are constants baked into the IPU program.

    Reached through any PopTorch optimizer's ``variable_attrs``; the
    attributes passed to the constructor start as variable.

    >>> opt = poptorch.optim.SGD(params, lr=0.01)
    >>> opt.variable_attrs.isConstant("momentum")
    True
    """

    def __init__(self, variable_attributes: list[str], allowed_attributes: list[str]) -> None:
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


class Optimizer:
    """PopTorch's optimizer base class (``poptorch.optim.Optimizer``, which
    libraries test optimizers against): what every PopTorch optimizer adds to
    its torch base: loss scaling, ``variable_attrs``, global gradient clipping,
    FP16 state rounding, and pickling of the attributes torch's
    ``__getstate__`` would drop."""
    _torch_base: type = torch.optim.Optimizer
    _global_attrs: tuple[str, ...] = ()

    def _finish_init(self, explicit: dict[str, Any], loss_scaling: float | None) -> None:
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
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """One update: re-evaluate ``closure`` if given, clip the gradients to
        ``max_grad_norm``, apply the update rule, round FP16 state."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._clip_gradients()
        with _in_float32(self.param_groups):
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
            half = [key for key, dtype in state_slots(self, group).items()
                    if dtype == torch.float16]
            for p in group["params"]:
                state = self.state.get(p, {})
                for key in half:
                    if key in state and state[key].dtype != torch.float16:
                        state[key].copy_(state[key].to(torch.float16))

    def __getstate__(self) -> dict[str, Any]:
        state = self._torch_base.__getstate__(self)
        for name in ("_loss_scaling", "variable_attrs") + self._global_attrs:
            state[name] = getattr(self, name)
        return state


@contextmanager
def _in_float32(param_groups: list[dict[str, Any]]) -> Iterator[None]:
    """Update FP16 weights in FP32, as the IPU does: their gradients are
    widened, the optimizer state is kept in FP32 (unless an accumulator type
    says FP16, see ``_round_state``) and the new weights are rounded to FP16
    once. Updating in FP16 would lose small steps and overflow Adam's moments."""
    half = [p for group in param_groups for p in group["params"]
            if p.dtype == torch.float16 and p.grad is not None]
    for p in half:
        p.data, p.grad = p.data.float(), p.grad.float()
    try:
        yield
    finally:
        for p in half:
            p.data, p.grad = p.data.half(), p.grad.half()


def adam_direction(state: dict[str, Any], grad: torch.Tensor, betas: tuple[float, float],
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
