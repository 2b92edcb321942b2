"""Which DataLoader fed a model: the loader whose step a model call received.

A script's loop hands each step a loader yields to a model (``for x, y in
loader: model(x, y)``). The loader notes the tensors of the step it yields;
a model call that receives one of them was fed by that loader, and the
loader's measured rate is that model's alone. A training and an inference
model built from one Options object each get their own loader's rate.
"""
from __future__ import annotations

import weakref

from torch.utils._pytree import tree_leaves

_last: tuple[weakref.ref, frozenset[int]] | None = None  # the loader, its step's tensors
_feeding: weakref.WeakSet = weakref.WeakSet()  # loaders whose steps reached a model


def yielded(loader: object, step: object) -> None:
    """Note that ``loader`` handed out ``step`` (its tensors, by identity)."""
    global _last
    _last = weakref.ref(loader), frozenset(id(leaf) for leaf in tree_leaves(step)
                                            if hasattr(leaf, "data_ptr"))


def feeder(inputs: object) -> object | None:
    """The loader whose last step ``inputs`` (a model call's arguments) hold, if any."""
    if _last is None:
        return None
    loader, tensors = _last[0](), _last[1]
    if loader is None or not any(id(leaf) in tensors for leaf in tree_leaves(inputs)):
        return None
    _feeding.add(loader)
    return loader


def feeds_a_model(loader: object) -> bool:
    """Whether a step of ``loader`` has reached a model call."""
    return loader in _feeding
