"""What a model does when several host processes (poprun instances) train it.

Each instance computes its own replicas' micro-batches; the gradients are
then all-reduced across instances with torch.distributed, and the instances'
simulated clocks meet, so every replica applies the same update at the same
simulated time. In a single process both are no-ops.
"""
from __future__ import annotations

from collections.abc import Iterable

import torch
import torch.distributed as dist


def is_distributed() -> bool:
    """Whether this process is one of several joined by torch.distributed."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def reduce_gradients(parameters: Iterable[torch.nn.Parameter], mean: bool) -> None:
    """All-reduce the accumulated gradients across instances (mean or sum)."""
    if not is_distributed():
        return
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    if mean:
        flat /= dist.get_world_size()
    offset = 0
    for grad in grads:
        grad.copy_(flat[offset:offset + grad.numel()].view_as(grad))
        offset += grad.numel()


def align_clock(simulation) -> None:
    """Make the instances' simulated clocks meet at the latest one."""
    if not is_distributed():
        return
    now = torch.tensor([simulation.system.now_ps], dtype=torch.int64)
    dist.all_reduce(now, op=dist.ReduceOp.MAX)
    simulation.wait_until(int(now.item()))
