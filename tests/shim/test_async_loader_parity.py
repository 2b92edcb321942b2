"""The asynchronous loader where PopTorch's own data-loader tests look at it:
items of a type registered with ``registerCustomArgParser``, batches whose
dtype changes from step to step, the first item ready before iteration
(``_worker._data_buffers.indices_mem``), a dataset that fails at start-up
(``poptorch.Error``, "worker thread failed to start"), the worker's pid in
the debug log, and Ctrl-C at the debug level printing nothing but debug lines.

The workers start with SharingStrategy.Fork, which takes milliseconds, except
where the test is about a real script's process.
"""
import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch
from support.datasets import Indices

import poptorch_shim as poptorch
from poptorch_shim._data.async_data_accessor import AsynchronousDataAccessor
from poptorch_shim.enums import DataLoaderMode, SharingStrategy
from poptorch_shim.errors import Error

FORK = {"sharing_strategy": SharingStrategy.Fork}
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Batch:
    """A user's batch type, carried as its two tensors."""

    def __init__(self, data, label):
        self.data, self.label = data, label


class BatchParser(poptorch.ICustomArgParser):
    def yieldTensors(self, struct):
        yield struct.data
        yield struct.label

    def reconstruct(self, original_structure, tensor_iterator):
        return type(original_structure)(*tensor_iterator)


poptorch.registerCustomArgParser(Batch, BatchParser())


class Labelled(Indices):
    """dataset[i] = (a float32 row filled with i, the int64 label i)."""

    def __getitem__(self, index):
        return torch.full((3,), float(index)), torch.tensor([index])


class Padded:
    """A collate function that pads each batch to ``size`` rows with float32
    zeros: a short batch's labels become float32, a full one's stay int64 (as
    PopTorch's own tests pad theirs)."""

    def __init__(self, size, as_batch=False):
        self.size, self.as_batch = size, as_batch

    def __call__(self, items):
        columns = []
        for column in zip(*items):
            rows = list(column) + [torch.zeros(column[0].shape)] * (self.size - len(column))
            columns.append(torch.stack(rows))
        return Batch(*columns) if self.as_batch else tuple(columns)


class Given(torch.utils.data.Sampler):
    def __init__(self, batches, batch_size):
        self.batches, self.batch_size = batches, batch_size

    def __iter__(self):
        return iter(self.batches)

    def __len__(self):
        return len(self.batches)


def async_loader(as_batch, drop_last, mode=DataLoaderMode.Async):
    """Sampler batches of 1, 3, 3, 2, 3 indices padded to 3 rows, two per step."""
    sampler = Given([[0], [1, 2, 3], [4, 5, 6], [7, 8], [9, 10, 11]], batch_size=3)
    return poptorch.DataLoader(poptorch.Options().deviceIterations(2), Labelled(12),
                               batch_sampler=sampler, collate_fn=Padded(3, as_batch),
                               drop_last=drop_last, mode=mode, async_options=FORK)


def rows(step, as_batch):
    data, label = (step.data, step.label) if as_batch else step
    return data[:, 0].tolist(), label[:, 0].tolist(), label.dtype


@pytest.mark.parametrize("mode", [DataLoaderMode.Async, DataLoaderMode.AsyncRebatched])
@pytest.mark.parametrize("as_batch", [False, True])
@pytest.mark.parametrize("drop_last", [False, True])
def test_padded_batches_of_a_custom_type_arrive_as_in_poptorch(mode, as_batch, drop_last):
    with pytest.warns(UserWarning) if not drop_last else _nothing():
        loader = async_loader(as_batch, drop_last, mode)
    try:
        # Each step is a view of the ring until the next one is asked for.
        got = [(type(step), *rows(step, as_batch)) for step in loader]
    finally:
        loader.terminate()
    # The first batch's labels were float32 (padded): the later int64 ones are
    # converted into that slot, as PopTorch's copy into its buffer does.
    kind = Batch if as_batch else tuple
    expected = [(kind, [0, 0, 0, 1, 2, 3], [0, 0, 0, 1, 2, 3], torch.float32),
                (kind, [4, 5, 6, 7, 8, 0], [4, 5, 6, 7, 8, 0], torch.float32)]
    if not drop_last:  # the fifth batch makes a last step of one batch
        expected.append((kind, [9, 10, 11], [9, 10, 11], torch.float32))
    assert got == expected


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class FloatAfterInt(Indices):
    def __getitem__(self, index):
        return torch.tensor([index]) if index == 0 else torch.tensor([index + 0.5])


def test_a_dtype_that_would_lose_values_in_the_slot_is_refused():
    accessor = AsynchronousDataAccessor(FloatAfterInt(3), **FORK)
    try:
        with pytest.raises(ValueError, match=r"item is a torch.float32 tensor of shape \(1,\) "
                                             r"but the slot .* holds a torch.int64"):
            list(accessor)
    finally:
        accessor.terminate()


def ready_slots(accessor, expected, timeout_s=20.0):
    """PopTorch's private count of ready slots, once it reaches ``expected``
    (or what it is at the deadline)."""
    deadline = time.monotonic() + timeout_s
    while True:
        ready = int(accessor._worker._data_buffers.indices_mem.sum())
        if ready == expected or time.monotonic() > deadline:
            return ready
        time.sleep(0.01)


@pytest.mark.parametrize("early_preload, ready", [(False, 1), (True, 4)])
def test_the_first_item_is_ready_at_once_and_early_preload_fills_the_ring(early_preload,
                                                                          ready):
    accessor = AsynchronousDataAccessor(Indices(10), buffer_size=4, early_preload=early_preload,
                                        **FORK)
    try:
        assert ready_slots(accessor, ready) == ready
        assert list(accessor) == list(range(10))
    finally:
        accessor.terminate()
    assert accessor._worker is None


class Broken(Indices):
    def __getitem__(self, index):
        assert False, "Broken dataset"


def test_a_dataset_broken_from_its_first_item_fails_to_start_as_in_poptorch():
    loader = poptorch.DataLoader(poptorch.Options(), Broken(10), num_workers=2)
    with pytest.raises(Error, match="worker thread failed to start") as caught:
        AsynchronousDataAccessor(loader, **FORK)
    assert "AssertionError: Broken dataset" in str(caught.value)
    assert isinstance(caught.value.__cause__, AssertionError)


def test_the_debug_log_names_the_worker_process(capfd):
    poptorch.setLogLevel("DEBUG")
    try:
        accessor = AsynchronousDataAccessor(Indices(3), **FORK)
        accessor.terminate()
    finally:
        poptorch.setLogLevel("WARN")
    err = capfd.readouterr().err
    assert f"[debug] AsynchronousDataAccessor worker process: {accessor.worker_pid}" in err
    assert f"[debug] AsynchronousDataAccessor parent process: {os.getpid()}" in err


_SCRIPT = textwrap.dedent("""
    import os, time
    os.environ["POPTORCH_LOG_LEVEL"] = "DEBUG"
    import torch
    import poptorch_shim as poptorch

    dataset = torch.utils.data.TensorDataset(torch.randn(64, 1, 32, 32),
                                             torch.arange(64))
    loader = poptorch.DataLoader(poptorch.Options().deviceIterations(2), dataset,
                                 batch_size=8, shuffle=True, num_workers=2,
                                 mode=poptorch.DataLoaderMode.Async)
    for _ in loader:
        pass
    try:
        print("[control] ready", flush=True)
        time.sleep(60)
        print("[control] no interrupt", flush=True)
    except KeyboardInterrupt:
        print("[control] interrupted", flush=True)
""")


@pytest.mark.slow
def test_ctrl_c_to_a_script_and_its_worker_prints_only_its_debug_lines():
    """What PopTorch's test of a notebook's Ctrl-C checks: Ctrl-C reaching the
    script and the loader's worker (whose pid the debug log gives) leaves no
    error, warning or traceback on the console, only the debug lines."""
    env = dict(os.environ, PYTHONPATH=REPO, PYTHONUNBUFFERED="1")
    script = subprocess.Popen([sys.executable, "-c", _SCRIPT], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    lines, worker = [], None
    try:
        for line in script.stdout:
            lines.append(line)
            found = re.search(r"AsynchronousDataAccessor worker process: (\d+)", line)
            worker = int(found.group(1)) if found else worker
            if line.startswith("[control] ready"):
                break
        assert worker is not None, "".join(lines)
        os.kill(worker, signal.SIGINT)
        script.send_signal(signal.SIGINT)
        lines += script.stdout.readlines()
        assert script.wait(timeout=60) == 0, "".join(lines)
    finally:
        if script.poll() is None:
            script.kill()
            script.wait()
        script.stdout.close()
    assert "[control] interrupted\n" in lines
    assert [line for line in lines if "[debug]" not in line and "[control]" not in line] == []
