"""The worker process of an ``AsynchronousDataAccessor``: it iterates over the
dataset and copies each item into the next free slot of the shared ring
buffer, epoch after epoch, until the host tells it to stop.

Messages over the pipe: a start-up handshake, then only wake-ups and a
failure::

    worker -> host  ("layout", ItemLayout)    described from the first item
    host -> worker  ("ring", path)            the host created the ring file
    worker -> host  ("attached",)             the host may now unlink it
    worker -> host  ("ready",)                a slot was published while the
                                              host was waiting for one
    worker -> host  ("leaves", slot, epoch, {index: TensorShape}), then
                    their storages' file descriptors
                                              leaves of the item about to be
                                              published in ``slot``, passed by
                                              reference (see below)
    worker -> host  ("failed", WorkerFailure) at any time, then the worker exits

Epochs are numbered from 1. The worker may load epoch e when the host asked
for it (``min_epoch >= e``), or ahead of time: epoch 1 with ``early_preload``,
later epochs with ``load_indefinitely``. When the host raises ``min_epoch``
above the epoch being loaded, the worker drops it and starts that epoch
afresh; the host discards slots stamped with an older epoch.

Most leaves are copied into the slot. When the dataset is a torch DataLoader
with worker processes, its batches reach this worker in shared memory, made
afresh by those workers and held by nothing else here: a large tensor that
fills its storage is then passed through the pipe instead, as its storage's
file descriptor (``shared_leaves.py``), so that the batch reaches the host
without being copied a second time. The worker sends it before it publishes
the slot, and the host reads it when it reads the slot.

Each item's slot says what loading it cost (``ring_buffer.py``): this worker's
CPU time from the previous item to this one, waits for a free slot or for the
host left out (``cpu_clock.Stopwatch``), its own time off the CPU where it loads
the data itself, and the CPU time the dataset's worker processes report for it
(a ``poptorch.DataLoader``'s ``workers_cpu_s``). The host's DataLoader costs its
steps by them (``loader_rate.py``).

The worker ignores SIGINT (Ctrl-C in a terminal reaches the whole process
group): the host decides when it stops. It also stops when its parent
process is gone, so it can never outlive the program.
"""
import dataclasses
import gc
import itertools
import multiprocessing
import os
import pickle
import signal
import sys
import time
from collections.abc import Iterator
from typing import Any

import torch

from poptorch_shim._data import shared_leaves
from poptorch_shim._data.cpu_clock import Stopwatch
from poptorch_shim._data.item_structure import (
    ItemLayout,
    check_leaf,
    describe,
    describe_tree,
    flatten,
)
from poptorch_shim._data.ring_buffer import DATA, END, FREE, SharedRing, copy_into
from poptorch_shim._data.worker_failure import WorkerFailure

# How long the worker sleeps between polls while it waits for the host to
# start an epoch (the miss sleep time only applies to a full buffer).
_IDLE_SLEEP_S = 0.001
# From this size a leaf already in shared memory is passed by reference: below
# it, copying costs less than handing over its shared-memory file.
_PASS_MIN_BYTES = 1 << 20


@dataclasses.dataclass(frozen=True)
class WorkerConfig:
    """What the worker needs to know besides the dataset."""
    buffer_size: int
    miss_sleep_time_in_ms: float
    load_indefinitely: bool
    early_preload: bool
    rebatched_size: int | None
    rebatched_drop_last: bool
    parent_pid: int
    # The start method the host process uses by default: the worker uses it
    # too, so that a DataLoader's own workers start as they would in the host.
    start_method: str


@dataclasses.dataclass(frozen=True)
class DatasetFile:
    """A dataset pickled to a file (``SharingStrategy.FileSystem``)."""
    path: str


class _Shutdown(Exception):
    """The host asked the worker to exit, or the host is gone."""


class _Restart(Exception):
    """The host wants ``epoch`` loaded from its start."""

    def __init__(self, epoch: int):
        super().__init__(epoch)
        self.epoch = epoch


class _Producer:
    """Loads items from the dataset into the ring buffer."""

    def __init__(self, conn, dataset: Any, config: WorkerConfig):
        self._conn = conn
        self._dataset = dataset
        self._config = config
        self._ring: SharedRing | None = None
        self._layout: ItemLayout | None = None
        self._write = 0  # the slot the next item goes to
        self._fill = 0   # rows already copied into that slot when rebatching
        self._socket = None  # the pipe as a socket, to pass descriptors
        self._passes = _receives_batches(dataset)  # may pass leaves by reference
        self._first_ppid = os.getppid()  # the host, or the fork server
        self.where = "while starting epoch 1"
        self._watch = Stopwatch()  # this worker's cost of the item being loaded
        self._workers_cpu_s = _workers_cpu_s(dataset)  # the dataset's workers', so far

    def run(self) -> None:
        """Describe the first item, join the host's ring, then load."""
        iterator = _iterate(self._dataset)
        self.where = "while loading item 0 of epoch 1"
        try:
            first = next(iterator)
        except StopIteration:
            raise ValueError(
                "The dataset is empty: the AsynchronousDataAccessor needs at "
                "least one item to allocate its ring buffer.") from None
        self._layout = describe(first, self._config.rebatched_size)
        self._conn.send(("layout", self._layout))
        path = self._receive_ring_path()
        self._ring = SharedRing.attach(path, self._layout,
                                       self._config.buffer_size)
        self._conn.send(("attached",))
        self._produce(first, iterator)

    def close(self) -> None:
        """Close the socket this producer opened over its pipe."""
        if self._socket is not None:
            self._socket.close()

    def _receive_ring_path(self) -> str:
        self._watch.pause()
        while not self._conn.poll(0.05):
            if not self._host_alive():
                raise _Shutdown()
        self._watch.resume()
        try:
            message = self._conn.recv()
        except EOFError:
            raise _Shutdown() from None
        if message[0] != "ring":
            raise _Shutdown()
        return message[1]

    def _produce(self, first: Any, rest: Iterator) -> None:
        """Load epoch after epoch. The first item goes into the ring at once,
        before the host asks for epoch 1, as PopTorch's worker marks it ready
        during start-up: the host finds it there when it starts iterating."""
        epoch, items, start = 1, rest, 1
        try:
            self._put(epoch, first)
        except _Restart as restart:
            epoch, items = restart.epoch, None
        while True:
            granted = self._await_permission(epoch)
            if granted != epoch:
                epoch, items = granted, None
            try:
                if items is None:
                    self.where = f"while starting epoch {epoch}"
                    items, start, self._fill = _iterate(self._dataset), 0, 0
                self._load_epoch(epoch, items, start)
                epoch += 1
            except _Restart as restart:
                epoch = restart.epoch
            items = None

    def _await_permission(self, epoch: int) -> int:
        """Wait until ``epoch`` may be loaded; return it, or the later epoch
        the host asked for meanwhile."""
        config = self._config
        self._watch.pause()
        try:
            while True:
                wanted = self._poll_host()
                if wanted > epoch:
                    return wanted
                if (wanted == epoch or (epoch == 1 and config.early_preload)
                        or (epoch > 1 and config.load_indefinitely)):
                    return epoch
                time.sleep(_IDLE_SLEEP_S)
        finally:
            self._watch.resume()

    def _poll_host(self) -> int:
        """Raise _Shutdown if the host wants the worker gone; else return
        the lowest epoch the host accepts."""
        if self._ring.shutdown_requested or not self._host_alive():
            raise _Shutdown()
        return self._ring.min_epoch

    def _host_alive(self) -> bool:
        """False once the host process is gone. A process whose parent dies
        is re-parented, so a changed parent id says so at once; a worker
        started by a fork server also checks that the host still exists."""
        if os.getppid() != self._first_ppid:
            return False
        if self._first_ppid != self._config.parent_pid:
            try:
                os.kill(self._config.parent_pid, 0)
            except ProcessLookupError:
                return False
            except PermissionError:
                pass  # it exists, as someone else's process: keep going
        return True

    def _check_restart(self, epoch: int) -> None:
        wanted = self._poll_host()
        if wanted > epoch:
            raise _Restart(wanted)

    def _load_epoch(self, epoch: int, items: Iterator, start: int) -> None:
        """Load ``epoch`` from its item ``start`` on (those before are in the
        ring already), then mark its end."""
        for index in itertools.count(start):
            self._check_restart(epoch)
            self.where = f"while loading item {index} of epoch {epoch}"
            try:
                item = next(items)
            except StopIteration:
                break
            self._put(epoch, item)
        if self._fill and not self._config.rebatched_drop_last:
            self._publish(DATA, epoch, [self._fill] * len(self._layout.leaves))
        self._fill = 0
        self._acquire(epoch)
        self._publish(END, epoch, [0] * len(self._layout.leaves))

    def _put(self, epoch: int, item: Any) -> None:
        """Copy ``item`` into the ring (or into the batch being rebatched)."""
        leaves = self._leaves_of(item)
        if self._config.rebatched_size is None:
            self._store(epoch, leaves)
        else:
            self._rebatch(epoch, leaves)

    def _leaves_of(self, item: Any) -> list[Any]:
        tree, leaves, _ = flatten(item)
        if tree != self._layout.tree:
            raise ValueError(
                f"{self.where}: the item's structure differs from the first "
                f"item's ({describe_tree(tree)} instead of "
                f"{describe_tree(self._layout.tree)}). Every item must be "
                "made of the same tuples, lists, dicts and leaf types.")
        return leaves

    def _store(self, epoch: int, leaves: list[Any]) -> None:
        specs = self._layout.leaves
        lengths = [check_leaf(spec, leaf, self.where)
                   for spec, leaf in zip(specs, leaves)]
        slot = self._acquire(epoch)
        passed = {}
        with torch.no_grad():
            for index, (view, leaf, spec, length) in enumerate(
                    zip(self._ring.views(slot), leaves, specs, lengths)):
                if not isinstance(leaf, torch.Tensor):
                    view.fill_(leaf)
                elif self._passes and leaf.dtype == spec.dtype and _passes_by_reference(leaf):
                    passed[index] = leaf
                elif spec.batched and length != spec.shape[0]:
                    copy_into(view[:length], leaf)
                else:
                    copy_into(view, leaf)
        if passed:
            self._pass(slot, epoch, passed)
        self._publish(DATA, epoch, lengths, passed=bool(passed))

    def _rebatch(self, epoch: int, leaves: list[Any]) -> None:
        specs = self._layout.leaves
        lengths = {check_leaf(spec, leaf, self.where, rebatching=True)
                   for spec, leaf in zip(specs, leaves)}
        if len(lengths) > 1:
            raise ValueError(
                f"{self.where}: the tensors of the item have different batch "
                f"sizes {sorted(lengths)}; rebatching needs one batch size "
                "per item.")
        count = lengths.pop() if lengths else 0
        start, size = 0, self._config.rebatched_size
        while start < count:
            if self._fill == 0:
                self._acquire(epoch)
            take = min(count - start, size - self._fill)
            with torch.no_grad():
                for view, leaf in zip(self._ring.views(self._write), leaves):
                    copy_into(view[self._fill:self._fill + take],
                              leaf[start:start + take])
            self._fill += take
            start += take
            if self._fill == size:
                self._publish(DATA, epoch, [size] * len(specs))
                self._fill = 0

    def _acquire(self, epoch: int) -> int:
        """Wait for the next slot to be FREE; return its index."""
        sleep_s = self._config.miss_sleep_time_in_ms / 1000.0
        self._watch.pause()  # waiting for the host to free a slot is not loading
        try:
            while True:
                self._check_restart(epoch)
                if self._ring.state(self._write) == FREE:
                    return self._write
                if sleep_s > 0:
                    time.sleep(sleep_s)
        finally:
            self._watch.resume()

    def _cost(self) -> tuple[float, float, float]:
        """What the item about to be published cost since the last one: this worker's
        CPU seconds, its own seconds off the CPU (only where it loads the data itself:
        with worker processes it was waiting for them) and theirs."""
        cpu_s, off_cpu_s = self._watch.take()
        workers_cpu_s = _workers_cpu_s(self._dataset)
        spent, self._workers_cpu_s = workers_cpu_s - self._workers_cpu_s, workers_cpu_s
        return cpu_s, 0.0 if self._passes else off_cpu_s, spent

    def _publish(self, kind: int, epoch: int, lengths: list[int],
                 passed: bool = False) -> None:
        cost = self._cost()
        self._ring.publish(self._write, kind, epoch, lengths, passed,
                           cost if kind == DATA else (0.0, 0.0, 0.0))
        self._write = (self._write + 1) % self._config.buffer_size
        if self._ring.host_waiting:
            self._send(("ready",))

    def _pass(self, slot: int, epoch: int,
              leaves: dict[int, torch.Tensor]) -> None:
        if self._socket is None:
            self._socket = shared_leaves.socket_of(self._conn)
        try:
            shared_leaves.send(self._conn, self._socket, ("leaves", slot, epoch),
                               leaves)
        except OSError:
            raise _Shutdown() from None  # the host closed the pipe

    def _send(self, message: tuple) -> None:
        try:
            self._conn.send(message)
        except OSError:
            raise _Shutdown() from None  # the host closed the pipe


def _workers_cpu_s(dataset: Any) -> float:
    """CPU seconds the dataset's worker processes have spent on the batches it
    received, where it counts them (a ``poptorch.DataLoader``), else 0."""
    return float(getattr(dataset, "workers_cpu_s", 0.0))


def _receives_batches(dataset: Any) -> bool:
    """Whether ``dataset`` hands this process batches that other processes
    made (a torch DataLoader with workers): only those may be passed by
    reference. A dataset's own tensors are copied, even in shared memory, so
    that the host's batches never alias the dataset."""
    return isinstance(dataset, torch.utils.data.DataLoader) \
        and dataset.num_workers > 0


def _passes_by_reference(leaf: torch.Tensor) -> bool:
    """Whether ``leaf`` of a received batch goes to the host through the pipe
    rather than being copied: a large plain CPU tensor that fills a storage
    in shared memory."""
    return (type(leaf) is torch.Tensor and leaf.device.type == "cpu"
            and not leaf.requires_grad and leaf.nbytes >= _PASS_MIN_BYTES
            and leaf.is_shared() and leaf.untyped_storage().nbytes() == leaf.nbytes)


def _iterate(dataset: Any) -> Iterator:
    """One pass over the dataset: a map-style dataset (``__len__`` and
    ``__getitem__``, no ``__iter__``) is read from 0 to ``len - 1``, so that
    it gives as many items as ``len()`` says; anything else is iterated."""
    kind = type(dataset)
    if not hasattr(kind, "__iter__") and hasattr(kind, "__len__") \
            and hasattr(kind, "__getitem__"):
        return (dataset[index] for index in range(len(dataset)))
    return iter(dataset)


def worker_main(aliases: Any, conn, boxed_source: list, config: WorkerConfig) -> None:
    """Entry point of the worker process. The dataset comes in a one-item
    list that is emptied here, so that the Process object holds no reference
    to it and dropping it at exit really frees it. ``aliases`` did its work
    when it was unpickled, before the dataset (``poptorch_shim._aliases.for_child``):
    ``import poptorch`` works here whenever it did in the host."""
    del aliases
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    multiprocessing.set_start_method(config.start_method, force=True)
    # Like torch's DataLoader workers: one thread, so that copying batches
    # (memory-bound) does not take cores from the loaders and the consumer.
    torch.set_num_threads(1)
    source = boxed_source.pop()
    producer, exit_code = None, 0
    try:
        if isinstance(source, DatasetFile):
            with open(source.path, "rb") as file:
                source = pickle.load(file)
        producer = _Producer(conn, source, config)
        producer.run()
    except _Shutdown:
        pass
    except BaseException as error:
        exit_code = 1
        where = (producer.where if producer is not None
                 else "while unpickling the dataset")
        try:
            conn.send(("failed", WorkerFailure.capture(error, where)))
        except (OSError, EOFError):
            pass  # the host is gone: nobody left to tell
        # A failed loader's workers get no graceful shutdown: freeing a torch
        # DataLoader iterator would wait seconds for them.
        _stop_children()
    finally:
        if producer is not None:
            producer.close()
        conn.close()
    producer = source = None  # frees the dataset and what it holds
    _exit_now(exit_code)


def _stop_children() -> None:
    """Terminate and reap the processes the dataset started (torch's workers)."""
    for child in multiprocessing.active_children():
        child.terminate()
        child.join()


def _exit_now(exit_code: int) -> None:
    """Close the processes the dataset started, then exit without the
    interpreter's teardown, which takes over a second with torch loaded."""
    if multiprocessing.active_children():
        # A torch DataLoader shuts its worker processes down when it is freed;
        # collect it in case it sits in a reference cycle.
        gc.collect()
    _stop_children()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code)
