"""What a model does when several host processes (poprun instances) train it.

Each instance computes its own replicas' micro-batches; the gradients are
then all-reduced across instances with torch.distributed, and the instances'
simulated clocks meet, so every replica applies the same update at the same
simulated time. The instances join one gloo process group on loopback, lazily,
when the first training model of a multi-instance run is built, from the
rendezvous variables poprun sets (``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``,
``WORLD_SIZE``); the group is destroyed when the interpreter exits. In a
single process everything here is a no-op.
"""
from __future__ import annotations

import atexit
import logging
import os
from collections.abc import Iterable

import torch
import torch.distributed as dist

logger = logging.getLogger(__name__)

RENDEZVOUS_VARIABLES = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")


def is_distributed() -> bool:
    """Whether this process is one of several joined by torch.distributed."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def has_rendezvous() -> bool:
    """Whether a launcher (poprun) said how the instances find each other."""
    return all(name in os.environ for name in RENDEZVOUS_VARIABLES)


def _env_int(name: str) -> int:
    text = os.environ[name]
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"Environment variable {name} must hold an integer, got {text!r}; "
                         "it is set by poprun, launch the script with poprun.") from None


def ensure_process_group(rank: int, world_size: int) -> None:
    """Join the process group of the run as ``rank`` of ``world_size`` (once).

    The rank and size the options give must be the ones the launcher started
    this process with, or the collectives would pair the wrong processes.
    """
    if dist.is_initialized():
        joined = (dist.get_rank(), dist.get_world_size())
        if joined != (rank, world_size):
            raise ValueError(
                f"Options.Distributed says this is process {rank} of {world_size}, but this "
                f"process already joined the run as process {joined[0]} of {joined[1]}; "
                "every model of an instance must use the same process id and count.")
        return
    launched = (_env_int("RANK"), _env_int("WORLD_SIZE"))
    if launched != (rank, world_size):
        raise ValueError(
            f"Options.Distributed says this is process {rank} of {world_size}, but poprun "
            f"started it as instance {launched[0]} of {launched[1]} (RANK / WORLD_SIZE); leave "
            "the process id and count to poprun: use popdist.poptorch.Options, or "
            "poptorch.Options without Distributed.configureProcessId.")
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world_size)
    atexit.register(_leave_process_group)


def _leave_process_group() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def join_instances(distributed) -> bool:
    """Join the other instances when ``distributed`` (``Options.Distributed``)
    says this process is one of several; whether the model must then reduce
    its gradients and align its clock across instances.

    Without poprun's rendezvous variables the processes cannot find each
    other: they then train independently, and a warning says so.
    """
    if distributed.num_processes == 1:
        return False
    if not has_rendezvous():
        logger.warning(
            "Options.Distributed: process %d of %d, but %s are not set, so the processes "
            "cannot meet: each trains its own copy of the model. Launch the script with "
            "poprun to all-reduce the gradients across processes.",
            distributed.process_id, distributed.num_processes, "/".join(RENDEZVOUS_VARIABLES))
        return False
    ensure_process_group(distributed.process_id, distributed.num_processes)
    return True


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
    now = torch.tensor([simulation.now_ps], dtype=torch.int64)
    dist.all_reduce(now, op=dist.ReduceOp.MAX)
    simulation.wait_until(int(now.item()))
