"""Outputs and inputs of any container PopTorch walks: dict subclasses
(transformers' ``ModelOutput``), dataclasses and namedtuples.

The shim splits inputs, finds the loss and assembles outputs with torch's
pytree, which walks tuples, lists, dicts and namedtuples but takes a dict
subclass or a dataclass for one opaque leaf: with ``deviceIterations(4)`` such
an output would come back as one micro-batch's. PopTorch walks them all, so
:func:`register_containers` makes each such type found in a value a pytree
node: its entries (its init fields, for a dataclass) are the children, and
the same type is rebuilt from them.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

import torch
from torch.utils import _pytree

_registered: set[type] = set()  # the types made known to torch's pytree here


def _field_names(value: Any) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(value) if f.init)


def _flatten_dataclass(value: Any) -> tuple[list, tuple]:
    """A dataclass's init fields; a dataclass that is a dict (``ModelOutput``) its
    entries, the fields it set."""
    if isinstance(value, dict):
        return list(value.values()), (type(value), tuple(value))
    names = _field_names(value)
    return [getattr(value, name) for name in names], (type(value), names)


def _unflatten_dataclass(children: Iterable, context: tuple) -> Any:
    kind, names = context
    return kind(**dict(zip(names, children)))


def _flatten_dict(value: dict) -> tuple[list, tuple]:
    return list(value.values()), (type(value), tuple(value))


def _unflatten_dict(children: Iterable, context: tuple) -> Any:
    kind, keys = context
    rebuilt = kind.__new__(kind)  # whatever its __init__ takes
    dict.update(rebuilt, zip(keys, children))
    return rebuilt


def _is_container(value: Any) -> bool:
    return isinstance(value, dict) or (dataclasses.is_dataclass(value)
                                       and not isinstance(value, type))


def register_containers(value: Any) -> None:
    """Make every dict subclass and dataclass found in ``value`` a node of torch's
    pytree, wherever the shim walks it (a ``ModelOutput``, a dataclass of
    dataclasses, a dict of them)."""
    if isinstance(value, torch.Tensor):
        return
    if isinstance(value, (list, tuple)):
        for item in value:
            register_containers(item)
        return
    if not _is_container(value):
        return
    kind = type(value)
    if kind not in _pytree.SUPPORTED_NODES and kind not in _registered:
        if dataclasses.is_dataclass(value):
            _pytree.register_pytree_node(kind, _flatten_dataclass, _unflatten_dataclass)
        else:
            _pytree.register_pytree_node(kind, _flatten_dict, _unflatten_dict)
        _registered.add(kind)
    children = value.values() if isinstance(value, dict) else (
        getattr(value, name) for name in _field_names(value))
    for child in children:
        register_containers(child)
