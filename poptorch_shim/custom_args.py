"""``poptorch.ICustomArgParser`` and ``registerCustomArgParser``: model inputs
of the user's own types.

A parser tells PopTorch which tensors an object holds (``yieldTensors``) and
how to build a like object from new tensors (``reconstruct``). The shim
splits a call's inputs into micro-batches, checks their shapes and assembles
outputs by flattening them with ``torch.utils._pytree``; a registered type is
taken apart and rebuilt there through its parser, so a batch of such objects
is split like a tuple of its tensors. Each type is looked up by its method
resolution order, so a parser registered for a base class serves its
subclasses.
"""
from __future__ import annotations

import abc
from collections.abc import Iterable, Iterator
from typing import Any

import torch
from torch.utils import _pytree

_parsers: dict[type, ICustomArgParser] = {}
_flattened: set[type] = set()   # types made known to torch's pytree


class ICustomArgParser(abc.ABC):
    """How to take an input type apart into tensors and build it again."""

    @abc.abstractmethod
    def yieldTensors(self, struct: Any) -> Iterable[torch.Tensor]:
        """Yield every tensor of ``struct``, always in the same order."""

    @abc.abstractmethod
    def reconstruct(self, original_structure: Any,
                    tensor_iterator: Iterator[torch.Tensor]) -> Any:
        """A new object like ``original_structure`` holding the tensors
        ``tensor_iterator`` yields, in ``yieldTensors``'s order."""


def registerCustomArgParser(arg_type: type, parser: ICustomArgParser) -> None:
    """Use ``parser`` for model inputs of ``arg_type`` (and its subclasses)."""
    if not isinstance(arg_type, type):
        raise TypeError(f"poptorch.registerCustomArgParser: arg_type must be a class, got "
                        f"{arg_type!r}.")
    if not isinstance(parser, ICustomArgParser):
        raise TypeError(f"poptorch.registerCustomArgParser: parser must be an instance of a "
                        f"poptorch.ICustomArgParser subclass, got {type(parser).__name__}.")
    _parsers[arg_type] = parser


def parser_for(kind: type) -> ICustomArgParser | None:
    """The parser registered for ``kind`` or its nearest base class."""
    return next((_parsers[base] for base in kind.__mro__ if base in _parsers), None)


class _Original:
    """The context of a flattened custom object: the object itself, for its
    parser's ``reconstruct``. Two contexts are equal when their objects are of
    the same type and hold as many tensors, so that inputs of one layout give
    one signature call after call."""

    def __init__(self, struct: Any, tensors: int):
        self.struct, self.tensors = struct, tensors

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, _Original) and type(other.struct) is type(self.struct)
                and other.tensors == self.tensors)

    def __hash__(self) -> int:
        return hash((type(self.struct), self.tensors))

    def __repr__(self) -> str:
        return f"{type(self.struct).__name__}({self.tensors} tensors)"


def tensors_of(struct: Any) -> list:
    """The tensors of an object of a registered type, as its parser yields them."""
    return list(parser_for(type(struct)).yieldTensors(struct))


def rebuilt(original: Any, children: Iterable) -> Any:
    """An object like ``original`` (of a registered type) holding ``children``, as its
    parser reconstructs it, itself flattened wherever the shim walks it."""
    out = parser_for(type(original)).reconstruct(original, iter(list(children)))
    flatten_custom_types(out)   # a parser may rebuild a base class of what it was given
    return out


def _flatten(struct: Any) -> tuple[list, _Original]:
    tensors = tensors_of(struct)
    return tensors, _Original(struct, len(tensors))


def _unflatten(children: Iterable, context: _Original) -> Any:
    return rebuilt(context.struct, children)


def flatten_custom_types(value: Any) -> None:
    """Make every registered type found in ``value`` (a call's inputs or a
    model's outputs) flatten through its parser wherever the shim walks it."""
    if isinstance(value, (list, tuple)):
        for item in value:
            flatten_custom_types(item)
    elif isinstance(value, dict):
        for item in value.values():
            flatten_custom_types(item)
    elif not isinstance(value, torch.Tensor) and type(value) not in _flattened:
        if parser_for(type(value)) is not None:
            _pytree.register_pytree_node(type(value), _flatten, _unflatten)
            _flattened.add(type(value))
