"""Fake tensors for timing-only runs: measure a model without computing it.

Under torch's ``FakeTensorMode`` a tensor has a shape, a dtype and a device
but no data, and every operator only works out its output's metadata. The
cost probe's FLOP counter, dispatch mode and saved-tensor hooks see the same
operators on fake tensors as on real ones, so a stage is measured in the
time it takes to trace it, whatever the size of the model or the batch.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch._subclasses.fake_tensor import (
    DataDependentOutputException,
    DynamicOutputShapeException,
    FakeTensorMode,
)
from torch.utils._pytree import tree_map_only

# What a fake tensor raises where the model needs the data itself.
_NEEDS_DATA = (DataDependentOutputException, DynamicOutputShapeException)


@contextmanager
def fake_inputs(value: Any, enabled: bool = True) -> Iterator[Any]:
    """Within the block, ``value`` with its tensors made fake and torch in
    fake mode (parameters stay real: the mode accepts them as inputs). With
    ``enabled`` False, ``value`` as it is and torch as usual."""
    if not enabled:
        yield value
        return
    try:
        with FakeTensorMode(allow_non_fake_inputs=True) as mode:
            yield tree_map_only(torch.Tensor, mode.from_tensor, value)
    except _NEEDS_DATA as error:
        raise RuntimeError(
            f"A timing-only run measures the model on tensors without data, but this model "
            f"needs the values of its tensors ({type(error).__name__}: {error}): a shape that "
            "depends on the data (boolean masking, nonzero) or a Python value read from a "
            "tensor (.item(), if tensor: ...). Run it without Options.Simulation.timingOnly "
            "(or IPUSIM_TIMING_ONLY), or make those shapes static.") from error


def placeholder_outputs(output: Any) -> Any:
    """Real tensors with the shapes and dtypes of a (fake) output: NaN where
    the dtype is floating point, zeros otherwise. Call it outside fake mode."""
    def placeholder(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.is_floating_point() or tensor.is_complex():
            return torch.full(tensor.shape, float("nan"), dtype=tensor.dtype)
        return torch.zeros(tensor.shape, dtype=tensor.dtype)
    return tree_map_only(torch.Tensor, placeholder, output)
