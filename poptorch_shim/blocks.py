"""``poptorch.Block``, ``BeginBlock``, ``BlockFunction`` and ``removeBlocks``:
naming the parts of a model that execution strategies place on IPUs.

As in PopTorch, starting a block marks everything the forward pass does from
then on as belonging to it, until the next block starts: leaving a ``with
Block(...)`` scope does not go back to the enclosing block (PopTorch's
``end_ipu_block`` only closes the annotation). Work done before the first
block belongs to the first block.

Outside a model run (in plain torch, or a model with no execution strategy)
blocks do nothing. While the staged runner traces or profiles a model it
installs a :class:`BlockRecorder`; ``Block.start`` then tells it which block
is current, so the torch.fx tracer can tag each graph node with its block.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import torch

from poptorch_shim.errors import Error

_RECORDER: ContextVar[BlockRecorder | None] = ContextVar("poptorch_block_recorder",
                                                              default=None)


@dataclass(frozen=True)
class BlockMark:
    """One start of a block: its id (any hashable; automatic ids are "0",
    "1", ...) and the IPU it asked for (None: not given)."""

    user_id: Hashable
    ipu_id: int | None


class BlockRecorder:
    """Tracks the current block during one pass over the model.

    ``on_start`` is called with each new :class:`BlockMark`, so a profiler can
    switch the stage it charges work to.
    """

    def __init__(self, on_start: Callable[[BlockMark], None] | None = None):
        self.current: BlockMark | None = None
        self.ended = False   # a ``with Block`` has ended and no block has started since
        self.ipus: dict[Hashable, int | None] = {}  # block id -> first ipu_id, in order seen
        self._next_auto_id = 0
        self._hook_ids: dict[int, str] = {}
        self._on_start = on_start

    def start(self, user_id: Hashable | None, ipu_id: int | None) -> None:
        # As PopTorch's stage manager does (``user_id or nextAutoId()``), any
        # false id (None, "", 0) gets the next automatic id.
        if not user_id:
            user_id = self.next_auto_id()
        mark = BlockMark(user_id, ipu_id)
        self.current, self.ended = mark, False
        if self.ipus.get(user_id) is None:
            self.ipus[user_id] = ipu_id
        if self._on_start is not None:
            self._on_start(mark)

    def end(self) -> None:
        """A ``with Block`` ended: until the next block starts, no block is active."""
        self.current, self.ended = None, True

    def next_auto_id(self) -> str:
        user_id = str(self._next_auto_id)
        self._next_auto_id += 1
        return user_id

    def hook_id(self, hook: _BlockHook) -> str:
        """The automatic id of an id-less ``BeginBlock``: fixed at its first call,
        so a module called twice stays one block (as in PopTorch)."""
        if id(hook) not in self._hook_ids:
            self._hook_ids[id(hook)] = self.next_auto_id()
        return self._hook_ids[id(hook)]

    def reset_auto_id(self) -> None:
        self._next_auto_id = 0


@contextmanager
def recording(recorder: BlockRecorder) -> Iterator[BlockRecorder]:
    """Make ``recorder`` see the blocks started inside the ``with`` body."""
    token = _RECORDER.set(recorder)
    try:
        yield recorder
    finally:
        _RECORDER.reset(token)


NO_ACTIVE_BLOCK_ERR = "No active Block, all the ops must belong to a Block"


def require_active_block() -> None:
    """Refuse an operation of a model split at Blocks that runs after a ``with
    Block`` ended and before another block started, as PopTorch's compiler does
    (``poptorch.Error``, popart_compiler's CompilerImpl.cpp)."""
    recorder = _RECORDER.get()
    if recorder is not None and recorder.ended:
        raise Error(NO_ACTIVE_BLOCK_ERR, type="poptorch_cpp_error")


def current_block() -> BlockMark | None:
    """The block the forward pass is in, or None (no recorder, or before any block)."""
    recorder = _RECORDER.get()
    return None if recorder is None else recorder.current


def _check_ids(user_id: Any, ipu_id: Any, where: str) -> None:
    if not isinstance(user_id, Hashable):
        raise TypeError(f"{where}: user_id must be hashable (a str, an int, ...) or None for an "
                        f"automatic id, got {user_id!r} ({type(user_id).__name__}).")
    if ipu_id is not None and (isinstance(ipu_id, bool) or not isinstance(ipu_id, int)
                               or ipu_id < 0):
        raise TypeError(f"{where}: ipu_id must be a non-negative int (or None), got {ipu_id!r}.")


class Block:
    """A context manager naming a block of the model, optionally with its IPU.

    >>> with poptorch.Block("B1", ipu_id=0):
    ...     x = self.layer1(x)

    Blocks with the same ``user_id`` are one block. An execution strategy
    (``poptorch.PipelinedExecution`` ...) groups blocks into stages and
    places them on IPUs; ``strategy.stage(id).ipu(i)`` overrides ``ipu_id``.
    """

    @staticmethod
    def useAutoId() -> None:
        """Restart automatic ids: blocks created without a ``user_id`` are
        named "0", "1", ... in the order they start. Call it at the top of
        ``forward``."""
        recorder = _RECORDER.get()
        if recorder is not None:
            recorder.reset_auto_id()

    @staticmethod
    def start(user_id: Hashable | None = None, ipu_id: int | None = None) -> None:
        """Start a block here without a ``with`` scope."""
        _check_ids(user_id, ipu_id, "poptorch.Block.start")
        recorder = _RECORDER.get()
        if recorder is not None:
            recorder.start(user_id, ipu_id)

    def __init__(self, user_id: Hashable | None = None, ipu_id: int | None = None):
        _check_ids(user_id, ipu_id, "poptorch.Block")
        self._user_id = user_id
        self._ipu_id = ipu_id

    def __enter__(self) -> Block:
        Block.start(self._user_id, self._ipu_id)
        return self

    def __exit__(self, *exc_info) -> None:
        """The block ends, as in PopTorch: until the next one starts, an operation
        of a model split at Blocks belongs to none, which PopTorch refuses."""
        recorder = _RECORDER.get()
        if recorder is not None:
            recorder.end()


class _BlockHook:
    """A forward pre-hook that starts a block when its module is called."""

    def __init__(self, user_id: Hashable | None, ipu_id: int | None):
        self.user_id = user_id
        self.ipu_id = ipu_id

    def __call__(self, module: torch.nn.Module, inputs: Any) -> None:
        recorder = _RECORDER.get()
        if recorder is not None:
            user_id = recorder.hook_id(self) if self.user_id is None else self.user_id
            recorder.start(user_id, self.ipu_id)

    def __repr__(self) -> str:
        return f"BeginBlock(user_id={self.user_id!r}, ipu_id={self.ipu_id!r})"


class _BeginBlockFn(torch.nn.Module):
    """What ``BeginBlock`` returns for a callable that is not a module: a module
    that starts the block, then calls it (PopTorch's ``LegacyBeginBlockFn``); it
    pickles whenever the callable does."""

    def __init__(self, layer_to_call: Callable, user_id: Hashable | None,
                 ipu_id: int | None):
        super().__init__()
        self._layer_to_call = layer_to_call
        self._user_id = user_id
        self._ipu_id = ipu_id

    def __call__(self, *args, **kwargs) -> Any:
        Block.start(self._user_id, self._ipu_id)
        return self._layer_to_call(*args, **kwargs)

    def extra_repr(self) -> str:
        return f"user_id={self._user_id!r}, ipu_id={self._ipu_id!r}"


def block_hooks(module: torch.nn.Module) -> list[_BlockHook]:
    """The ``BeginBlock`` hooks registered on ``module`` itself."""
    return [hook for hook in module._forward_pre_hooks.values() if isinstance(hook, _BlockHook)]


def BeginBlock(layer_to_call: Any, user_id: Hashable | None = None,
               ipu_id: int | None = None) -> Any:
    """Start a block whenever ``layer_to_call`` (a module) is called.

    The module, and everything after it until the next block, belongs to the
    block. Returns the module (changed in place). A plain callable is wrapped
    in a picklable module that starts the block and then calls it.
    """
    _check_ids(user_id, ipu_id, "poptorch.BeginBlock")
    if not isinstance(layer_to_call, torch.nn.Module):
        if not callable(layer_to_call):
            raise TypeError("poptorch.BeginBlock: layer_to_call must be a torch.nn.Module or a "
                            f"callable, got {type(layer_to_call).__name__}.")

        return _BeginBlockFn(layer_to_call, user_id, ipu_id)
    if block_hooks(layer_to_call):
        raise ValueError(f"poptorch.BeginBlock: the module has already been assigned to a block "
                         f"({block_hooks(layer_to_call)[0]!r}); call poptorch.removeBlocks(module) "
                         "first to reassign it.")
    layer_to_call.register_forward_pre_hook(_BlockHook(user_id, ipu_id))
    return layer_to_call


def BlockFunction(user_id: Hashable | None = None, ipu_id: int | None = None):
    """A decorator running the decorated function inside ``Block(user_id, ipu_id)``.

    >>> @poptorch.BlockFunction("Decoder", ipu_id=1)
    ... def decoder(self, encoded):
    ...     return self.decoder_layer(encoded)
    """
    _check_ids(user_id, ipu_id, "poptorch.BlockFunction")

    def decorator(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with Block(user_id, ipu_id):
                return func(*args, **kwargs)

        return wrapper

    return decorator


def removeBlocks(module: torch.nn.Module) -> None:
    """Remove every ``BeginBlock`` annotation from ``module`` and its sub-modules."""
    if not isinstance(module, torch.nn.Module):
        raise TypeError(f"poptorch.removeBlocks: module must be a torch.nn.Module, got "
                        f"{type(module).__name__}.")
    for sub in module.modules():
        for key in [k for k, hook in sub._forward_pre_hooks.items()
                    if isinstance(hook, _BlockHook)]:
            del sub._forward_pre_hooks[key]


def module_repr(module: torch.nn.Module) -> str:
    """``repr(module)`` with each submodule's ``BeginBlock`` (its forward
    pre-hooks) written before its name, as PopTorch's ``module_repr`` shows
    them: ``(l1): BeginBlock(user_id=None, ipu_id=1) Linear(...)``."""
    extra = module.extra_repr()
    extra_lines = extra.split("\n") if extra else []
    child_lines = []
    for key, child in module._modules.items():
        text = module_repr(child).replace("\n", "\n  ")
        child_lines.append(f"({key}): {text}")
    hooks = "".join(f"{hook!r} " for hook in module._forward_pre_hooks.values())
    text = hooks + module._get_name() + "("
    lines = extra_lines + child_lines
    if len(extra_lines) == 1 and not child_lines:
        text += extra_lines[0]
    elif lines:
        text += "\n  " + "\n  ".join(lines) + "\n"
    return text + ")"
