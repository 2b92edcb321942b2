"""Where each operator of a model comes from: its module path and the user's line.

PopTorch gives every operation a debug context: the module that made it
(``encoder.layer.3.attention.self.query``) and the file, line and function of the
user's code that called it, which PopVision and libpva show. While a model's first
micro-batch is measured, :func:`recording_contexts` keeps a stack of the modules running
(global forward hooks) and, for each operator the forward runs
(:func:`note`, called by the cost probe), the innermost module and the innermost
frame of the stack outside torch, the shim and the simulator: the line of the
user's model that called it. Operators of the backward pass run in autograd's
engine, outside any module, and get none.
"""
from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

import ipusim

# Frames in these folders are library code, not the user's: torch's, the shim's, ipusim's.
_LIBRARIES = tuple(str(folder) for folder in (Path(torch.__file__).resolve().parent,
                                              Path(__file__).resolve().parent.parent,
                                              Path(ipusim.__file__).resolve().parent))
_recorders: list[DebugRecorder] = []


def kernel_key(op: str, kind: str, width: int, m: int, k: int, n: int, groups: int,
               elements: int) -> tuple:
    """What identifies an operator's kernel in both the probe and the operator breakdown."""
    return (op, kind, width, m, k, n, groups, elements)


class DebugRecorder:
    """The debug contexts of the operators run while it records, by kernel, in the order
    they ran."""

    def __init__(self, model: torch.nn.Module):
        self._paths = {id(module): path for path, module in model.named_modules()}
        self._stack: list[str] = []
        self.contexts: dict[tuple, list[dict]] = {}

    def enter(self, module: torch.nn.Module) -> None:
        self._stack.append(self._paths.get(id(module), type(module).__name__))

    def leave(self, module: torch.nn.Module) -> None:
        if self._stack:
            self._stack.pop()

    def note(self, key: tuple) -> None:
        """Record the context of one run of the operator ``key`` (:func:`kernel_key`)."""
        frame = sys._getframe(1)
        while frame is not None and str(Path(frame.f_code.co_filename).resolve()).startswith(
                _LIBRARIES):
            frame = frame.f_back
        module = self._stack[-1] if self._stack else ""
        self.contexts.setdefault(key, []).append({
            "layer": "poptorch", "name": f"{module}/{key[0]}" if module else key[0],
            "op_type": key[0], "module": module,
            "fileName": str(Path(frame.f_code.co_filename).resolve()) if frame else "",
            "lineNumber": frame.f_lineno if frame else 0,
            "functionName": frame.f_code.co_name if frame else ""})


def note(key: tuple) -> None:
    """Record one forward run of an operator on the recorder in use, if any."""
    if _recorders and torch._C._current_autograd_node() is None:
        _recorders[-1].note(key)


@contextmanager
def recording_contexts(model: torch.nn.Module) -> Iterator[DebugRecorder]:
    """Record the debug contexts of the operators ``model`` runs inside the block."""
    recorder = DebugRecorder(model)
    hooks = (torch.nn.modules.module.register_module_forward_pre_hook(
                 lambda module, _: recorder.enter(module)),
             torch.nn.modules.module.register_module_forward_hook(
                 lambda module, _, __: recorder.leave(module)))
    _recorders.append(recorder)
    try:
        yield recorder
    finally:
        _recorders.remove(recorder)
        for hook in hooks:
            hook.remove()
