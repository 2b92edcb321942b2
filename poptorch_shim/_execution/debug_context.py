"""Where each operator of a model comes from: its module path and the user's line.

PopTorch gives every operation a debug context: the module that made it
(``encoder.layer.3.attention.self.query``) and the file, line and function of the
user's code that called it, which PopVision and libpva show. While a model's first
micro-batch is measured, :func:`recording_contexts` keeps a stack of the modules running
(global forward hooks) and, for each operator the forward runs
(:func:`note`, called by the cost probe), the innermost module and the innermost
frame of the stack outside torch, the shim and the simulator: the line of the
user's model that called it.

The context is PopTorch's ``poptorch`` layer: ``op_name`` is the module path with
``/`` between its attributes and the operation's PopTorch type last
(``block0/lstm/LSTM``; a model's own operation is its type alone, ``Pow``),
``op_type`` that type (:func:`poptorch_type`: PopART's name for the aten operator,
``Identityloss`` for the reduction ``identity_loss`` makes). An operator of the
backward pass runs in autograd's engine, outside any module: it takes the context
of the forward operator whose autograd node it computes the gradient of (the node's
sequence number, which torch numbers forward nodes by, ties the two), as PopART's
gradient operators take their forward operator's debug context.
"""
from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

import ipusim
from poptorch_shim._core.poptorch_ops import running_op

# Frames in these folders are library code, not the user's: torch's, the shim's, ipusim's.
_LIBRARIES = tuple(str(folder) for folder in (Path(torch.__file__).resolve().parent,
                                              Path(__file__).resolve().parent.parent,
                                              Path(ipusim.__file__).resolve().parent))
_recorders: list[DebugRecorder] = []
#: PopART's operator types for the aten operators whose name is not theirs camel-cased.
_POPART_TYPES = {
    "addmm": "MatMul", "mm": "MatMul", "bmm": "MatMul", "matmul": "MatMul", "linear": "MatMul",
    "_log_softmax": "LogSoftmax", "log_softmax": "LogSoftmax", "_softmax": "Softmax",
    "lstm": "LSTM", "mkldnn_rnn_layer": "LSTM", "gru": "GRU", "convolution": "Conv",
    "_convolution": "Conv", "native_layer_norm": "GroupNormalization",
    "native_batch_norm": "BatchNormalization", "embedding": "Gather",
    "sum": "ReduceSum", "mean": "ReduceMean", "gelu": "Gelu", "tanh": "Tanh",
    "sigmoid": "Sigmoid", "div": "Div", "sub": "Sub", "rsub": "Sub", "t": "Transpose",
    "transpose": "Transpose", "view": "Reshape", "_unsafe_view": "Reshape",
}


def poptorch_type(op: str) -> str:
    """PopTorch's type of the aten operator ``op`` (``aten::pow`` is ``Pow``): PopART's
    operator type where its name differs, else the aten name camel-cased."""
    name = op.removeprefix("aten::")
    if running_op():
        return running_op()
    if name in _POPART_TYPES:
        return _POPART_TYPES[name]
    return "".join(part[:1].upper() + part[1:] for part in name.split("_") if part) or name


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
        #: Each forward operator's context by its autograd node's sequence number.
        self._by_node: dict[int, dict] = {}
        #: The context of each module's first call, by its path: where the model uses it.
        self.modules: dict[str, dict] = {}

    def enter(self, module: torch.nn.Module) -> None:
        self._stack.append(self._paths.get(id(module), type(module).__name__))

    def leave(self, module: torch.nn.Module) -> None:
        if self._stack:
            self._stack.pop()

    def note(self, key: tuple) -> None:
        """Record the context of one run of the operator ``key`` (:func:`kernel_key`): in
        the forward, where the user's code called it; in the backward, that of the forward
        operator whose gradient it computes (none when there is no such operator)."""
        node = torch._C._current_autograd_node()
        if node is not None:
            context = self._by_node.get(node._sequence_nr())
            if context is not None:
                self.contexts.setdefault(key, []).append(context)
            return
        frame = sys._getframe(1)
        while frame is not None and str(Path(frame.f_code.co_filename).resolve()).startswith(
                _LIBRARIES):
            frame = frame.f_back
        module = self._stack[-1] if self._stack else ""
        op_type = poptorch_type(key[0])
        prefix = module.replace(".", "/")
        context = {
            "layer": "poptorch", "name": f"{prefix}/{op_type}" if prefix else op_type,
            "op_type": op_type, "aten": key[0], "module": module,
            "fileName": str(Path(frame.f_code.co_filename).resolve()) if frame else "",
            "lineNumber": frame.f_lineno if frame else 0,
            "functionName": frame.f_code.co_name if frame else ""}
        self.contexts.setdefault(key, []).append(context)
        self.modules.setdefault(module, context)
        # The autograd node this operator made, if any, was numbered last (a grad-free
        # operator makes none: the number then is an earlier operator's, kept as it was).
        self._by_node.setdefault(torch._C._autograd._get_sequence_nr() - 1, context)


def update_context(recorder: DebugRecorder, module: str, op: str) -> dict | None:
    """The context of the weight update's operator ``op`` over a parameter of ``module``:
    the module's, where the model first called it (None if the forward never did)."""
    called = recorder.modules.get(module)
    if called is None:
        return None
    op_type = "".join(word[:1].upper() + word[1:] for word in op.split())
    prefix = module.replace(".", "/")
    return {**called, "name": f"{prefix}/{op_type}" if prefix else op_type,
            "op_type": op_type, "aten": ""}


def note(key: tuple) -> None:
    """Record one run of an operator on the recorder in use, if any."""
    if _recorders:
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
