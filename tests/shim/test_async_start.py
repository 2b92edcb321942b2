"""The asynchronous loader's constructor returns at once: the worker process
starts, unpickles the dataset and preloads in the background, and the first
``next()`` waits for it. (PopTorch's own constructor waits for the worker's
first item; the shim's does not.)

Every failure stays clear: a worker that fails or dies while it starts makes
the first iteration raise its error, quickly, leaving no process and no
shared memory behind; terminating a loader that never iterated does not hang.
"""
import multiprocessing
import multiprocessing.resource_tracker
import os
import signal
import time

import pytest
import torch

import poptorch_shim as poptorch
from poptorch_shim._data.async_data_accessor import AsynchronousDataAccessor

pytestmark = [pytest.mark.slow]  # spawns the asynchronous loader's worker processes


class Slow(torch.utils.data.Dataset):
    """Each item takes ``seconds`` to load; with ``log``, each index loaded is
    appended to that file."""

    def __init__(self, length, seconds, log=None):
        self.length, self.seconds, self.log = length, seconds, log

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        time.sleep(self.seconds)
        if self.log is not None:
            with open(self.log, "a", encoding="utf-8") as log:
                log.write(f"{index}\n")
        return torch.full((3,), float(index))


class BreaksWhenUnpickled(Slow):
    def __setstate__(self, state):
        raise OSError("the dataset's files are not mounted in the worker")


def ring_files():
    return {name for name in os.listdir("/dev/shm") if name.startswith("ipusim-ring-")}


@pytest.fixture
def no_leaks():
    multiprocessing.resource_tracker.ensure_running()
    rings = ring_files()
    yield
    assert multiprocessing.active_children() == []
    assert ring_files() - rings == set()


def lines(path):
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as log:
        return log.read().split()


def test_the_constructor_returns_before_the_preload(no_leaks):
    started = time.perf_counter()
    loader = poptorch.DataLoader(poptorch.Options(), Slow(16, 0.1), batch_size=4,
                                 mode=poptorch.DataLoaderMode.Async)
    constructed = time.perf_counter() - started
    first = next(iter(loader))
    to_first_batch = time.perf_counter() - started
    assert first.tolist() == [[float(i)] * 3 for i in range(4)]
    # The first batch alone is 0.4 s of loading, after the worker's start-up.
    assert to_first_batch > 0.4
    assert constructed < to_first_batch / 5, (constructed, to_first_batch)
    assert [batch[:, 0].tolist() for batch in loader] == [
        [float(i) for i in range(start, start + 4)] for start in (0, 4, 8, 12)]
    loader.terminate()


def test_the_worker_preloads_in_the_background(tmp_path, no_leaks):
    """With early_preload the ring fills while the consumer does something
    else: once the first batch was loaded, next() only has to take it."""
    log = str(tmp_path / "loaded.log")
    loader = poptorch.DataLoader(poptorch.Options(), Slow(16, 0.2, log), batch_size=4,
                                 mode=poptorch.DataLoaderMode.Async,
                                 async_options={"early_preload": True})
    deadline = time.monotonic() + 60
    while len(lines(log)) < 8 and time.monotonic() < deadline:  # two batches loaded
        time.sleep(0.05)
    assert len(lines(log)) >= 8
    started = time.perf_counter()
    first = next(iter(loader))
    waited = time.perf_counter() - started
    assert first[:, 0].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert waited < 0.8 / 5, waited  # a batch takes 0.8 s to load
    loader.terminate()


def test_a_worker_that_fails_to_start_raises_on_the_first_iteration(no_leaks):
    started = time.perf_counter()
    accessor = AsynchronousDataAccessor(BreaksWhenUnpickled(8, 0.0))
    assert time.perf_counter() - started < 5
    with pytest.raises(OSError, match="not mounted in the worker") as caught:
        next(iter(accessor))
    assert "while unpickling the dataset" in str(caught.value)
    with pytest.raises(RuntimeError, match="stopped when its worker failed"):
        next(iter(accessor))


def test_a_worker_killed_while_starting_is_reported_on_the_first_iteration(no_leaks):
    accessor = AsynchronousDataAccessor(Slow(8, 0.0))
    os.kill(accessor.worker_pid, signal.SIGKILL)
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="killed by signal 9 during start-up"):
        next(iter(accessor))
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("after_s", [0.0, 1.0])
def test_terminating_before_the_first_iteration_does_not_hang(no_leaks, after_s):
    loader = poptorch.DataLoader(poptorch.Options(), Slow(16, 0.5), batch_size=4,
                                 mode=poptorch.DataLoaderMode.Async)
    time.sleep(after_s)  # the worker still starting, or loading its first batch
    started = time.monotonic()
    loader.terminate()
    assert time.monotonic() - started < 3
    with pytest.raises(RuntimeError, match="terminated"):
        next(iter(loader))
