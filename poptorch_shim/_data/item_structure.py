"""The shape of one dataset item, as the asynchronous loader moves it through
shared memory: a tree of tuples, lists and dicts whose leaves are tensors or
Python ``int`` / ``float`` / ``bool`` values.

The worker describes the first item it loads (:func:`describe`); the host
allocates one ring-buffer slot from that description; every later item is
flattened to its leaves (:func:`flatten`), checked against the description
(:func:`check_leaf`) and rebuilt on the host side (:func:`unflatten`).

An object of a type registered with ``poptorch.registerCustomArgParser`` is a
node too: its parser's tensors are its children, and the host rebuilds it with
the parser's ``reconstruct`` from a template, the first item's object holding
empty tensors (as PopTorch sends it to the host).
"""
import dataclasses
from typing import Any

import torch

from poptorch_shim.custom_args import parser_for, rebuilt, tensors_of

# Node kinds of the structure tree. A tree is a nested tuple:
# (TENSOR, leaf_index) / (SCALAR, leaf_index, python_type) /
# (TUPLE | LIST, (child, ...)) / (DICT, ((key, child), ...)) /
# (CUSTOM, type, template_index, (child, ...)).
TENSOR = "tensor"
SCALAR = "scalar"
TUPLE = "tuple"
LIST = "list"
DICT = "dict"
CUSTOM = "custom"

_SCALAR_DTYPES = {bool: torch.bool, int: torch.int64, float: torch.float64}


@dataclasses.dataclass(frozen=True)
class LeafSpec:
    """One leaf of an item: where it sits (``path``, for messages), the shape
    a ring-buffer slot reserves for it and its dtype. ``batched`` says the
    first dimension may be shorter than reserved (a last partial batch)."""
    path: str
    shape: tuple[int, ...]
    dtype: torch.dtype
    batched: bool

    @property
    def nbytes(self) -> int:
        """Bytes one slot reserves for this leaf."""
        count = 1
        for size in self.shape:
            count *= size
        return count * self.dtype.itemsize


@dataclasses.dataclass(frozen=True)
class ItemLayout:
    """The structure tree of an item, the spec of each of its leaves and the
    templates its custom-type nodes are rebuilt from."""
    tree: tuple
    leaves: tuple[LeafSpec, ...]
    templates: tuple = ()


def _walk(item: Any, path: str, leaves: list[Any], paths: list[str],
          customs: list[Any]) -> tuple:
    """Build the structure tree of ``item``, appending its leaves in order
    (and its custom-type objects to ``customs``)."""
    if isinstance(item, torch.Tensor):
        leaves.append(item)
        paths.append(path)
        return (TENSOR, len(leaves) - 1)
    if type(item) in _SCALAR_DTYPES:
        leaves.append(item)
        paths.append(path)
        return (SCALAR, len(leaves) - 1, type(item))
    if type(item) in (tuple, list):
        kind = TUPLE if type(item) is tuple else LIST
        return (kind, tuple(_walk(child, f"{path}[{index}]", leaves, paths, customs)
                            for index, child in enumerate(item)))
    if type(item) is dict:
        return (DICT, tuple((key, _walk(child, f"{path}[{key!r}]", leaves, paths, customs))
                            for key, child in item.items()))
    if parser_for(type(item)) is not None:
        customs.append(item)
        index = len(customs) - 1
        return (CUSTOM, type(item), index,
                tuple(_walk(child, f"{path}.<{type(item).__name__} tensor {number}>",
                            leaves, paths, customs)
                      for number, child in enumerate(tensors_of(item))))
    raise TypeError(
        f"The AsynchronousDataAccessor cannot pass the {type(item).__name__} "
        f"at item{path} through shared memory: items must be tensors, Python "
        "int/float/bool values, tuples, lists and dicts of them, or objects of a "
        "type registered with poptorch.registerCustomArgParser. Convert it in "
        "the dataset's __getitem__ (for example with torch.as_tensor), or "
        "register a parser for its type.")


def flatten(item: Any) -> tuple[tuple, list[Any], list[str]]:
    """Return ``(tree, leaves, paths)`` for ``item``."""
    tree, leaves, paths, _ = _flatten_all(item)
    return tree, leaves, paths


def _flatten_all(item: Any) -> tuple[tuple, list[Any], list[str], list[Any]]:
    leaves: list[Any] = []
    paths: list[str] = []
    customs: list[Any] = []
    tree = _walk(item, "", leaves, paths, customs)
    return tree, leaves, paths, customs


def _template(custom: Any) -> Any:
    """``custom`` rebuilt by its parser around empty tensors: what the host
    needs to rebuild such objects, without the first item's data."""
    return rebuilt(custom, [torch.empty(0, dtype=tensor.dtype) for tensor in tensors_of(custom)])


def describe(item: Any, rebatched_size: int | None) -> ItemLayout:
    """Describe the first item; with ``rebatched_size`` every leaf must be a
    tensor with a batch dimension, which the slot widens to that size."""
    tree, leaves, paths, customs = _flatten_all(item)
    specs = []
    for leaf, path in zip(leaves, paths):
        if not isinstance(leaf, torch.Tensor):
            if rebatched_size is not None:
                raise TypeError(
                    f"rebatched_size={rebatched_size} needs every leaf of an "
                    f"item to be a tensor with a batch dimension, but item"
                    f"{path} is a {type(leaf).__name__}. Return tensors from "
                    "the dataset, or do not rebatch.")
            specs.append(LeafSpec(path, (), _SCALAR_DTYPES[type(leaf)], False))
            continue
        shape = tuple(leaf.shape)
        if rebatched_size is not None:
            if not shape:
                raise ValueError(
                    f"rebatched_size={rebatched_size} needs every tensor to "
                    f"have a batch dimension, but item{path} is 0-dimensional.")
            shape = (rebatched_size,) + shape[1:]
        specs.append(LeafSpec(path, shape, leaf.dtype, bool(shape)))
    return ItemLayout(tree, tuple(specs), tuple(_template(custom) for custom in customs))


def check_leaf(spec: LeafSpec, leaf: Any, where: str,
               rebatching: bool = False) -> int:
    """Check that ``leaf`` fits the slot reserved by ``spec``; return the
    length of its first dimension (0 for scalars and 0-d tensors). When
    ``rebatching``, a batch of any length fits: it is split across slots."""
    if not isinstance(leaf, torch.Tensor):
        if _SCALAR_DTYPES.get(type(leaf)) != spec.dtype or spec.shape:
            raise TypeError(
                f"{where}: item{spec.path} is a {type(leaf).__name__} but the "
                f"first item had a {spec.dtype} tensor of shape "
                f"{spec.shape} there. {_SAME_LAYOUT_RULE}")
        return 0
    shape = tuple(leaf.shape)
    fits = (converts(leaf.dtype, spec.dtype) and len(shape) == len(spec.shape)
            and shape[1:] == spec.shape[1:]
            and (shape[:1] == spec.shape[:1]
                 or (spec.batched and (rebatching or shape[0] <= spec.shape[0]))))
    if not fits:
        raise ValueError(
            f"{where}: item{spec.path} is a {leaf.dtype} tensor of shape "
            f"{shape} but the slot allocated from the first item holds a "
            f"{spec.dtype} tensor of shape {spec.shape}. {_SAME_LAYOUT_RULE}")
    return shape[0] if shape else 0


def converts(dtype: torch.dtype, slot_dtype: torch.dtype) -> bool:
    """Whether a tensor of ``dtype`` goes into a slot of ``slot_dtype``: the
    same dtype, or one that torch's type promotion turns into it (int64 labels
    into a float32 slot), as PopTorch's copy into its buffer converts it and
    as ``torch.cat`` joins such batches in a synchronous loader. A conversion
    that would lose range or precision the other way (float into int) is
    refused."""
    return dtype == slot_dtype or torch.promote_types(dtype, slot_dtype) == slot_dtype


_SAME_LAYOUT_RULE = (
    "The AsynchronousDataAccessor allocates its shared-memory ring buffer "
    "from the first item, so every item must have the same structure and "
    "shapes, and dtypes that promote to the first item's (only the first "
    "dimension of a batch may be shorter, for the last batch of an epoch).")


def unflatten(tree: tuple, leaves: list[Any], templates: tuple = ()) -> Any:
    """Rebuild an item from its structure tree and its leaves (and the
    templates of its custom-type objects)."""
    kind = tree[0]
    if kind == TENSOR:
        return leaves[tree[1]]
    if kind == SCALAR:
        return tree[2](leaves[tree[1]].item())
    if kind == TUPLE:
        return tuple(unflatten(child, leaves, templates) for child in tree[1])
    if kind == LIST:
        return [unflatten(child, leaves, templates) for child in tree[1]]
    if kind == CUSTOM:
        template = templates[tree[2]]
        children = [unflatten(child, leaves, templates) for child in tree[3]]
        return rebuilt(template, children)
    return {key: unflatten(child, leaves, templates) for key, child in tree[1]}


def describe_tree(tree: tuple) -> str:
    """A short readable form of a structure tree, for error messages."""
    kind = tree[0]
    if kind == TENSOR:
        return "Tensor"
    if kind == SCALAR:
        return tree[2].__name__
    if kind == DICT:
        return "{" + ", ".join(f"{key!r}: {describe_tree(child)}"
                               for key, child in tree[1]) + "}"
    if kind == CUSTOM:
        return f"{tree[1].__name__}(" + ", ".join(describe_tree(child)
                                                  for child in tree[3]) + ")"
    inner = ", ".join(describe_tree(child) for child in tree[1])
    return f"({inner})" if kind == TUPLE else f"[{inner}]"
