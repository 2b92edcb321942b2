"""Calls a model makes inside its forward to annotate tensors for the IPU.

``recomputationCheckpoint`` marks the activations recomputation keeps: the
backward pass recomputes the forward from the last checkpoint instead of
keeping every activation. ``set_overlap_for_input`` and
``set_overlap_for_output`` ask for a tensor's stream copies to run on the I/O
tiles, overlapped with compute. Each passes its tensors through unchanged and
tells whoever is measuring the model (the cost probe, the compiler) what was
asked, as ``(kind, tensors)``. ``Attribute`` scopes PopART attributes (such
as optimum-graphcore's outlining ``__outline``) over the operators traced in
its block.
"""
from __future__ import annotations

import copy
import enum
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import fx

CHECKPOINT, OVERLAP_INPUT, OVERLAP_OUTPUT = "checkpoint", "overlap_input", "overlap_output"

Observer = Callable[[str, tuple[torch.Tensor, ...]], None]
_observers: list[Observer] = []


class OverlapMode(enum.Enum):
    """How a stream copy overlaps compute (PopTorch's ``poptorch.OverlapMode``)."""

    NoOverlap = "no_overlap"
    OverlapAccumulationLoop = "overlap_accumulation_loop"
    OverlapDeviceIterationLoop = "overlap_device_iteration_loop"


def _annotate(kind: str, tensors: tuple, function: Callable, call_args: tuple) -> Any:
    """Tell the observers about ``tensors``; under torch.fx, record the call
    ``function(*call_args)`` as a node instead, so the split stage makes it."""
    proxy = next((t for t in tensors if isinstance(t, fx.Proxy)), None)
    if proxy is not None:
        return proxy.tracer.create_proxy("call_function", function, call_args, {})
    for observer in _observers:
        observer(kind, tensors)
    return None


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


@contextmanager
def observing(observer: Observer) -> Iterator[None]:
    """Call ``observer(kind, tensors)`` for every annotation reached in the block."""
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
