"""Splitting a step's inputs into micro-batches and assembling its outputs.

A call to a PopTorch model receives one step's data: the combined batch of
``deviceIterations x replicas x gradientAccumulation`` micro-batches. On the
IPU the host streams it as ``[deviceIterations, gradientAccumulation,
replicas, micro-batch, ...]``; the outputs come back in the same order,
filtered by the output mode.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

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


def batch_size_of(args: Any) -> int:
    """The first dimension shared by the tensor inputs (0-d tensors are ignored)."""
    sizes = {leaf.shape[0] for leaf in tree_flatten(args)[0]
             if isinstance(leaf, torch.Tensor) and leaf.dim() > 0}
    if not sizes:
        raise ValueError("The model's inputs must include at least one tensor with a batch dimension")
    if len(sizes) > 1:
        raise ValueError(f"The model's inputs disagree on the batch dimension: sizes {sorted(sizes)}")
    return sizes.pop()


def micro_batch_size(args: Any, shape: StepShape) -> int:
    """The micro-batch size of a call, checking the batch divides as PopTorch requires."""
    batch = batch_size_of(args)
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


def split(args: Any, shape: StepShape) -> list[Any]:
    """The call's inputs as a list of micro-batches in stream order."""
    size = micro_batch_size(args, shape)

    def chunk(leaf: Any, index: int) -> Any:
        if isinstance(leaf, torch.Tensor) and leaf.dim() > 0:
            return leaf[index * size:(index + 1) * size]
        return leaf

    return [tree_map(lambda leaf, i=i: chunk(leaf, i), args) for i in range(shape.micro_batches)]


def assemble(outputs: list[Any], shape: StepShape, mode: OutputMode, period: int) -> Any:
    """Combine the per-micro-batch outputs of a call as the output mode returns them.

    ``outputs`` is in stream order (replica fastest). The anchored count b is
    B for All, B/N for EveryN(N) and the replica count for Final and Sum; a
    0-d result becomes ``[b]`` when b > 1, otherwise results are concatenated
    along their first dimension.
    """
    replicas = shape.replicas
    rows = [outputs[i:i + replicas] for i in range(0, len(outputs), replicas)]
    if mode == OutputMode.All:
        chosen = rows
    elif mode == OutputMode.EveryN:
        chosen = rows[period - 1::period]
    elif mode == OutputMode.Final:
        chosen = rows[-1:]
    elif mode == OutputMode.Sum:
        chosen = [[_sum([row[r] for row in rows]) for r in range(replicas)]]
    else:
        raise ValueError(f"Output mode {mode!r} must be resolved before assembling outputs")
    picked = [out for row in chosen for out in row]
    return _concat(picked)


def _sum(values: list[Any]) -> Any:
    flat = [tree_flatten(v) for v in values]
    leaves = [sum(group) if isinstance(group[0], torch.Tensor) else group[-1]
              for group in zip(*(f[0] for f in flat))]
    return tree_unflatten(leaves, flat[0][1])


def _concat(values: list[Any]) -> Any:
    flat = [tree_flatten(v) for v in values]
    spec = flat[0][1]
    leaves = []
    for group in zip(*(f[0] for f in flat)):
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


def detach_all(value: Any) -> Any:
    """The same structure with every tensor detached (outputs leave the device)."""
    return tree_map(lambda leaf: leaf.detach() if isinstance(leaf, torch.Tensor) else leaf, value)
