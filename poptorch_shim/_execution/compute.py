"""Real torch compute for one micro-batch, and what each stage of it costs.

A *runner* executes the forward (and in training the backward) of one
micro-batch and can profile the stages it runs. :class:`WholeModel` runs the
model as a single stage on IPU 0; the staged runner for Blocks lives in
:mod:`poptorch_shim._execution.staged`.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any

import torch
from torch._subclasses.fake_tensor import unset_fake_temporarily
from torch.overrides import TorchFunctionMode

from ipusim import Cost, Stage
from poptorch_shim._execution.cost_probe import Measurement, measure, tensor_bytes
from poptorch_shim._execution.loss_finder import LossFinder
from poptorch_shim._execution.step_shape import flatten_inputs


def measured_stage(name: str, ipu: int, forward: Measurement, backward: Cost,
                   activation_bytes: int, weight_bytes: int, weight_tensors: int = 0,
                   weight_sizes: tuple[int, ...] = ()) -> Stage:
    """The :class:`ipusim.Stage` one micro-batch's measurement describes: its
    forward's cost and the activations it saved for the backward."""
    return Stage(name, ipu=ipu, forward=forward.cost, backward=backward,
                 activation_bytes=activation_bytes, stash_bytes=forward.saved.saved_bytes,
                 weight_bytes=weight_bytes, weight_tensors=weight_tensors,
                 weight_sizes=weight_sizes,
                 checkpoint_bytes=forward.saved.checkpoint_bytes,
                 segment_stash_bytes=forward.saved.segment_bytes)


def parameter_bytes(module: torch.nn.Module) -> int:
    """Bytes of the module's parameters (what the IPU holds as weights)."""
    return sum(p.numel() * p.element_size() for p in module.parameters())


def parameter_tensors(module: torch.nn.Module) -> int:
    """The module's parameter tensors, each of which the optimizer updates on its own."""
    return sum(1 for _ in module.parameters())


def parameter_sizes(module: torch.nn.Module) -> tuple[int, ...]:
    """Bytes of each of the module's parameter tensors, whose gradients the
    replicas all-reduce one by one."""
    return tuple(p.numel() * p.element_size() for p in module.parameters())


#: Calls that keep their first tensor's dtype on purpose (casts, copies, in-place
#: updates: every name ending in "_" as well).
_DTYPE_KEEPING = frozenset({"to", "type", "type_as", "copy_", "__setitem__", "__get__",
                            "set_", "detach", "clone"})


def _floats(values) -> set:
    return {value.dtype for value in values
            if isinstance(value, torch.Tensor) and value.dtype in (torch.float16, torch.float32)}


class _MixedFloats(TorchFunctionMode):
    """Runs an operation given both float16 and float32 tensors in float32, as
    PopTorch does ("When PyTorch encounters a mix of float16 and float32
    inputs for a given operation, it will usually cast all inputs to float32,
    and PopTorch complies": its user guide, 16-bit float support), where torch
    on the CPU would refuse the mix ("mat1 and mat2 must have the same dtype")."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name not in _DTYPE_KEEPING and not name.endswith("_"):
            flat = list(args) + list(kwargs.values())
            flat += [leaf for value in flat if isinstance(value, (list, tuple))
                     for leaf in value]
            if _floats(flat) == {torch.float16, torch.float32}:
                up = lambda v: v.float() if isinstance(v, torch.Tensor) \
                    and v.dtype == torch.float16 else v  # noqa: E731
                args = tuple(type(a)(up(v) for v in a) if isinstance(a, (list, tuple))
                             else up(a) for a in args)
                kwargs = {k: up(v) for k, v in kwargs.items()}
        return func(*args, **kwargs)


def promoting_mixed_floats(modules: Iterable[torch.nn.Module],
                           inputs: Any) -> AbstractContextManager[Any]:
    """Run a model with float16 and float32 operands promoted to float32 as
    PopTorch does (see :class:`_MixedFloats`); a model with no float16 input,
    parameter or buffer runs untouched, at no cost. ``modules``: the model's
    ``modules()``, whose parameters and buffers are its own; ``inputs``: a
    micro-batch's ``(args, kwargs)``."""
    tensors = [leaf for module in modules
               for leaf in (*module._parameters.values(), *module._buffers.values())]
    tensors += flatten_inputs(*inputs)[0]
    for tensor in tensors:
        if isinstance(tensor, torch.Tensor) and tensor.dtype == torch.float16:
            return _MixedFloats()
    return nullcontext()


@contextmanager
def left_as_it_was(model: torch.nn.Module) -> Iterator[None]:
    """Run the block on ``model`` itself, then give it back its gradients and
    buffers (updated in place or replaced) as they were, so that measuring a
    micro-batch changes nothing the user can see, as PopTorch's compile does.

    The model is not copied: a copy would reach whatever the user's modules
    hold (a library's executor, a trainer an object's ``__getstate__`` drops),
    and a deep copy under a fake mode fails on real buffers. The real tensors
    are saved and restored outside any fake mode, so a timing-only
    measurement leaves no fake gradient behind.
    """
    with unset_fake_temporarily():
        grads = [(p, p.grad) for p in model.parameters()]
        buffers = [(module, name, buffer, buffer.detach().clone())
                   for module in model.modules()
                   for name, buffer in module._buffers.items() if buffer is not None]
    for parameter, _ in grads:
        parameter.grad = None
    try:
        yield
    finally:
        with unset_fake_temporarily(), torch.no_grad():
            for parameter, grad in grads:
                parameter.grad = grad
            for module, name, buffer, saved in buffers:
                module._buffers[name] = buffer
                buffer.copy_(saved)


class WholeModel:
    """Runs the model as one stage on one IPU."""

    strategy = None  # no execution strategy: nothing to place

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.loss_finder = LossFinder()

    def stage_layout(self, args: tuple, kwargs: dict) -> list[tuple[str, int]]:
        """The stages (name, IPU) a micro-batch runs through, known before any compute."""
        return [("model", 0)]

    def run(self, args: tuple, kwargs: dict, training: bool, loss_scale: float) -> Any:
        """Forward one micro-batch; in training also backward, gradients scaled by
        ``loss_scale``."""
        if not training:
            with torch.no_grad():
                return self.model(*args, **kwargs)
        output, loss = self.loss_finder.forward(self.model, args, kwargs)
        # The gradients of loss * loss_scale, without an autograd node for the product.
        loss.backward(None if loss_scale == 1.0 else torch.full_like(loss, loss_scale))
        return output

    def profile(self, args: tuple, kwargs: dict,
                training: bool) -> tuple[list[Stage], Any]:
        """Measure one micro-batch (on whatever model this runner holds): the
        stages' costs, and the output."""
        with torch.set_grad_enabled(training), measure() as forward, \
                self.loss_finder.watching() as losses:
            output = self.model(*args, **kwargs)
        backward_cost = Cost()
        if training:
            with measure() as backward:
                self.loss_finder.find(output, losses).backward()
            backward_cost = backward.cost
        stage = measured_stage("model", 0, forward, backward_cost,
                               activation_bytes=tensor_bytes(output),
                               weight_bytes=parameter_bytes(self.model),
                               weight_tensors=parameter_tensors(self.model),
                               weight_sizes=parameter_sizes(self.model))
        return [stage], output
