"""PopTorch's operators, computed as its reference does.

``serializedMatMul`` computes the matrix product as the serial parts the
mode asks for, one smaller multiplication after another, so the cost probe
sees (and the simulator prices) each part. ``dynamic_slice`` and
``dynamic_update`` take their start as a tensor, as on the IPU, where the
offset is data the program reads at run time; they index with it rather
than reading it into Python, so a timing-only run measures them on tensors
without data. Under torch.fx (a pipelined model is split by tracing) each
call is recorded as one node, and the split stage makes it (its arguments
are checked there).

``nop`` is an identity PopART never removes: a copy on the tiles, priced as
one. ``ipu_print_tensor`` prints a tensor (and its gradient) each time the
program computes it, not while the model is compiled. ``custom_op`` runs a
custom operator by the torch reference registered for its name and domain
(:mod:`poptorch_shim._ops.custom_ops`; PopTorch's own are registered already).
"""
from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import fx
from torch._subclasses.fake_tensor import is_fake
from torch.utils._python_dispatch import _disable_current_modes

from ipusim import Cost
from poptorch_shim._ops import custom_ops
from poptorch_shim._ops.tensor_text import FLOAT_FORMATS, format_tensor
from poptorch_shim.annotations import CUSTOM_COST, tell
from poptorch_shim.enums import MatMulSerializationMode
from poptorch_shim.errors import Error
from poptorch_shim.ipu_context import compiling


def _traced(function: Callable, args: tuple) -> Any:
    """Under torch.fx, the node ``function(*args)``; None otherwise."""
    proxy = next((a for a in args if isinstance(a, fx.Proxy)), None)
    return None if proxy is None else proxy.tracer.create_proxy("call_function", function,
                                                                args, {})


def serializedMatMul(lhs: torch.Tensor, rhs: torch.Tensor, mode: MatMulSerializationMode,
                     factor: int = 0, keep_precision: bool = False) -> torch.Tensor:
    """``lhs @ rhs`` as ``factor`` multiplications one after the other.

    For ``lhs`` m x n and ``rhs`` n x p: ``InputChannels`` splits m (the
    parts' rows are stacked), ``ReducingDim`` splits n (the parts are
    summed, in float32 for half inputs when ``keep_precision``),
    ``OutputChannels`` splits p (the parts' columns are joined);
    ``Disabled`` is one ordinary multiplication. ``factor`` must divide the
    dimension split.
    """
    if not isinstance(mode, MatMulSerializationMode):
        raise Error(f"serializedMatMul: mode must be a poptorch.MatMulSerializationMode, "
                    f"got {mode!r}")
    if isinstance(factor, bool) or not isinstance(factor, int):
        raise Error(f"serializedMatMul: factor must be an int, got {factor!r}")
    if not isinstance(keep_precision, bool):
        raise Error(f"serializedMatMul: keep_precision must be a bool, got {keep_precision!r}")
    traced = _traced(serializedMatMul, (lhs, rhs, mode, factor, keep_precision))
    if traced is not None:
        return traced
    if mode is MatMulSerializationMode.Disabled:
        return torch.matmul(lhs, rhs)
    tensor, dim = {MatMulSerializationMode.InputChannels: (lhs, -2),
                   MatMulSerializationMode.ReducingDim: (lhs, -1),
                   MatMulSerializationMode.OutputChannels: (rhs, -1)}[mode]
    if tensor.dim() < 2:
        raise Error(f"serializedMatMul: mode {mode.name} splits a matrix, but the operand it "
                    f"splits has shape {tuple(tensor.shape)}")
    size = tensor.shape[dim]
    if factor < 1 or size % factor:
        raise Error(f"serializedMatMul: factor {factor} must be a factor of the dimension "
                    f"{mode.name} splits, of size {size}")
    if mode is MatMulSerializationMode.InputChannels:
        return torch.cat([torch.matmul(part, rhs) for part in lhs.chunk(factor, -2)], -2)
    if mode is MatMulSerializationMode.OutputChannels:
        return torch.cat([torch.matmul(lhs, part) for part in rhs.chunk(factor, -1)], -1)
    rhs_dim = -2 if rhs.dim() > 1 else -1
    parts = [torch.matmul(left, right)
             for left, right in zip(lhs.chunk(factor, -1), rhs.chunk(factor, rhs_dim))]
    wide = keep_precision and parts[0].dtype == torch.float16
    total = parts[0].float() if wide else parts[0]
    for part in parts[1:]:
        total = total + (part.float() if wide else part)
    return total.to(parts[0].dtype)


def _check_slice(op: str, tensor: Any, dim: Any, start: Any, size: Any) -> None:
    if not isinstance(tensor, torch.Tensor):
        raise Error(f"{op} must take a torch.tensor input. {type(tensor)} is not supported.")
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise Error(f"{op}: dimension must be an integer, got {dim!r}.")
    if not isinstance(start, torch.Tensor):
        raise Error(f"Slice start argument to {op} must be a torch.tensor. {type(start)} is "
                    "not supported.")
    if start.dtype not in (torch.int16, torch.int32, torch.int64) or start.numel() < 1:
        raise Error(f"{op}: the start must be an integer tensor, got {start.dtype} of shape "
                    f"{tuple(start.shape)}.")
    if isinstance(size, bool) or not isinstance(size, int):
        raise Error(f"{op}: size must be an integer, got {size!r}.")
    if size < 1:
        raise Error(f"{op}: the start and end of a slice must be different (size {size}).")


def _indices(start: torch.Tensor, size: int, step: int) -> torch.Tensor:
    """The offsets ``start, start + step, ...`` below ``start + size``."""
    return start.reshape(-1)[0].long() + torch.arange(0, size, step, device=start.device)


def dynamic_slice(tensor: torch.Tensor, dim: int, start: torch.Tensor, size: int,
                  step: int) -> torch.Tensor:
    """``tensor`` sliced along ``dim`` from ``start`` (a tensor, read at run
    time) for ``size`` elements, every ``step``-th: PopTorch's reference is
    ``tensor[..., start:start + size:step, ...]``."""
    traced = _traced(dynamic_slice, (tensor, dim, start, size, step))
    if traced is not None:
        return traced
    _check_slice("dynamic_slice", tensor, dim, start, size)
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise Error(f"dynamic_slice: step must be a positive integer, got {step!r}.")
    return tensor.index_select(dim, _indices(start, size, step))


def dynamic_update(input: torch.Tensor, src: torch.Tensor, dim: int, start: torch.Tensor,
                   size: int) -> torch.Tensor:
    """``input`` with ``src`` written along ``dim`` from ``start`` (a tensor,
    read at run time) for ``size`` elements; ``input`` itself is left as it
    was. PopTorch's reference is ``slice_scatter``."""
    traced = _traced(dynamic_update, (input, src, dim, start, size))
    if traced is not None:
        return traced
    _check_slice("dynamic_update", input, dim, start, size)
    if not isinstance(src, torch.Tensor):
        raise Error(f"Src argument to dynamic_update must be a torch.tensor. {type(src)} is "
                    "not supported.")
    if input.dim() != src.dim():
        raise Error("input and src tensors must have same dimensionality. "
                    f"({input.dim()}) vs ({src.dim()})")
    if input.dtype != src.dtype:
        raise Error(f"input and src tensor must have same dtype. ({input.dtype} vs {src.dtype})")
    if src.shape[dim] != size:
        raise Error(f"dynamic_update: src has {src.shape[dim]} elements along dimension {dim} "
                    f"but the slice it fills has size {size}.")
    return input.index_copy(dim, _indices(start, size, 1), src)


def nop(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` again, through an operation PopART's patterns never remove: a
    copy of it on the tiles."""
    traced = _traced(nop, (tensor,))
    if traced is not None:
        return traced
    if not isinstance(tensor, torch.Tensor):
        raise Error(f"nop must take a torch.tensor argument. {type(tensor)} is not supported.")
    out = torch.empty_like(tensor)
    return out.copy_(tensor)


def ipu_print_tensor(tensor: torch.Tensor, title: str = "", print_gradient: bool = True,
                     summarise_threshold: int = 1000, edge_items: int = 3,
                     max_line_width: int = 80, digits: int = 4, float_format: str = "auto",
                     separator: str = ", ", open_bracket: str = "(",
                     close_bracket: str = ")") -> torch.Tensor:
    """``tensor`` unchanged; each time the program computes it, its values are
    printed on the host's stdout after ``title`` (and, in the backward pass when
    ``print_gradient``, its gradient after ``title + "_gradient"``), in the format
    the other arguments give (see :func:`poptorch_shim._ops.tensor_text.format_tensor`).
    Use the returned tensor: PopTorch prints only a tensor the program uses."""
    options = (summarise_threshold, edge_items, max_line_width, digits, float_format,
               separator, open_bracket, close_bracket)
    traced = _traced(ipu_print_tensor, (tensor, title, print_gradient, *options))
    if traced is not None:
        return traced
    if not isinstance(tensor, torch.Tensor):
        raise Error("ipu print tensor must take a torch.tensor argument. "
                    f"{type(tensor)} is not supported.")
    if float_format not in FLOAT_FORMATS:
        raise Error(f"ipu_print_tensor: float_format must be one of {list(FLOAT_FORMATS)}, "
                    f"got {float_format!r}.")
    if compiling() or is_fake(tensor):
        return tensor   # printed when the program runs, with values

    def show(name: str, values: torch.Tensor) -> None:
        text = format_tensor(values, *options)
        print(f"{name}: {text}" if name else text, flush=True)

    show(title, tensor)
    if print_gradient and tensor.requires_grad and torch.is_grad_enabled():
        tensor = tensor.view_as(tensor)
        tensor.register_hook(lambda grad: show(f"{title}_gradient", grad))
    return tensor


def _check_attributes(attributes: dict) -> None:
    """A custom operator's attributes, as PopTorch checks them."""
    for key, value in attributes.items():
        if not isinstance(key, str):
            raise ValueError("All attribute keys must be strings.")
        if not isinstance(value, (float, int, str, list, tuple)):
            raise ValueError("Attribute values must be floats, ints, strings or a list/tuple "
                             "of float, ints of strings.")
        if isinstance(value, (list, tuple)) and any(
                not isinstance(element, type(value[0])) for element in value):
            raise ValueError("The types in a list/tuple attribute must all be the same.")
        for text in (key, *(value if isinstance(value, (list, tuple)) else (value,))):
            if isinstance(text, str) and any(ord(ch) >= 128 for ch in text):
                raise ValueError(f"{text} contains non-ASCII characters.")


def custom_op(inputs: tuple[torch.Tensor, ...], name: str, domain: str, domain_version: int,
              example_outputs: tuple[torch.Tensor, ...],
              attributes: dict[str, Any] | None = None) -> list[torch.Tensor]:
    """The outputs of the custom operator ``domain::name`` on ``inputs``, computed by
    the torch reference registered for it (``poptorch.registerCustomOp``) with
    ``attributes`` as keyword arguments, and priced by its registered cost or its
    reference's operators. ``example_outputs`` give the outputs' shapes and dtypes;
    a timing-only run prices an operator nobody registered from them, with a warning."""
    attributes = dict(attributes or {})
    _check_attributes(attributes)
    inputs, example_outputs = tuple(inputs), tuple(example_outputs)
    proxy = next((t for t in inputs if isinstance(t, fx.Proxy)), None)
    if proxy is not None:
        node = proxy.tracer.create_proxy("call_function", custom_op, (
            inputs, name, domain, domain_version, example_outputs, attributes), {})
        return [node[index] for index in range(len(example_outputs))]
    operator = custom_ops.registered(name, domain)
    if operator is None:
        if not any(is_fake(t) for t in inputs if isinstance(t, torch.Tensor)):
            raise custom_ops.not_registered(name, domain, domain_version)
        warnings.warn(f"custom_op: {domain}::{name} has no registered implementation: this "
                      "timing-only run prices it as writing its example outputs",
                      stacklevel=2)
        return [torch.zeros_like(example) for example in example_outputs]
    if operator.cost is None:
        result = operator.reference(*inputs, **attributes)
    else:
        with _disable_current_modes():  # the registered cost stands for its operators
            result = operator.reference(*inputs, **attributes)
    outputs = [result] if isinstance(result, torch.Tensor) else list(result)
    _check_outputs(f"{domain}::{name}", outputs, example_outputs)
    if operator.cost is not None:
        cost = operator.cost(*inputs, **attributes)
        if not isinstance(cost, Cost):
            raise TypeError(f"custom_op {domain}::{name}: the registered cost returned "
                            f"{type(cost).__name__}, not an ipusim.Cost")
        tell(CUSTOM_COST, tuple(outputs), cost)
    return outputs


def _check_outputs(operator: str, outputs: list, examples: tuple) -> None:
    """The reference's outputs have the example outputs' number, shapes and dtypes:
    what the program was traced with."""
    if len(outputs) != len(examples):
        raise Error(f"custom_op {operator}: the reference returned {len(outputs)} outputs "
                    f"but example_outputs has {len(examples)}")
    for index, (output, example) in enumerate(zip(outputs, examples)):
        if output.shape != example.shape or output.dtype != example.dtype:
            raise Error(f"custom_op {operator}: output {index} is {output.dtype} of shape "
                        f"{tuple(output.shape)} but example_outputs[{index}] is "
                        f"{example.dtype} of shape {tuple(example.shape)}")


def registerCustomOp(name: str, domain: str, reference: Callable[..., Any],
                     cost: Callable[..., Cost] | None = None) -> None:
    """Register the torch implementation of the custom operator ``domain::name`` that
    ``poptorch.custom_op`` runs (an ipusim extension: on an IPU the operator is
    PopART code). ``reference(*inputs, **attributes)`` returns its outputs;
    ``cost(*inputs, **attributes)``, if given, returns its :class:`ipusim.Cost` on
    the IPU, charged instead of the reference's operators."""
    custom_ops.register(name, domain, reference, cost)
