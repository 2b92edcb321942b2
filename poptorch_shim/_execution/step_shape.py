"""Splitting a step's inputs into micro-batches and assembling its outputs.

A call to a PopTorch model receives one step's data: the combined batch of
``deviceIterations x replicas x gradientAccumulation`` micro-batches. On the
IPU the host streams it as ``[deviceIterations, gradientAccumulation,
replicas, micro-batch, ...]``; the outputs come back in the same order,
filtered by the output mode. How many micro-batches that is, the core
package counts (``_core/batching.py``); :class:`StepShape` adds their order
and which outputs return.
"""
from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Sequence
from dataclasses import astuple, dataclass
from itertools import repeat
from typing import Any

import torch
from torch.utils._pytree import TreeSpec, tree_flatten, tree_unflatten

from ipusim.plan.run_config import returned_micro_batches
from poptorch_shim._core.batching import MicroBatchCounts
from poptorch_shim._execution.containers import register_containers
from poptorch_shim.enums import CommGroupType, OutputMode

# The output modes as ipusim's output period: every N micro-batches, or 0 for only the
# last of a call (Sum adds the micro-batches' outputs up on the device and returns one).
_OUTPUT_PERIOD = {OutputMode.All: 1, OutputMode.Final: 0, OutputMode.Sum: 0}


@dataclass(frozen=True)
class StepShape(MicroBatchCounts):
    """How many micro-batches one call holds, in which order, and which outputs return.

    With input replica grouping, the replicas of a group share one input
    micro-batch: a call carries ``replicas / input_group_size`` distinct
    micro-batches per iteration and gradient-accumulation step (the counts
    are :class:`MicroBatchCounts`'). Built once from the options (:meth:`of`),
    it is what the model, the anchors and the simulated run configuration read.
    """

    orthogonal_groups: bool = False
    output_mode: OutputMode = OutputMode.All
    output_return_period: int = 1

    @classmethod
    def of(cls, options, training: bool = False) -> StepShape:
        """The shape of a call under ``options`` (``poptorch.Options``), for a
        training or an inference model (whose ``Default`` output modes differ)."""
        return cls(*astuple(MicroBatchCounts.of(options)),
                   orthogonal_groups=options.input_group_type == CommGroupType.Orthogonal,
                   output_mode=options.resolved_output_mode(training),
                   output_return_period=options.output_return_period)

    def input_of(self, replica: int) -> int:
        """Which of a row's input micro-batches ``replica`` computes on."""
        if self.orthogonal_groups:
            return replica % self.input_groups
        return replica // self.input_group_size

    @property
    def output_period(self) -> int:
        """The output mode as :attr:`ipusim.RunConfig.output_period`: outputs go
        back to the host every N micro-batches, or (0) only the last of a call."""
        if self.output_mode == OutputMode.EveryN:
            return self.output_return_period
        if self.output_mode not in _OUTPUT_PERIOD:
            raise ValueError(f"Output mode {self.output_mode!r} must be resolved before "
                             "assembling outputs")
        return _OUTPUT_PERIOD[self.output_mode]

    def returned_rows(self, rows: int) -> range:
        """Which of a call's ``rows`` the outputs are assembled from: those the
        output mode sends back to the host, or all of them for Sum, which adds
        them up."""
        if self.output_mode == OutputMode.Sum:
            return range(rows)
        return returned_micro_batches(rows, self.output_period)

    def check_output_period(self) -> None:
        """EveryN's period must divide the micro-batches each replica runs per call."""
        period, per_step = self.output_return_period, self.micro_batches_per_step
        if self.output_mode == OutputMode.EveryN and per_step % period:
            raise ValueError(
                f"outputMode(OutputMode.EveryN, {period}): the output return period must "
                f"divide the micro-batches each replica runs per call, deviceIterations x "
                f"gradientAccumulation = {per_step}; choose a period that divides {per_step}")


def flatten(value: Any) -> tuple[list[Any], TreeSpec]:
    """``tree_flatten(value)``, without the generic walk for what models mostly
    return: one tensor, or a tuple of tensors; dict subclasses and dataclasses
    are walked too, as PopTorch walks them."""
    if isinstance(value, torch.Tensor):
        return [value], _LEAF
    if type(value) is tuple and all(map(isinstance, value, repeat(torch.Tensor))):
        return list(value), _tuple_spec(len(value))
    register_containers(value)
    return tree_flatten(value)


_LEAF = tree_flatten(0)[1]  # the spec of any leaf


@functools.cache
def _tuple_spec(length: int) -> TreeSpec:
    return tree_flatten((0,) * length)[1]


def unflatten(leaves: list[Any], spec: TreeSpec) -> Any:
    """``tree_unflatten(leaves, spec)``, without the generic walk for the specs
    :func:`flatten` makes without one (one tensor, a tuple of tensors)."""
    if spec is _LEAF:
        return leaves[0]
    if spec is _tuple_spec(len(leaves)):
        return tuple(leaves)
    return tree_unflatten(leaves, spec)


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
    register_containers((args, kwargs))
    return tree_flatten((args, kwargs))


@functools.cache
def _arguments_spec(positional: int, keywords: tuple[str, ...]) -> TreeSpec:
    return tree_flatten(((0,) * positional, dict.fromkeys(keywords, 0)))[1]


def split_to_single_samples(shape: StepShape, micro_batch_size: int) -> str | None:
    """Where a call's batch went, when splitting it by ``shape`` left micro-batches of
    one sample (None otherwise): what a plain ``torch.utils.data.DataLoader`` gives a
    model of several device iterations or replicas, whose ``batch_size`` its author
    meant as the micro-batch (``poptorch.DataLoader`` loads that many per micro-batch)."""
    if micro_batch_size != 1 or shape.micro_batches == 1:
        return None
    parts = [f"{count} {what}" for count, what in (
        (shape.device_iterations, "device iterations"),
        (shape.gradient_accumulation, "gradient accumulation steps"),
        (shape.input_groups, "replicas")) if count > 1]
    return (f"each call's batch of {shape.micro_batches} samples is split into "
            f"{' x '.join(parts)}, so the micro-batch size is 1. A plain torch DataLoader's "
            "batch_size is the whole call's batch; for a micro-batch of B samples build "
            f"poptorch.DataLoader(options, dataset, batch_size=B), which loads "
            f"B x {shape.micro_batches} samples per call.")


def batch_size_of(inputs: tuple[tuple, dict]) -> int:
    """The samples of a micro-batch: the first dimension most of the tensors of
    ``(args, kwargs)`` share (0-d tensors are ignored), the larger on a tie. An
    input narrowed by its own size may have fewer rows than the batch (a step
    counter, Lightning's ``batch_idx``); the batch is what most inputs carry."""
    sizes = Counter(_first_dimensions(flatten_inputs(*inputs)[0]))
    return max(sizes, key=lambda size: (sizes[size], size))


def _first_dimensions(leaves: list[Any]) -> list[int]:
    sizes = [leaf.shape[0] for leaf in leaves if isinstance(leaf, torch.Tensor) and leaf.dim() > 0]
    if not sizes:
        raise ValueError(
            "The model's inputs must include at least one tensor with a batch dimension")
    return sizes


def _check_not_empty(batch: int, shape: StepShape) -> None:
    if batch == 0:
        raise ValueError(f"Invalid batch size: the batch dimension of the inputs is 0; a call "
                         f"needs at least {shape.micro_batches} samples, one per micro-batch.")


def _rows_per_micro_batch(leaf: torch.Tensor, shape: StepShape) -> int:
    """How many rows of ``leaf`` one micro-batch takes, checking its first
    dimension divides as PopTorch requires of each input."""
    batch = leaf.shape[0]
    _check_not_empty(batch, shape)
    if batch % shape.micro_batches:
        grouping = (f" / inputReplicaGrouping size ({shape.input_group_size})"
                    if shape.input_group_size > 1 else "")
        raise ValueError(
            f"Invalid batch size: the batch dimension ({batch}) of the input of shape "
            f"{tuple(leaf.shape)} must be a multiple of deviceIterations "
            f"({shape.device_iterations}) * replicationFactor ({shape.replicas}){grouping} * "
            f"gradientAccumulation ({shape.gradient_accumulation}) = {shape.micro_batches}: "
            "each input is split along its first dimension into that many micro-batches. Use "
            "poptorch.DataLoader, which sizes its batches to match the options, or change the "
            "batch size.")
    return batch // shape.micro_batches


def _refuse_scalar(shape: StepShape) -> None:
    """A 0-d input has a batch dimension of 1 to PopTorch, which asserts it divides
    into the call's micro-batches (``PoplarExecutor._narrow_tensor``): with more
    than one, it refuses the input with its own words."""
    raise AssertionError(
        "Invalid batch dimension: In the input torch.Size([]), the batch dimension (1) must "
        f"be a multiple of Options.deviceIterations({shape.device_iterations}) * "
        f"(Options.replicationFactor({shape.replicas}) / "
        f"Options.inputReplicaGrouping.input_group_size({shape.input_group_size})) * "
        f"Options.Training.gradientAccumulation({shape.gradient_accumulation}) = "
        f"{shape.micro_batches} because it is used to calculate the batch size which will be "
        "executed on the device in any given iteration. For a full explanation see the "
        "batching semantics page of the documentation.")


def split(inputs: tuple[tuple, dict], shape: StepShape) -> list[tuple[tuple, dict]]:
    """The call's ``(args, kwargs)`` as the micro-batches' ``(args, kwargs)``, in
    stream order. As PopTorch narrows them, each input is split by its own first
    dimension: a batch of 8 rows and an index of 4 rows make micro-batches of 2
    rows and 1 index for 4 micro-batches."""
    args, kwargs = inputs
    leaves, spec = flatten_inputs(args, kwargs)
    if shape.micro_batches == 1:
        # One micro-batch: PopTorch passes the inputs as they are, whatever their
        # first dimensions (but never an empty batch).
        _check_not_empty(batch_size_of(inputs), shape)
        return [(args, kwargs)]
    for leaf in leaves:
        if isinstance(leaf, torch.Tensor) and leaf.dim() == 0:
            _refuse_scalar(shape)
    rows = [_rows_per_micro_batch(leaf, shape) if isinstance(leaf, torch.Tensor) else 0
            for leaf in leaves]
    if not any(rows):
        _first_dimensions(leaves)  # raises: no input has a batch dimension
    cuts = zip(*(_pieces(leaf, size, shape.micro_batches) for leaf, size in zip(leaves, rows)))
    if spec is not _arguments_spec(len(args), tuple(kwargs)):
        return [tree_unflatten(list(cut), spec) for cut in cuts]
    positional = len(args)  # every argument a tensor: no tree to rebuild
    return [(cut[:positional], dict(zip(kwargs, cut[positional:]))) for cut in cuts]


def _pieces(leaf: Any, size: int, count: int) -> Sequence[Any]:
    """``leaf``'s part of each of ``count`` micro-batches: views of ``size`` rows each,
    or ``leaf`` itself in every one when it has no batch dimension (``size`` 0).

    A plain tensor that needs no gradient is cut by one ``Tensor.chunk`` (the same
    views as slicing, made in one call: ``count`` divides its rows); any other is
    sliced, so that a tensor subclass sees the indexing it expects and each piece
    of an input that needs gradients has its own slice in the autograd graph."""
    if not size:
        return repeat(leaf, count)
    if type(leaf) is torch.Tensor and not leaf.requires_grad:
        return leaf.chunk(count)
    return [leaf[i * size:(i + 1) * size] for i in range(count)]


def assemble(outputs: list[tuple[list[Any], TreeSpec] | None], shape: StepShape) -> Any:
    """Combine the per-micro-batch outputs of a call as the output mode returns them.

    ``outputs`` are flattened (leaves, spec), in stream order (replica
    fastest); those of rows the mode does not return may be None. The
    anchored count b is B for All, B/N for EveryN(N) and the replica count for
    Final and Sum; a 0-d result becomes ``[b]`` when b > 1, otherwise results
    are concatenated along their first dimension.
    """
    replicas = shape.replicas
    chosen = [outputs[row * replicas:(row + 1) * replicas]
              for row in shape.returned_rows(len(outputs) // replicas)]
    if shape.output_mode == OutputMode.Sum:
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
    return unflatten(leaves, spec)
