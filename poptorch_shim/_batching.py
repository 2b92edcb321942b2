"""Splitting a step's inputs into micro-batches and assembling its outputs.

A call to a PopTorch model receives one step's data: the combined batch of
``deviceIterations x replicas x gradientAccumulation`` micro-batches. On the
IPU the host streams it as ``[deviceIterations, gradientAccumulation,
replicas, micro-batch, ...]``; the outputs come back in the same order,
filtered by the output mode.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from itertools import repeat
from typing import Any

import torch
from torch.utils._pytree import TreeSpec, tree_flatten, tree_unflatten

from poptorch_shim.enums import OutputMode


@dataclass(frozen=True)
class StepShape:
    """How many micro-batches one call holds, and in which order.

    With input replica grouping, the replicas of a group share one input
    micro-batch: a call carries ``replicas / input_group_size`` distinct
    micro-batches per iteration and gradient-accumulation step.
    """

    device_iterations: int
    gradient_accumulation: int
    replicas: int
    input_group_size: int = 1
    orthogonal_groups: bool = False

    @property
    def input_groups(self) -> int:
        """Distinct input micro-batches per row of replicas."""
        return self.replicas // self.input_group_size

    @property
    def micro_batches(self) -> int:
        """Distinct input micro-batches in one call."""
        return self.device_iterations * self.gradient_accumulation * self.input_groups

    def input_of(self, replica: int) -> int:
        """Which of a row's input micro-batches ``replica`` computes on."""
        if self.orthogonal_groups:
            return replica % self.input_groups
        return replica // self.input_group_size


def flatten(value: Any) -> tuple[list[Any], TreeSpec]:
    """``tree_flatten(value)``, without the generic walk for what models mostly
    return: one tensor, or a tuple of tensors."""
    if isinstance(value, torch.Tensor):
        return [value], _LEAF
    if type(value) is tuple and all(map(isinstance, value, repeat(torch.Tensor))):
        return list(value), _tuple_spec(len(value))
    return tree_flatten(value)


_LEAF = tree_flatten(0)[1]  # the spec of any leaf


@functools.cache
def _tuple_spec(length: int) -> TreeSpec:
    return tree_flatten((0,) * length)[1]


def flatten_detached(value: Any) -> tuple[list[Any], TreeSpec]:
    """``value`` flattened, every tensor detached: an output leaving the device."""
    leaves, spec = flatten(value)
    return [leaf.detach() if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves], spec


def flatten_inputs(args: tuple, kwargs: dict) -> tuple[list[Any], TreeSpec]:
    """``tree_flatten((args, kwargs))``, without the generic walk when every
    argument is a tensor (as most calls' are)."""
    values = (*args, *kwargs.values())
    if all(map(isinstance, values, repeat(torch.Tensor))):
        return list(values), _arguments_spec(len(args), tuple(kwargs))
    return tree_flatten((args, kwargs))


@functools.cache
def _arguments_spec(positional: int, keywords: tuple[str, ...]) -> TreeSpec:
    return tree_flatten(((0,) * positional, dict.fromkeys(keywords, 0)))[1]


def batch_size_of(inputs: tuple[tuple, dict]) -> int:
    """The first dimension shared by the tensors of ``(args, kwargs)`` (0-d tensors are ignored)."""
    return _batch_size(flatten_inputs(*inputs)[0])


def _batch_size(leaves: list[Any]) -> int:
    sizes = {leaf.shape[0] for leaf in leaves if isinstance(leaf, torch.Tensor) and leaf.dim() > 0}
    if not sizes:
        raise ValueError("The model's inputs must include at least one tensor with a batch dimension")
    if len(sizes) > 1:
        raise ValueError(f"The model's inputs disagree on the batch dimension: sizes {sorted(sizes)}")
    return sizes.pop()


def _micro_batch_size(leaves: list[Any], shape: StepShape) -> int:
    """The micro-batch size of a call, checking the batch divides as PopTorch requires."""
    batch = _batch_size(leaves)
    if batch % shape.micro_batches:
        grouping = (f" / inputReplicaGrouping size ({shape.input_group_size})"
                    if shape.input_group_size > 1 else "")
        raise ValueError(
            f"Invalid batch size: the batch dimension of the inputs ({batch}) must be a multiple "
            f"of deviceIterations ({shape.device_iterations}) * replicationFactor "
            f"({shape.replicas}){grouping} * gradientAccumulation "
            f"({shape.gradient_accumulation}) = {shape.micro_batches}. Use poptorch.DataLoader, "
            "which sizes its batches to match the options, or change the batch size.")
    return batch // shape.micro_batches


def split(inputs: tuple[tuple, dict], shape: StepShape) -> list[tuple[tuple, dict]]:
    """The call's ``(args, kwargs)`` as the micro-batches' ``(args, kwargs)``, in stream order."""
    args, kwargs = inputs
    leaves, spec = flatten_inputs(args, kwargs)
    size = _micro_batch_size(leaves, shape)
    batched = [isinstance(leaf, torch.Tensor) and leaf.dim() > 0 for leaf in leaves]
    cuts = [[leaf[start:start + size] if cut else leaf for leaf, cut in zip(leaves, batched)]
            for start in range(0, shape.micro_batches * size, size)]
    if spec is not _arguments_spec(len(args), tuple(kwargs)):
        return [tree_unflatten(cut, spec) for cut in cuts]
    positional = len(args)  # every argument a tensor: no tree to rebuild
    return [(tuple(cut[:positional]), dict(zip(kwargs, cut[positional:]))) for cut in cuts]


def returned_rows(rows: int, mode: OutputMode, period: int) -> range:
    """Which of a call's ``rows`` (micro-batch steps, one output per replica
    each) the output mode sends back to the host; Sum adds them all up."""
    if mode in (OutputMode.All, OutputMode.Sum):
        return range(rows)
    if mode == OutputMode.EveryN:
        return range(period - 1, rows, period)
    if mode == OutputMode.Final:
        return range(rows - 1, rows)
    raise ValueError(f"Output mode {mode!r} must be resolved before assembling outputs")


def assemble(outputs: list[tuple[list[Any], TreeSpec] | None], shape: StepShape,
             mode: OutputMode, period: int) -> Any:
    """Combine the per-micro-batch outputs of a call as the output mode returns them.

    ``outputs`` are flattened (leaves, spec), in stream order (replica
    fastest); those of rows the mode does not return may be None. The
    anchored count b is B for All, B/N for EveryN(N) and the replica count for
    Final and Sum; a 0-d result becomes ``[b]`` when b > 1, otherwise results
    are concatenated along their first dimension.
    """
    replicas = shape.replicas
    chosen = [outputs[row * replicas:(row + 1) * replicas]
              for row in returned_rows(len(outputs) // replicas, mode, period)]
    if mode == OutputMode.Sum:
        chosen = [[_sum([row[r] for row in chosen]) for r in range(replicas)]]
    return _concat([out for row in chosen for out in row])


def _sum(values: list[tuple[list[Any], TreeSpec]]) -> tuple[list[Any], TreeSpec]:
    leaves = [sum(group) if isinstance(group[0], torch.Tensor) else group[-1]
              for group in zip(*(leaves for leaves, _ in values))]
    return leaves, values[0][1]


def _concat(values: list[tuple[list[Any], TreeSpec]]) -> Any:
    spec = values[0][1]
    leaves = []
    for group in zip(*(leaves for leaves, _ in values)):
        first = group[0]
        if not isinstance(first, torch.Tensor):
            leaves.append(group[-1])
        elif len(group) == 1:
            leaves.append(first)
        elif first.dim() == 0:
            leaves.append(torch.stack(group))
        else:
            leaves.append(torch.cat(group))
    return tree_unflatten(leaves, spec)
