"""Room on Python's stack for a deep model: copying and running a module tree a few
hundred levels deep under the shim's hooks takes more frames than plain torch."""
from __future__ import annotations

import sys
from contextlib import AbstractContextManager, nullcontext

import torch

# Python frames one level of a module tree takes when it is copied, or called
# under the shim's hooks and torch function modes, with room to spare.
_FRAMES_PER_LEVEL = 12


def stack_needed(model: torch.nn.Module) -> int:
    """The recursion limit that copying and running ``model`` under the shim needs:
    a model nested a few hundred modules deep runs in torch, and must here too."""
    depth, level = 0, [model]
    while level:
        depth += 1
        level = [child for module in level for child in module.children()]
    return depth * _FRAMES_PER_LEVEL + 1000


def recursion_room(needed: int) -> AbstractContextManager[None]:
    """Python's recursion limit raised to ``needed`` inside the ``with`` body, if lower."""
    limit = sys.getrecursionlimit()
    return nullcontext() if needed <= limit else _RaisedLimit(needed, limit)


class _RaisedLimit:
    """The recursion limit at ``needed`` inside the ``with`` body, ``limit`` after it
    (a class rather than a generator: a deep model's every call enters it)."""

    __slots__ = ("needed", "limit")

    def __init__(self, needed: int, limit: int):
        self.needed, self.limit = needed, limit

    def __enter__(self) -> None:
        sys.setrecursionlimit(self.needed)

    def __exit__(self, *exc) -> None:
        sys.setrecursionlimit(self.limit)
