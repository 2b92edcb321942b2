"""A frozen config (dataclasses, enums, tuples) as JSON-ready data, and back: how a
profile keeps a run's system, run configuration, work and cost model, and how two
runs' settings are compared field by field."""
from __future__ import annotations

import dataclasses
import enum
import types
import typing


def encode(value: object) -> object:
    """A frozen config (dataclasses, enums, tuples) as JSON-ready data."""
    if dataclasses.is_dataclass(value):
        return {f.name: encode(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (tuple, list)):
        return [encode(item) for item in value]
    return value


def decode(kind: object, data: object) -> object:
    """The inverse of :func:`encode`, guided by the type annotations of ``kind``."""
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        if data is None:
            return None
        return decode(next(arg for arg in typing.get_args(kind) if arg is not type(None)), data)
    if origin is tuple:
        args = typing.get_args(kind)
        if len(args) == 2 and args[1] is Ellipsis or len(args) == 1:  # tuple[X, ...]
            return tuple(decode(args[0], item) for item in data)
        return tuple(decode(arg, item) for arg, item in zip(args, data))  # tuple[X, Y]
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        if not isinstance(data, dict):
            raise ValueError(f"a {kind.__name__} must be a JSON object, got {data!r}")
        hints = typing.get_type_hints(kind)
        return kind(**{f.name: decode(hints[f.name], data[f.name])
                       for f in dataclasses.fields(kind) if f.name in data})
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return kind(data)
    return data
