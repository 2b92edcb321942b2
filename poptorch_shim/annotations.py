"""Calls a model makes inside its forward to annotate tensors for the IPU.

``recomputationCheckpoint`` marks the activations recomputation keeps: the
backward pass recomputes the forward from the last checkpoint instead of
keeping every activation. ``set_overlap_for_input`` and
``set_overlap_for_output`` ask for a tensor's stream copies to run on the I/O
tiles, overlapped with compute. ``set_available_memory`` bounds the temporary
memory of the operator that made a tensor (the matmul or convolution just
before it), which the cost model plans that operator within. Each passes its
tensors through unchanged and tells whoever is measuring the model (the cost
probe, the compiler) what was asked, as ``(kind, tensors, value)``.
``Attribute`` scopes PopART attributes (such as optimum-graphcore's outlining
``__outline``) over the operators traced in its block.
"""
from __future__ import annotations

import copy
import enum
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import fx

from poptorch_shim.errors import Error

CHECKPOINT, OVERLAP_INPUT, OVERLAP_OUTPUT = "checkpoint", "overlap_input", "overlap_output"
AVAILABLE_MEMORY = "available_memory"
CUSTOM_COST = "custom_cost"  # a custom operator's registered cost, charged for its outputs

#: Told ``(kind, tensors, value)``: ``value`` is what the annotation sets (the
#: proportion of ``set_available_memory``), None for the others.
Observer = Callable[[str, tuple[torch.Tensor, ...], Any], None]
_observers: list[Observer] = []


class OverlapMode(enum.Enum):
    """How a stream copy overlaps compute (PopTorch's ``poptorch.OverlapMode``)."""

    NoOverlap = "no_overlap"
    OverlapAccumulationLoop = "overlap_accumulation_loop"
    OverlapDeviceIterationLoop = "overlap_device_iteration_loop"


def _annotate(kind: str, tensors: tuple, function: Callable, call_args: tuple,
              value: Any = None) -> Any:
    """Tell the observers about ``tensors``; under torch.fx, record the call
    ``function(*call_args)`` as a node instead, so the split stage makes it."""
    proxy = next((t for t in tensors if isinstance(t, fx.Proxy)), None)
    if proxy is not None:
        return proxy.tracer.create_proxy("call_function", function, call_args, {})
    tell(kind, tensors, value)
    return None


def tell(kind: str, tensors: tuple, value: Any) -> None:
    """Tell the observers ``(kind, tensors, value)`` from an operator computed outside
    the counters (a custom operator charging its registered cost)."""
    for observer in _observers:
        observer(kind, tensors, value)


def recomputationCheckpoint(*tensors: torch.Tensor):
    """Checkpoint ``tensors`` for recomputation; returns them (one tensor for
    one argument, else a tuple), as PopTorch does."""
    traced = _annotate(CHECKPOINT, tensors, recomputationCheckpoint, tensors)
    if traced is not None:
        return traced if len(tensors) == 1 else tuple(traced[i] for i in range(len(tensors)))
    return tensors[0] if len(tensors) == 1 else tensors


def set_overlap_for_input(input_tensors, mode: OverlapMode = OverlapMode.OverlapAccumulationLoop):
    """Stream ``input_tensors`` in on the I/O tiles while the compute tiles work
    (needs ``Options.TensorLocations.numIOTiles``); returns them."""
    return _overlap(OVERLAP_INPUT, set_overlap_for_input, input_tensors, mode)


def set_overlap_for_output(output_tensors,
                           mode: OverlapMode = OverlapMode.OverlapAccumulationLoop):
    """Stream ``output_tensors`` out on the I/O tiles while the compute tiles
    work (needs ``Options.TensorLocations.numIOTiles``); returns them."""
    return _overlap(OVERLAP_OUTPUT, set_overlap_for_output, output_tensors, mode)


def _overlap(kind: str, function: Callable, tensors, mode: OverlapMode):
    if not isinstance(mode, OverlapMode):
        raise TypeError(f"{function.__name__}: mode must be a poptorch.OverlapMode, got {mode!r}")
    if mode is OverlapMode.NoOverlap:
        return tensors
    given = (tensors,) if isinstance(tensors, (torch.Tensor, fx.Proxy)) else tuple(tensors)
    traced = _annotate(kind, given, function, (tensors, mode))
    return tensors if traced is None else traced


def set_available_memory(tensor: torch.Tensor,
                         available_memory_proportion: float) -> torch.Tensor:
    """Plan the operator that made ``tensor`` (a matmul or a convolution, found as
    PopTorch finds it: the tensor's maker or, through a reshape or a bias, one of
    the two operators before it) within ``available_memory_proportion`` of tile
    memory instead of the IPU's proportion; on any other tensor, an identity.
    Returns ``tensor``."""
    if not isinstance(tensor, (torch.Tensor, fx.Proxy)):
        raise Error("You may only set available memory for torch.tensor values. "
                    f"{type(tensor)} is not supported.")
    if isinstance(available_memory_proportion, bool) \
            or not isinstance(available_memory_proportion, (int, float)) \
            or not 0 < available_memory_proportion <= 1:
        raise Error(f"set_available_memory: available_memory_proportion must be a proportion "
                    f"in (0, 1], got {available_memory_proportion!r}.")
    traced = _annotate(AVAILABLE_MEMORY, (tensor,), set_available_memory,
                       (tensor, available_memory_proportion),
                       float(available_memory_proportion))
    return tensor if traced is None else traced


@contextmanager
def observing(observer: Observer) -> Iterator[None]:
    """Call ``observer(kind, tensors, value)`` for every annotation reached in the block."""
    _observers.append(observer)
    try:
        yield
    finally:
        _observers.remove(observer)


class Attribute:
    """A context manager that sets PopART attributes on the operators made in
    its block, as PopTorch's ``poptorch.Attribute``: ``Attribute(__outline={"layer":
    1})`` sets the ``__outline`` attribute's key ``layer``. Nested blocks add
    keys, and each block's exit restores what was set before it.

    PopART reads the attributes when it outlines and schedules the IR, which
    the simulator does not model: the attributes in force are kept, in
    :attr:`current`, and change no timing.
    """
    current: dict[str, dict[str, Any]] = {}

    def __init__(self, **attributes: dict[str, Any]) -> None:
        for name, keys in attributes.items():
            if not isinstance(keys, dict):
                raise TypeError(f"poptorch.Attribute({name}=...) takes a dict of the "
                                f"attribute's keys and values, got {type(keys).__name__}")
        self._attributes = attributes
        self._saved: dict[str, dict[str, Any]] = {}

    def __enter__(self) -> Attribute:
        self._saved = copy.deepcopy(Attribute.current)
        for name, keys in self._attributes.items():
            Attribute.current.setdefault(name, {}).update(keys)
        return self

    def __exit__(self, *exc) -> None:
        Attribute.current = self._saved
