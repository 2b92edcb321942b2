"""``poptorch.recomputationCheckpoint``: the activations recomputation keeps.

With recomputation on, the backward pass recomputes the forward from the
last checkpoint instead of keeping every activation; only the checkpointed
tensors stay in memory between the passes. Here the checkpoint passes its
tensors through unchanged and tells whoever is measuring the model (the cost
probe) where the forward is cut, so memory is counted per segment.
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Iterator

import torch
from torch import fx

_observers: list[Callable[[tuple[torch.Tensor, ...]], None]] = []


def recomputationCheckpoint(*tensors: torch.Tensor):
    """Checkpoint ``tensors`` for recomputation; returns them (one tensor for
    one argument, else a tuple), as PopTorch does."""
    if any(isinstance(t, fx.Proxy) for t in tensors):
        # Traced by torch.fx: one node of its own, so the split stage calls it.
        tracer = next(t for t in tensors if isinstance(t, fx.Proxy)).tracer
        out = tracer.create_proxy("call_function", recomputationCheckpoint, tensors, {})
        return out if len(tensors) == 1 else tuple(out[i] for i in range(len(tensors)))
    for observer in _observers:
        observer(tensors)
    return tensors[0] if len(tensors) == 1 else tensors


@contextmanager
def observing(observer: Callable[[tuple[torch.Tensor, ...]], None]) -> Iterator[None]:
    """Call ``observer`` with the tensors of every checkpoint reached in the block."""
    _observers.append(observer)
    try:
        yield
    finally:
        _observers.remove(observer)
