"""``poptorch.AsynchronousDataAccessor``: load a dataset in a separate
process, ahead of the consumer, through a ring buffer in shared memory."""
import dataclasses
import multiprocessing
import numbers
import os
import weakref
from typing import Any

import torch

from poptorch_shim._data.item_structure import unflatten
from poptorch_shim._data.loader_rate import StepCost
from poptorch_shim._data.ring_buffer import DATA, END, FREE
from poptorch_shim._data.worker import WorkerConfig
from poptorch_shim._data.worker_handle import WorkerHandle
from poptorch_shim.enums import SharingStrategy

# The longest the consumer blocks on the worker's pipe before it looks at the
# ring and checks that the worker is alive again. The worker wakes it up as
# soon as it publishes an item, so this only bounds the wait when a wake-up
# crosses the raising of the waiting flag, and how soon a worker that died
# without closing the pipe is noticed.
_WAKE_UP_TIMEOUT_S = 0.002


class AsynchronousDataAccessor:
    """A data loader that runs the data loading in a separate process, so that
    the next items are prepared on the CPU while the current one is used.

    The worker process copies each item into a ring buffer of ``buffer_size``
    slots in shared memory, allocated from the shapes and dtypes of the first
    item; the consumer reads ready slots in order. As in PopTorch, the
    tensors returned by ``next()`` are views of a slot, not copies: they stay
    valid until the next item is requested (``next()`` or ``iter()``), after
    which the worker may overwrite them. This avoids copying every batch a
    second time; call ``.clone()`` on what must outlive the step. A large
    tensor that reaches the worker in shared memory already (a batch the
    workers of a ``DataLoader`` collated) is not copied into the slot at
    all: the host maps the same memory, and that tensor stays valid.

    Items may be tensors, Python ``int``/``float``/``bool`` values, tuples,
    lists and dicts of them, or objects of a type registered with
    ``poptorch.registerCustomArgParser`` (rebuilt on this side by its
    parser), with the same structure and shapes every time (only the first
    dimension of a last batch may be shorter). A tensor whose dtype torch
    promotes to the first item's (int64 labels after float32 ones) is
    converted into the slot, as PopTorch's copy into its buffer converts it;
    one that would lose values (float into int) is refused.

    .. important:: Unless ``sharing_strategy`` is ``SharingStrategy.Fork``
        the worker is started with the ``spawn`` method, to avoid the hangs
        OpenMP causes after ``fork()``, so the dataset must be serializable by
        pickle and a script must guard its entry point with
        ``if __name__ == '__main__':``.

    A dataset that raises in the worker makes ``next()`` raise the same
    exception type, with the worker's message and traceback; one that fails
    before the first item is in the ring makes the constructor raise
    PopTorch's ``poptorch.Error`` ("AsynchronousDataAccessor worker thread
    failed to start"), the worker's exception as its cause. The worker stops
    when ``terminate()`` is called, when the accessor is garbage collected,
    when the interpreter exits, or when its parent process dies.
    """

    def __init__(self,
                 dataset: Any,
                 buffer_size: int = 3,
                 miss_sleep_time_in_ms: float = 0.1,
                 load_indefinitely: bool = True,
                 early_preload: bool = False,
                 sharing_strategy: SharingStrategy = SharingStrategy.FileSystem,
                 rebatched_size: int | None = None):
        """
        :param dataset: The dataset to pull data from: any picklable Python
            iterable, typically a ``poptorch.DataLoader``.
        :param buffer_size: The number of slots of the ring buffer.
        :param miss_sleep_time_in_ms: How long the worker sleeps before it
            looks again when the buffer is full (0 to spin).
        :param load_indefinitely: If True the worker starts the next epoch as
            soon as it reaches the end of the dataset, instead of waiting for
            ``iter()`` to be called again.
        :param early_preload: If True the worker fills the buffer as soon as
            it is created; if False it loads the first item (to size the
            buffer) and then waits for an iterator to be created.
        :param sharing_strategy: How the dataset reaches the worker:
            ``FileSystem`` pickles it to a temporary file, ``SharedMemory``
            pickles it through the start-up pipe (tensors by shared memory),
            ``Fork`` and ``ForkServer`` use those start methods instead.
        :param rebatched_size: If not None, the worker concatenates the
            batches it reads along their first dimension and hands out
            batches of exactly this size.
        """
        _check_arguments(buffer_size, miss_sleep_time_in_ms, sharing_strategy,
                         rebatched_size)
        if isinstance(getattr(dataset, "_accessor", None),
                      AsynchronousDataAccessor):
            raise RuntimeError(
                "The DataLoader already uses an AsynchronousDataAccessor "
                "internally. Either iterate over the DataLoader itself or "
                "create it with mode=poptorch.DataLoaderMode.Sync.")
        self.rebatched_size = rebatched_size
        self._dataset = dataset
        config = WorkerConfig(
            buffer_size=buffer_size,
            miss_sleep_time_in_ms=float(miss_sleep_time_in_ms),
            load_indefinitely=bool(load_indefinitely),
            early_preload=bool(early_preload),
            rebatched_size=rebatched_size,
            rebatched_drop_last=bool(
                getattr(dataset, "rebatched_drop_last", True)),
            parent_pid=os.getpid(),
            start_method=(multiprocessing.get_start_method(allow_none=True)
                          or multiprocessing.get_all_start_methods()[0]))
        handle = WorkerHandle.start(dataset, config, sharing_strategy)
        self._handle = handle
        self._ring = handle.ring
        self._layout = handle.layout
        self._finalizer = weakref.finalize(self, handle.close)
        self._epoch = 1        # the epoch the consumer reads
        self._requested = 0    # the last epoch the worker was told to load
        self._read = 0         # the slot read next
        self._held: int | None = None  # the slot whose views are out
        self._consumed = False  # an item of the current epoch was returned
        self._ended = False     # the current iteration reached the end
        self._worker_error: Exception | None = None  # reported, not raised
        self._failure: Exception | None = None  # raised: the accessor stopped
        # What loading the item last returned cost, as the worker noted it.
        self.last_cost = StepCost()

    @property
    def worker_pid(self) -> int:
        """The process id of the worker process."""
        return self._handle.pid

    @property
    def _worker(self) -> "_WorkerView | None":
        """What scripts and PopTorch's own tests read of PopTorch's private
        worker handle: ``_worker._data_buffers.indices_mem``, which slots of
        the ring hold an item ready to read; None once terminated."""
        if not self._finalizer.alive:
            return None
        return _WorkerView(_RingFlags(self._ring))

    def terminate(self) -> None:
        """Stop the worker process and free the ring buffer. Tensors already
        returned stay valid. Safe to call more than once."""
        self._held = None
        self._finalizer()

    def __len__(self) -> int:
        dataset_len = len(self._dataset)
        # A DataLoader that owns this accessor already counts rebatched steps.
        if self.rebatched_size and \
                getattr(self._dataset, "_accessor", None) is not self:
            batch_size = getattr(self._dataset, "batch_size", None) or 1
            dataset_len = dataset_len * batch_size // self.rebatched_size
        return dataset_len

    def __iter__(self) -> "AsynchronousDataAccessor":
        self._check_usable()
        self._release_held()
        if self._consumed:
            # Partway through an epoch: abandon it and start a fresh one.
            self._epoch += 1
        self._consumed = False
        self._ended = False
        self._request_current_epoch()
        return self

    def __next__(self) -> Any:
        self._check_usable()
        self._release_held()
        if self._ended:
            raise StopIteration
        self._request_current_epoch()
        ring = self._ring
        while True:
            slot = self._read
            state = ring.state(slot)
            if state == FREE:
                self._wait(slot)
                continue
            if ring.epoch(slot) < self._epoch:
                self._discard(slot)  # left over from an abandoned epoch
                continue
            if state == END:
                self._discard(slot)
                self._epoch += 1
                self._consumed = False
                self._ended = True
                raise StopIteration
            item = self._item(slot)  # first: Ctrl-C in it leaves the slot unread
            self.last_cost = StepCost(*ring.cost(slot))
            self._read = (slot + 1) % ring.buffer_size
            self._held = slot
            self._consumed = True
            return item

    def _item(self, slot: int) -> Any:
        passed = self._passed_leaves(slot)
        leaves = []
        for index, (view, spec, length) in enumerate(zip(
                self._ring.views(slot), self._layout.leaves,
                self._ring.lengths(slot))):
            if index in passed:
                view = passed[index]
            elif spec.batched and length != spec.shape[0]:
                view = view[:length]
            leaves.append(view)
        return unflatten(self._layout.tree, leaves, self._layout.templates)

    def _passed_leaves(self, slot: int) -> dict[int, Any]:
        """The leaves of ``slot``'s item that the worker passed through its
        pipe instead of copying them into the slot."""
        ring = self._ring
        if not ring.passed(slot):
            return {}
        try:
            return self._handle.passed_leaves(slot, ring.epoch(slot))
        except Exception as error:
            self._failure = error
            self.terminate()
            raise

    def _discard(self, slot: int) -> None:
        self._passed_leaves(slot)
        self._ring.free(slot)
        self._read = (slot + 1) % self._ring.buffer_size

    def _release_held(self) -> None:
        if self._held is not None:
            self._ring.free(self._held)
            self._held = None

    def _request_current_epoch(self) -> None:
        if self._requested < self._epoch:
            self._ring.min_epoch = self._epoch
            self._requested = self._epoch

    def _wait(self, slot: int) -> None:
        """Block until the worker may have filled ``slot``. Once the worker
        has failed, raise its error when the slot is still empty: it
        published every item it loaded before it reported the failure."""
        if self._worker_error is not None:
            self._failure = self._worker_error
            self.terminate()
            raise self._failure
        ring = self._ring
        ring.host_waiting = True
        try:
            # Look again once the flag is up, or an item published in between
            # would never be announced.
            if ring.state(slot) == FREE:
                self._worker_error = self._handle.wait(_WAKE_UP_TIMEOUT_S)
        finally:
            ring.host_waiting = False

    def _check_usable(self) -> None:
        if self._failure is not None:
            raise RuntimeError(
                "This AsynchronousDataAccessor stopped when its worker failed "
                f"({type(self._failure).__name__}, raised earlier). Create a "
                "new one to load data again.") from self._failure
        if not self._finalizer.alive:
            raise RuntimeError(
                "This AsynchronousDataAccessor was terminated: terminate() "
                "stopped its worker. Create a new one to load data again.")


class _RingFlags:
    """PopTorch's ``_data_buffers``: ``indices_mem`` is a tensor with a 1 for
    each slot of the ring that holds an item the host has not read yet, read
    from the ring when asked."""

    def __init__(self, ring):
        self._ring = ring

    @property
    def indices_mem(self) -> torch.Tensor:
        ring = self._ring
        return torch.tensor([int(ring.state(slot) == DATA)
                             for slot in range(ring.buffer_size)], dtype=torch.int32)


@dataclasses.dataclass(frozen=True)
class _WorkerView:
    """PopTorch's ``AsynchronousDataAccessor._worker``, as far as it is read."""
    _data_buffers: _RingFlags


def _check_arguments(buffer_size, miss_sleep_time_in_ms, sharing_strategy,
                     rebatched_size) -> None:
    if isinstance(buffer_size, bool) or not isinstance(buffer_size, int) \
            or buffer_size < 1:
        raise ValueError(
            f"AsynchronousDataAccessor: buffer_size must be an int >= 1, got "
            f"{buffer_size!r}. It is the number of items loaded ahead.")
    if isinstance(miss_sleep_time_in_ms, bool) or not isinstance(
            miss_sleep_time_in_ms, numbers.Real) or miss_sleep_time_in_ms < 0:
        raise ValueError(
            "AsynchronousDataAccessor: miss_sleep_time_in_ms must be a number "
            f">= 0, got {miss_sleep_time_in_ms!r}. Pass 0 to make the worker "
            "spin when the buffer is full.")
    if not isinstance(sharing_strategy, SharingStrategy):
        raise TypeError(
            "AsynchronousDataAccessor: sharing_strategy must be a "
            "poptorch.SharingStrategy (" +
            ", ".join(member.name for member in SharingStrategy) +
            f"), got {sharing_strategy!r}.")
    if rebatched_size is not None and (
            isinstance(rebatched_size, bool)
            or not isinstance(rebatched_size, int) or rebatched_size < 2):
        raise ValueError(
            "AsynchronousDataAccessor: rebatched_size must be None or an int "
            f"greater than 1, got {rebatched_size!r}.")
