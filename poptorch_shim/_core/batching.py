"""How many micro-batches a call to a PopTorch model holds, and a weight update takes.

A call carries ``deviceIterations x gradientAccumulation`` micro-batches per
replica; replicas of one input group share their input, so the data of a
call is that many micro-batches per group. The DataLoader sizes its batches
by it, the executor splits calls by it (``_execution/step_shape.py`` adds the
order and the output mode) and the advisor keeps the global batch with it:
this module is the one place the products are written.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property


@dataclass(frozen=True)
class MicroBatchCounts:
    """The micro-batch counts of a call under some options (each product worked
    out once: the fields are frozen, and every model call reads them)."""

    device_iterations: int
    gradient_accumulation: int
    replicas: int
    input_group_size: int = 1

    @classmethod
    def of(cls, options) -> MicroBatchCounts:
        """The counts under ``options`` (``poptorch.Options``)."""
        return cls(options.device_iterations, options.Training.gradient_accumulation,
                   options.replication_factor, options.input_group_size)

    @cached_property
    def input_groups(self) -> int:
        """Distinct input micro-batches per row of replicas."""
        return self.replicas // self.input_group_size

    @cached_property
    def micro_batches_per_step(self) -> int:
        """Micro-batches each replica runs in one call: a row of replicas per
        device iteration and gradient-accumulation step."""
        return self.device_iterations * self.gradient_accumulation

    @cached_property
    def micro_batches(self) -> int:
        """Distinct input micro-batches in one call."""
        return self.micro_batches_per_step * self.input_groups

    @cached_property
    def micro_batches_per_update(self) -> int:
        """Micro-batches whose gradients one weight update combines: every
        replica's gradient-accumulation steps."""
        return self.gradient_accumulation * self.replicas


def gradient_accumulation_for(items_per_update: int, replicas: int,
                              micro_batch_size: int) -> int | None:
    """The gradient accumulation with which ``replicas`` replicas, on micro-batches
    of ``micro_batch_size`` items, update the weights every ``items_per_update``
    items (the inverse of :attr:`MicroBatchCounts.micro_batches_per_update`), or
    None where no whole number does."""
    per_step = replicas * micro_batch_size
    if items_per_update % per_step:
        return None
    return items_per_update // per_step
