"""PopTorch's compile hooks: callables run before and after each model compiles.

``poptorch.registerPreCompileHook`` and ``registerPostCompileHook`` take a
callable with no arguments and return a :class:`torch.utils.hooks.RemovableHandle`
(PopTorch's ``_poplar_executor.py``); the hooks run in the order they were
registered, the post-compile ones even when compiling fails. While they run,
:func:`compiling` names the model being compiled and its first micro-batch,
which is how the sweep captures a script's model without touching the shim.
"""
from __future__ import annotations

import collections
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from torch.utils.hooks import RemovableHandle

_PRE_COMPILE: dict[int, Callable[[], Any]] = collections.OrderedDict()
_POST_COMPILE: dict[int, Callable[[], Any]] = collections.OrderedDict()
_COMPILING: ContextVar[tuple[Any, tuple] | None] = ContextVar("poptorch_compiling", default=None)


def _register(hooks: dict, hook: Callable[[], Any], which: str) -> RemovableHandle:
    if not callable(hook):
        raise RuntimeError(f"{which} hook must be callable")
    handle = RemovableHandle(hooks)
    hooks[handle.id] = hook
    return handle


def registerPreCompileHook(hook: Callable[[], Any]) -> RemovableHandle:
    """Register ``hook`` to run before each model compiles; ``handle.remove()`` removes it."""
    return _register(_PRE_COMPILE, hook, "Pre-compile")


def registerPostCompileHook(hook: Callable[[], Any]) -> RemovableHandle:
    """Register ``hook`` to run after each model compiles, or fails to."""
    return _register(_POST_COMPILE, hook, "Post-compile")


def compiling() -> tuple[Any, tuple] | None:
    """The executor being compiled and its first micro-batch ``(args, kwargs)``,
    while compile hooks run; None otherwise."""
    return _COMPILING.get()


@contextmanager
def compile_hooks(executor: Any, first_micro_batch: tuple) -> Iterator[None]:
    """Run the pre-compile hooks, the compilation inside the block, then the
    post-compile hooks, whatever the compilation raised."""
    token = _COMPILING.set((executor, first_micro_batch))
    try:
        for hook in list(_PRE_COMPILE.values()):
            hook()
        yield
    finally:
        try:
            for hook in list(_POST_COMPILE.values()):
                hook()
        finally:
            _COMPILING.reset(token)
