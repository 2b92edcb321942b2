"""PopTorch's control flow on the device: ``poptorch.for_loop`` and ``poptorch.cond``.

On an IPU both are subgraphs of the program: the loop's body runs ``count``
times on the device, and ``cond`` compiles both branches and runs the one its
condition picks at run time. Here the body runs ``count`` times in torch, so
the cost probe measures (and the simulator prices) every trip, and ``cond``
runs the branch the condition picks, priced as that branch: what PopART's If
costs on the tiles (the branch's operators). A timing-only run has no
condition to read: it prices the ``then`` branch. Both are for inference
only, as in PopTorch; the bodies' inputs are passed by value (a body that
changes them in place leaves the caller's tensors as they were).
"""
from __future__ import annotations

from collections.abc import Callable

import torch
from torch._subclasses.fake_tensor import is_fake

from poptorch_shim.errors import Error
from poptorch_shim.ipu_context import in_training_model, isRunningOnIpu


def _as_list(outputs) -> list:
    return list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]


def for_loop(count: int, body: Callable[..., list[torch.Tensor]],
             inputs: list[torch.Tensor]) -> list[torch.Tensor]:
    """Run ``body`` ``count`` times, each trip on the outputs of the last (the first
    on ``inputs``); the last trip's outputs. ``body`` takes as many tensors as it
    returns."""
    if not isinstance(inputs, list):
        raise ValueError("poptorch.for_loop expects input tensors (inputs) to be a list of "
                         "tensors. (Object is not list)")
    for index, tensor in enumerate(inputs):
        if not isinstance(tensor, (torch.Tensor, torch.fx.Proxy)):
            raise ValueError("poptorch.for_loop expects input tensors (inputs) to be a list of "
                             f"tensors. (Object contained in list at index {index} is not "
                             "torch.tensor)")
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise Error(f"poptorch.for_loop: count must be a non-negative int, got {count!r}.")
    if in_training_model():
        raise Error("poptorch.for_loop() is only supported in inference.")
    outputs = [tensor.clone() for tensor in inputs]   # the body's inputs, by value
    for _ in range(count):
        outputs = _as_list(body(*outputs))
        if len(outputs) != len(inputs):
            raise Error(f"poptorch.for_loop: the body returned {len(outputs)} tensors for "
                        f"{len(inputs)} inputs; each trip's outputs are the next trip's "
                        "inputs, so it must return as many as it takes.")
    return outputs


def cond(condition: torch.Tensor, then_body: Callable[..., list[torch.Tensor]],
         then_inps: list[torch.Tensor], else_body: Callable[..., list[torch.Tensor]],
         else_inps: list[torch.Tensor]) -> list[torch.Tensor]:
    """``then_body(*then_inps)`` if ``condition`` (a one-element boolean tensor)
    is true, else ``else_body(*else_inps)``, as a list of tensors."""
    if not isinstance(then_inps, list) or not isinstance(else_inps, list):
        raise ValueError("poptorch.cond expects then_inps and else_inps tensors to be a list "
                         "of tensors. (Object is not list)")
    if not isRunningOnIpu():   # plain torch, as PopTorch runs it on the CPU
        return _as_list(then_body(*then_inps) if condition else else_body(*else_inps))
    if in_training_model():
        raise Error("poptorch.cond() is only supported in inference.")
    if is_fake(condition):     # timing-only: no value to branch on
        return _as_list(then_body(*then_inps))
    if condition:
        return _as_list(then_body(*then_inps))
    return _as_list(else_body(*else_inps))
