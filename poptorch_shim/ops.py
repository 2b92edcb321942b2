"""PopTorch's operators that change numerics, computed as its reference does.

``serializedMatMul`` computes the matrix product as the serial parts the
mode asks for, one smaller multiplication after another, so the cost probe
sees (and the simulator prices) each part. ``dynamic_slice`` and
``dynamic_update`` take their start as a tensor, as on the IPU, where the
offset is data the program reads at run time; they index with it rather
than reading it into Python, so a timing-only run measures them on tensors
without data. Under torch.fx (a pipelined model is split by tracing) each
call is recorded as one node, and the split stage makes it (its arguments
are checked there).
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import fx

from poptorch_shim.enums import MatMulSerializationMode
from poptorch_shim.errors import Error


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
