"""Tests of poptorch_shim's AsynchronousDataAccessor: items arrive complete
and in order over several epochs, the worker honours early_preload,
load_indefinitely and restarts, rebatching joins batches, and every failure
(an exception in the dataset, an unpicklable dataset, a killed worker, a
Ctrl-C, a dead parent) surfaces quickly and leaves no process and no shared
memory behind.

Tests that are about the accessor's own logic start the worker with
SharingStrategy.Fork, which takes milliseconds; those about what a real run
does use the default spawn start method, which imports torch (seconds).
"""
import gc
import multiprocessing
import multiprocessing.resource_tracker
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch

from poptorch_shim._data import shared_leaves
from poptorch_shim._data.async_data_accessor import AsynchronousDataAccessor
from poptorch_shim.enums import SharingStrategy
from poptorch_shim.errors import Error

pytestmark = [pytest.mark.slow]  # starts the asynchronous loader's worker processes

FORK = {"sharing_strategy": SharingStrategy.Fork}
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Counting(torch.utils.data.Dataset):
    """dataset[i] = tensor([i, i]): the content says which item it is."""

    def __init__(self, length):
        self.length = length

    def __len__(self):
        return self.length

    def __getitem__(self, index):
        if index >= self.length:
            raise IndexError(index)
        return torch.tensor([index, index])


class Nested(Counting):
    """Items mixing dicts, tuples, lists, tensors and Python scalars."""

    def __getitem__(self, index):
        return {"image": torch.full((2, 3), float(index)),
                "pair": (torch.tensor([index, -index]), index),
                "flags": [index % 2 == 0, index / 2]}


class Logged(Counting):
    """Appends each index it loads to a file, to observe the worker."""

    def __init__(self, length, log_path):
        super().__init__(length)
        self.log_path = log_path

    def __getitem__(self, index):
        with open(self.log_path, "a", encoding="utf-8") as log:
            log.write(f"{index}\n")
        return super().__getitem__(index)


class FailsAt(Counting):
    """Raises ValueError when item ``bad`` is loaded."""

    def __init__(self, length, bad):
        super().__init__(length)
        self.bad = bad

    def __getitem__(self, index):
        if index == self.bad:
            raise ValueError(f"cannot decode item {index}")
        return super().__getitem__(index)


class Images(Counting):
    """Item i: a 64 KiB image filled with i, and i (16 make a 1 MiB batch);
    loading item ``bad`` raises ValueError."""

    def __init__(self, length, bad=None):
        super().__init__(length)
        self.bad = bad

    def __getitem__(self, index):
        if index == self.bad:
            raise ValueError(f"cannot decode image {index}")
        return torch.full((1, 128, 128), float(index)), index


class SharedImages(Counting):
    """Tensors of 1 MiB that the dataset keeps in shared memory and returns
    as they are."""

    def __init__(self, length):
        super().__init__(length)
        self.images = [torch.full((512, 512), float(index)).share_memory_()
                       for index in range(length)]

    def __getitem__(self, index):
        return self.images[index]


class ShapeChangesAt(Counting):
    def __getitem__(self, index):
        return torch.zeros(3 if index == 2 else 2)


class HoldsLock(Counting):
    """Cannot be pickled: it holds a lock."""

    def __init__(self, length):
        super().__init__(length)
        self.lock = threading.Lock()


def ring_files():
    return {name for name in os.listdir("/dev/shm") if name.startswith("ipusim-ring-")}


def child_pids():
    """Processes whose parent is this process, read from /proc."""
    children = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", encoding="utf-8") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == os.getpid() and fields[0] != "Z":
                children.add(int(entry))
    return children


def process_gone(pid, timeout_s=10.0):
    """Wait until ``pid`` no longer runs (gone or a zombie)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except OSError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


@pytest.fixture
def no_leaks():
    """Check a test leaves no worker process and no ring buffer file."""
    # spawn starts multiprocessing's resource tracker once per interpreter;
    # start it now so that it does not count as a left-over child.
    multiprocessing.resource_tracker.ensure_running()
    children, rings = child_pids(), ring_files()
    yield
    assert multiprocessing.active_children() == []
    assert child_pids() - children == set()
    assert ring_files() - rings == set()


def values(accessor):
    """One pass over the accessor, as Python values (the tensors are views
    that the next item overwrites)."""
    return [item[0].item() for item in accessor]


def wait_for_lines(path, count, timeout_s=10.0):
    deadline = time.monotonic() + timeout_s
    lines = []
    while time.monotonic() < deadline:
        if os.path.exists(path):
            with open(path, encoding="utf-8") as log:
                lines = log.read().split()
            if len(lines) >= count:
                break
        time.sleep(0.01)
    return [int(line) for line in lines]


def test_spawned_worker_gives_every_item_in_order_each_epoch(no_leaks):
    accessor = AsynchronousDataAccessor(Nested(7), buffer_size=2)
    assert len(accessor) == 7
    assert not ring_files(), "the ring file is unlinked once both sides map it"
    for _ in range(2):
        seen = []
        for item in accessor:
            index = item["pair"][1]
            assert isinstance(index, int)
            assert torch.equal(item["image"], torch.full((2, 3), float(index)))
            assert torch.equal(item["pair"][0], torch.tensor([index, -index]))
            assert item["flags"] == [index % 2 == 0, index / 2]
            assert isinstance(item["flags"][0], bool)
            seen.append(index)
        assert seen == list(range(7))
    accessor.terminate()


@pytest.mark.parametrize("strategy", [SharingStrategy.SharedMemory,
                                      SharingStrategy.ForkServer])
def test_other_sharing_strategies_deliver_the_same_items(strategy):
    # No leak check: the fork server is a helper process that stays.
    accessor = AsynchronousDataAccessor(Counting(4), sharing_strategy=strategy)
    assert values(accessor) == values(accessor) == [0, 1, 2, 3]
    pid = accessor.worker_pid
    accessor.terminate()
    assert process_gone(pid, timeout_s=0)


@pytest.mark.parametrize("buffer_size", [1, 3])
def test_partly_consumed_epoch_restarts_from_the_start(no_leaks, buffer_size):
    accessor = AsynchronousDataAccessor(Counting(6), buffer_size=buffer_size, **FORK)
    iterator = iter(accessor)
    assert [next(iterator)[0].item() for _ in range(4)] == [0, 1, 2, 3]
    assert values(accessor) == list(range(6))
    iterator = iter(accessor)
    assert next(iterator)[0].item() == 0
    assert values(accessor) == list(range(6))
    with pytest.raises(StopIteration):
        next(iterator)  # an exhausted iteration stays exhausted
    accessor.terminate()


def test_early_preload_fills_the_buffer_at_construction(tmp_path, no_leaks):
    log = str(tmp_path / "early.log")
    accessor = AsynchronousDataAccessor(Logged(20, log), buffer_size=3,
                                        early_preload=True, **FORK)
    # Three items fill the slots and a fourth waits for one to free up.
    assert wait_for_lines(log, 4) == [0, 1, 2, 3]
    assert values(accessor) == list(range(20))
    accessor.terminate()


def test_without_early_preload_only_the_first_item_is_loaded(tmp_path, no_leaks):
    log = str(tmp_path / "lazy.log")
    accessor = AsynchronousDataAccessor(Logged(20, log), buffer_size=3, **FORK)
    time.sleep(0.3)
    assert wait_for_lines(log, 1) == [0]
    assert values(accessor) == list(range(20))
    accessor.terminate()


@pytest.mark.parametrize("load_indefinitely", [True, False])
def test_load_indefinitely_decides_whether_the_next_epoch_preloads(
        tmp_path, no_leaks, load_indefinitely):
    log = str(tmp_path / "epochs.log")
    accessor = AsynchronousDataAccessor(Logged(5, log), buffer_size=2,
                                        load_indefinitely=load_indefinitely, **FORK)
    assert values(accessor) == list(range(5))
    if load_indefinitely:
        # Two slots fill with the next epoch and a third item waits.
        assert wait_for_lines(log, 5 + 3) == list(range(5)) + [0, 1, 2]
    else:
        time.sleep(0.3)
        assert wait_for_lines(log, 5) == list(range(5))
    assert values(accessor) == list(range(5))
    accessor.terminate()


def test_rebatched_size_joins_batches_and_drops_the_short_one(no_leaks):
    batches = torch.utils.data.DataLoader(Counting(10), batch_size=2)
    accessor = AsynchronousDataAccessor(batches, rebatched_size=3, **FORK)
    assert len(accessor) == 3
    for _ in range(2):
        assert [batch[:, 0].tolist() for batch in accessor] == [
            [0, 1, 2], [3, 4, 5], [6, 7, 8]]
    accessor.terminate()


def test_a_short_last_batch_keeps_its_length(no_leaks):
    batches = torch.utils.data.DataLoader(Counting(7), batch_size=3)
    accessor = AsynchronousDataAccessor(batches, **FORK)
    assert [batch[:, 0].tolist() for batch in accessor] == [[0, 1, 2], [3, 4, 5], [6]]
    accessor.terminate()


def test_returned_tensors_are_views_valid_until_the_next_item(no_leaks):
    accessor = AsynchronousDataAccessor(Counting(8), buffer_size=2, **FORK)
    iterator = iter(accessor)
    first = next(iterator)
    kept = first.clone()
    time.sleep(0.2)  # the worker has time to refill every free slot
    assert torch.equal(first, kept), "a held slot is never overwritten"
    next(iterator)
    next(iterator)
    next(iterator)
    assert not torch.equal(first, kept), "after next() the slot is reused"
    accessor.terminate()
    assert first.shape == (2,)  # still valid memory after terminate()


def first_pixels(batches):
    return [images[:, 0, 0, 0].int().tolist() for images in batches]


@pytest.mark.parametrize("strategy", [SharingStrategy.Fork, SharingStrategy.FileSystem])
def test_batches_that_torch_workers_collate_are_passed_not_copied(no_leaks, strategy):
    """A torch DataLoader's workers collate into shared memory: the host maps
    those batches instead of a slot, so that each stays valid after next(),
    in order, across epochs and an abandoned epoch."""
    loader = torch.utils.data.DataLoader(Images(48), batch_size=16, num_workers=1)
    accessor = AsynchronousDataAccessor(loader, buffer_size=1, sharing_strategy=strategy)
    expected = [list(range(start, start + 16)) for start in (0, 16, 32)]
    for _ in range(2):
        kept = [images for images, _ in accessor]
        assert first_pixels(kept) == expected
    iterator = iter(accessor)
    next(iterator)
    assert [labels.tolist() for _, labels in accessor] == expected
    accessor.terminate()
    assert first_pixels(kept) == expected


def test_batches_passed_before_a_failure_arrive_after_the_worker_exits(no_leaks):
    loader = torch.utils.data.DataLoader(Images(64, bad=40), batch_size=16, num_workers=1)
    accessor = AsynchronousDataAccessor(loader, **FORK)
    iterator = iter(accessor)
    assert process_gone(accessor.worker_pid)  # it failed on the third batch
    kept = [next(iterator)[0], next(iterator)[0]]
    with pytest.raises(ValueError, match="cannot decode image 40"):
        next(iterator)
    assert first_pixels(kept) == [list(range(16)), list(range(16, 32))]


def test_ctrl_c_while_passed_leaves_arrive_leaves_the_accessor_usable(
        no_leaks, monkeypatch):
    loader = torch.utils.data.DataLoader(Images(48), batch_size=16, num_workers=1)
    accessor = AsynchronousDataAccessor(loader, **FORK)
    receive, interrupted = shared_leaves.receive, []

    def interrupted_once(sock, shapes):
        if not interrupted:
            interrupted.append(True)
            raise KeyboardInterrupt
        return receive(sock, shapes)

    monkeypatch.setattr(shared_leaves, "receive", interrupted_once)
    with pytest.raises(KeyboardInterrupt):
        next(iter(accessor))
    assert [labels.tolist() for _, labels in accessor] == [
        list(range(start, start + 16)) for start in (0, 16, 32)]
    accessor.terminate()


def test_a_dataset_own_shared_tensors_are_copied_never_aliased(no_leaks):
    dataset = SharedImages(3)
    accessor = AsynchronousDataAccessor(dataset, buffer_size=1, **FORK)
    for image in accessor:
        image.add_(100)  # the consumer may change what it received
    assert [image[0, 0].item() for image in accessor] == [0, 1, 2]
    assert [image[0, 0].item() for image in dataset.images] == [0, 1, 2]
    accessor.terminate()


def test_worker_exception_reaches_the_consumer_with_its_traceback(no_leaks):
    accessor = AsynchronousDataAccessor(FailsAt(10, bad=4))
    iterator = iter(accessor)
    assert [next(iterator)[0].item() for _ in range(4)] == [0, 1, 2, 3]
    started = time.monotonic()
    with pytest.raises(ValueError) as caught:
        next(iterator)
    assert time.monotonic() - started < 5
    message = str(caught.value)
    assert "cannot decode item 4" in message
    assert "while loading item 4 of epoch 1" in message
    assert "Original traceback (most recent call last)" in message
    assert "test_async_accessor.py" in message and "__getitem__" in message
    with pytest.raises(RuntimeError, match="worker failed"):
        next(iterator)


def test_failure_on_the_first_item_is_raised_by_the_constructor(no_leaks):
    """As PopTorch: poptorch.Error "worker thread failed to start"; here the
    worker's own exception is its cause, and its message is in the error's."""
    with pytest.raises(Error, match="worker thread failed to start") as caught:
        AsynchronousDataAccessor(FailsAt(10, bad=0), **FORK)
    assert "cannot decode item 0" in str(caught.value)
    assert isinstance(caught.value.__cause__, ValueError)


def test_an_item_that_does_not_fit_the_buffer_is_an_error(no_leaks):
    accessor = AsynchronousDataAccessor(ShapeChangesAt(5), **FORK)
    with pytest.raises(ValueError, match=r"shape \(3,\).*shape \(2,\)"):
        values(accessor)


def test_an_empty_dataset_is_an_error(no_leaks):
    with pytest.raises(Error, match="(?s)failed to start.*The dataset is empty"):
        AsynchronousDataAccessor(Counting(0), **FORK)


@pytest.mark.parametrize("strategy", [SharingStrategy.FileSystem,
                                      SharingStrategy.SharedMemory])
def test_an_unpicklable_dataset_gets_a_clear_error(no_leaks, strategy):
    with pytest.raises(pickle.PicklingError) as caught:
        AsynchronousDataAccessor(HoldsLock(4), sharing_strategy=strategy)
    message = str(caught.value)
    assert "cannot pickle the dataset (a HoldsLock)" in message
    assert "lock" in message and "'spawn'" in message


def test_a_killed_worker_is_reported_not_waited_for(no_leaks):
    accessor = AsynchronousDataAccessor(Counting(5), buffer_size=1, **FORK)
    os.kill(accessor.worker_pid, signal.SIGKILL)
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="killed by signal 9"):
        values(accessor)
    assert time.monotonic() - started < 5


def test_terminate_and_garbage_collection_stop_the_worker(no_leaks):
    accessor = AsynchronousDataAccessor(Counting(5), early_preload=True, **FORK)
    pid = accessor.worker_pid
    accessor.terminate()
    accessor.terminate()
    assert process_gone(pid, timeout_s=0)
    with pytest.raises(RuntimeError, match="terminated"):
        iter(accessor)
    accessor = AsynchronousDataAccessor(Counting(5), early_preload=True, **FORK)
    pid = accessor.worker_pid
    del accessor
    gc.collect()
    assert process_gone(pid, timeout_s=0)


def test_keyboard_interrupt_in_the_loop_leaves_the_accessor_usable(no_leaks):
    """Ctrl-C raises KeyboardInterrupt wherever the consumer's loop is; it is
    raised here directly, so the test does not depend on how the test runner
    process handles SIGINT (the real signal is sent in the test below)."""
    accessor = AsynchronousDataAccessor(Counting(6), **FORK)
    with pytest.raises(KeyboardInterrupt):
        for item in accessor:
            if item[0].item() == 2:
                raise KeyboardInterrupt
    assert values(accessor) == list(range(6))
    accessor.terminate()


@pytest.mark.parametrize("kwargs, message", [
    ({"buffer_size": 0}, "buffer_size must be an int >= 1, got 0"),
    ({"miss_sleep_time_in_ms": -1}, "miss_sleep_time_in_ms must be a number >= 0"),
    ({"rebatched_size": 1}, "rebatched_size must be None or an int greater than 1"),
    ({"sharing_strategy": "fork"}, "sharing_strategy must be a poptorch.SharingStrategy"),
])
def test_arguments_are_checked(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        AsynchronousDataAccessor(Counting(3), **kwargs)


def like_a_terminal():
    """In the child before exec: SIGINT delivered and handled as a shell starts
    a program, whatever the test runner's own process has done with it."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])
    signal.signal(signal.SIGINT, signal.SIG_DFL)


_SCRIPT = """
import os, sys, time
sys.path.insert(0, {repo!r})
import torch
from poptorch_shim._data.async_data_accessor import AsynchronousDataAccessor
from poptorch_shim.enums import SharingStrategy

class Slow:
    def __len__(self):
        return 100000

    def __getitem__(self, index):
        time.sleep(0.002)
        return torch.full((4,), index)

if __name__ == "__main__":
    accessor = AsynchronousDataAccessor(
        Slow(), sharing_strategy=SharingStrategy.{strategy})
    print(accessor.worker_pid, flush=True)
    for item in accessor:
        pass
"""


@pytest.mark.parametrize("ending, strategy", [("ctrl-c", "FileSystem"),
                                              ("parent-killed", "Fork")])
def test_nothing_outlives_the_program(tmp_path, ending, strategy):
    """Ctrl-C in the terminal (SIGINT to the whole process group) or a
    parent killed outright: the worker goes away and no ring file is left."""
    script = tmp_path / "loop.py"
    script.write_text(textwrap.dedent(_SCRIPT.format(repo=REPO, strategy=strategy)))
    program = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True,
                               preexec_fn=like_a_terminal)
    try:
        worker = int(program.stdout.readline())
        time.sleep(0.3)  # well inside the loop
        if ending == "ctrl-c":
            os.killpg(program.pid, signal.SIGINT)
        else:
            program.kill()
        _, stderr = program.communicate(timeout=20)
    finally:
        if program.poll() is None:
            program.kill()
    if ending == "ctrl-c":
        assert program.returncode == -signal.SIGINT
        assert "KeyboardInterrupt" in stderr
        assert "Exception ignored" not in stderr and "leaked" not in stderr
    assert process_gone(worker)
    assert not [name for name in os.listdir("/dev/shm")
                if name.startswith(f"ipusim-ring-{program.pid}-")]


def test_an_exception_class_of_the_script_keeps_its_type_under_the_runner(tmp_path):
    """The worker imports the script as __mp_main__; under ``python -m
    poptorch_shim`` the consumer must still find the script's class."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent("""
        import torch
        import poptorch

        class DatasetBroke(Exception):
            pass

        class Broken(torch.utils.data.Dataset):
            def __len__(self):
                return 8

            def __getitem__(self, index):
                if index == 3:
                    raise DatasetBroke(f"item {index} is bad")
                return torch.ones(2)

        if __name__ == "__main__":
            loader = poptorch.DataLoader(poptorch.Options(), Broken(), batch_size=1,
                                         mode=poptorch.DataLoaderMode.Async)
            try:
                for _ in loader:
                    pass
            except DatasetBroke as error:
                print("caught", type(error).__name__, "item 3 is bad" in str(error))
            finally:
                loader.terminate()
    """))
    result = subprocess.run([sys.executable, "-m", "poptorch_shim", str(script)],
                            capture_output=True, text=True, timeout=120,
                            cwd=REPO)
    assert result.stdout.strip() == "caught DatasetBroke True", result.stderr


def test_a_failing_torch_worker_stops_the_loader_at_once(no_leaks):
    """With torch's own workers inside the accessor (num_workers > 0), the
    error reaches the consumer with the item's traceback, and the accessor's
    worker exits by itself (code 1) instead of waiting on torch's graceful
    shutdown until the host has to terminate it."""
    import poptorch_shim as poptorch
    loader = poptorch.DataLoader(poptorch.Options(), FailsAt(64, bad=10), batch_size=2,
                                 num_workers=2, mode=poptorch.DataLoaderMode.Async)
    handle = loader._accessor._handle
    with pytest.raises(ValueError, match="cannot decode item 10") as caught:
        for _ in loader:
            pass
    assert "__getitem__" in str(caught.value)
    loader.terminate()
    assert handle.exitcode == 1


def test_a_host_killed_during_start_up_leaves_no_pickled_dataset(tmp_path):
    """SIGKILL (or SIGTERM) of the host while its worker unpickles the
    dataset: the pickle had no name on disk, so nothing is left behind."""
    private_tmp = tmp_path / "tmp"
    private_tmp.mkdir()
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent("""
        import os, sys, time
        import torch
        from poptorch_shim._data.async_data_accessor import AsynchronousDataAccessor
        from poptorch_shim.enums import SharingStrategy

        class SlowToUnpickle(torch.utils.data.Dataset):
            def __init__(self):
                self.payload = bytes(1 << 20)

            def __setstate__(self, state):
                # In the worker: take a while, unless the host has gone.
                parent, end = os.getppid(), time.time() + 20
                print("unpickling", flush=True)
                while time.time() < end and os.getppid() == parent:
                    time.sleep(0.05)
                self.__dict__.update(state)

            def __len__(self):
                return 4

            def __getitem__(self, index):
                return torch.ones(2)

        if __name__ == "__main__":
            AsynchronousDataAccessor(SlowToUnpickle(),
                                     sharing_strategy=SharingStrategy.FileSystem)
    """))
    env = dict(os.environ, TMPDIR=str(private_tmp), PYTHONPATH=REPO)
    host = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                            env=env, cwd=REPO)
    try:
        assert host.stdout.readline().strip() == "unpickling"  # the worker is reading it
        assert list(private_tmp.iterdir()) == []               # no name on disk, even now
        host.send_signal(signal.SIGKILL)
        host.wait(timeout=30)
    finally:
        if host.poll() is None:
            host.kill()
    assert list(private_tmp.iterdir()) == []
