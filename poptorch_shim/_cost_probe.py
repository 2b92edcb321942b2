"""Measuring what a piece of real torch compute costs: FLOPs, bytes, operators.

FLOPs come from torch's own FLOP counter; memory traffic and the operator
count from a dispatch mode that sees every aten call; the bytes autograd
saves for the backward from saved-tensor hooks. The result is an
:class:`ipusim.Cost`, the currency of the simulator.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode

from ipusim import Cost

# Operators that only reshape or alias their input move no data on an IPU.
_FREE_OPS = {"detach", "view", "_unsafe_view", "t", "transpose", "permute", "expand",
             "unsqueeze", "squeeze", "alias", "reshape", "slice", "select", "as_strided",
             "lift_fresh", "clone"}


def tensor_bytes(value) -> int:
    """Bytes of every tensor in a (nested) value."""
    return sum(leaf.numel() * leaf.element_size() for leaf in tree_flatten(value)[0]
               if isinstance(leaf, torch.Tensor))


class _TrafficCounter(TorchDispatchMode):
    """Counts operators and the bytes they read and write."""

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket.__name__.rstrip("_") not in _FREE_OPS and not func.is_view:
            self.ops += 1
            self.bytes += tensor_bytes(args) + tensor_bytes(kwargs) + tensor_bytes(out)
        return out


@dataclass
class Measurement:
    """What one measured region cost; filled in when its ``with`` block ends."""

    cost: Cost = field(default_factory=Cost)
    saved_bytes: int = 0


@contextmanager
def measure() -> Iterator[Measurement]:
    """Measure the torch compute run inside the block."""
    result = Measurement()
    flops = FlopCounterMode(display=False)
    traffic = _TrafficCounter()
    saved = [0]

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        saved[0] += tensor.numel() * tensor.element_size()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), flops, traffic:
        yield result
    result.cost = Cost(flops=float(flops.get_total_flops()), bytes=float(traffic.bytes),
                       ops=traffic.ops)
    result.saved_bytes = saved[0]
