"""What a torch DataLoader's worker processes spend on each batch, measured in the
workers themselves and carried with the batch to the process that reads it.

torch runs ``worker_init_fn`` once in each worker process and ``collate_fn`` on
each of its batches. ``poptorch.DataLoader`` starts its workers with both wrapped
(:class:`TimedWorkerInit`, :class:`TimedCollate`): they read the worker's CPU
time (``time.process_time``: all its threads, the one that pickles finished
batches into shared memory included) after the init and after each collate, and
the difference between two readings is what that batch cost the worker. It
travels with the batch as a :class:`CostedBatch`, which the reading side unwraps
(:func:`unwrapped`). A worker waiting for its next indices, or for the caller
to take its batches, uses no CPU, so its idle time costs nothing; its own sleeps
and reads are not counted either (only CPU time holds still when other processes
share the machine).
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

# The worker's CPU time when its last batch was collated (or when it started);
# one per worker process, which collates one batch at a time.
_last_cpu_s: float | None = None


class CostedBatch:
    """A batch a worker collated and the worker's CPU seconds it took."""

    def __init__(self, batch: Any, cpu_s: float):
        self.batch = batch
        self.cpu_s = cpu_s

    def pin_memory(self, device: Any = None) -> CostedBatch:
        """torch's pin-memory thread pins what it can of the batch, as without the wrapper."""
        from torch.utils.data._utils.pin_memory import pin_memory
        return CostedBatch(pin_memory(self.batch, device), self.cpu_s)


class TimedWorkerInit:
    """The user's ``worker_init_fn`` (or none), then the worker's CPU clock started:
    the start of the worker (importing torch, unpickling the dataset) is no batch's."""

    def __init__(self, init_fn: Callable[[int], None] | None):
        self.init_fn = init_fn

    def __call__(self, worker_id: int) -> None:
        global _last_cpu_s
        if self.init_fn is not None:
            self.init_fn(worker_id)
        _last_cpu_s = time.process_time()


class TimedCollate:
    """The user's ``collate_fn``, its batch returned with the worker's CPU seconds
    since its previous batch (fetching the samples, collating, handing the previous
    batch over)."""

    def __init__(self, collate_fn: Callable[[Any], Any]):
        self.collate_fn = collate_fn

    def __call__(self, samples: Any) -> CostedBatch:
        global _last_cpu_s
        batch = self.collate_fn(samples)
        now = time.process_time()
        spent = 0.0 if _last_cpu_s is None else now - _last_cpu_s
        _last_cpu_s = now
        return CostedBatch(batch, spent)


def unwrapped(batches: Iterator, add_cpu_s: Callable[[float], None]) -> Iterator:
    """``batches`` without their wrappers, each batch's workers' CPU seconds handed
    to ``add_cpu_s`` before the batch is yielded."""
    for batch in batches:
        if isinstance(batch, CostedBatch):
            add_cpu_s(batch.cpu_s)
            batch = batch.batch
        yield batch
