"""The ring buffer an ``AsynchronousDataAccessor`` worker fills and its host
process reads: ``buffer_size`` slots, each big enough for one item, in one
shared-memory file that both processes map.

Memory layout (all offsets 64-byte aligned)::

    header (int64 words): min_epoch | shutdown | waiting | state[B] | epoch[B]
                          | passed[B] | length[B][L] | cost[B][3]
    slot 0: leaf 0 | leaf 1 | ... | leaf L-1
    slot 1: ...

``state[i]`` is FREE (the worker may write slot i), DATA (an item is ready)
or END (the epoch ended; the slot holds no data). ``epoch[i]`` says which
epoch the slot belongs to, ``length[i][j]`` the first-dimension length of leaf
j (a last batch may be shorter than the slot). ``passed[i]`` is 1 when some
leaves of the item are not in the slot: they were already in shared memory
and the worker passed them through its pipe instead (see ``worker.py``).
``cost[i]`` is what loading the item cost, in nanoseconds: the worker's CPU
time, its own time off the CPU, and its loader's worker processes' CPU time
(``loader_rate.StepCost``). The worker writes data, epoch, passed, lengths and
cost before it sets ``state``;
the host reads ``state`` first. Both are plain stores and loads of aligned
words, which x86-64's memory model keeps in program order; the host sets the
slot back to FREE when it has done with it.

``min_epoch`` and ``shutdown`` are the host's commands to the worker: the
lowest epoch the host will accept (a restart or the start of an epoch) and a
request to exit. The worker polls them, so no command queue is needed.
``waiting`` is up while the host blocks on its pipe for an item: the worker
then sends a wake-up message after it publishes one.

The file is created by the host and unlinked as soon as the worker has mapped
it: from then on nothing is left in /dev/shm even if both processes are
killed, and the memory is returned when the last mapping goes away.
"""
import ctypes
import os
import secrets
import tempfile

import torch

from poptorch_shim._data.item_structure import ItemLayout

FREE, DATA, END = 0, 1, 2

_ALIGN = 64
# From this size a leaf is copied into its slot with the C library's memmove:
# for large blocks it streams past the caches (non-temporal stores), so it
# moves a batch about 1.5x faster than ``Tensor.copy_`` on the worker's one
# thread. Smaller leaves keep ``copy_``, whose fixed cost is lower.
_MEMMOVE_MIN_BYTES = 1 << 20
_MIN_EPOCH, _SHUTDOWN, _WAITING, _CONTROL_WORDS = 0, 1, 2, 3
_COST_WORDS = 3  # a slot's cost: seconds of three kinds, as integer nanoseconds


def _aligned(size: int) -> int:
    return (size + _ALIGN - 1) // _ALIGN * _ALIGN


def _new_path() -> str:
    """A fresh file name in /dev/shm (or the temporary directory elsewhere)."""
    directory = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    return os.path.join(
        directory, f"ipusim-ring-{os.getpid()}-{secrets.token_hex(6)}")


def _check_room(directory: str, size: int, buffer_size: int) -> None:
    """Refuse a ring the shared-memory file system cannot hold: writing past
    its free space would kill the worker with SIGBUS instead."""
    stats = os.statvfs(directory)
    free = stats.f_bavail * stats.f_frsize
    if size > free:
        raise RuntimeError(
            f"The AsynchronousDataAccessor's ring buffer of {buffer_size} "
            f"slots needs {size / 2**20:.1f} MiB of shared memory but "
            f"{directory} has {free / 2**20:.1f} MiB free. Pass a smaller "
            "buffer_size (or batch size), or free some shared memory.")


def copy_into(view: torch.Tensor, leaf: torch.Tensor) -> None:
    """Copy ``leaf`` into ``view``, a part of a slot of the same dtype and
    shape: bytes for bytes when ``leaf`` is a large plain contiguous CPU
    tensor (as collated batches are), else element by element."""
    nbytes = view.nbytes
    if (nbytes >= _MEMMOVE_MIN_BYTES and type(leaf) is torch.Tensor
            and leaf.device.type == "cpu" and leaf.layout == torch.strided
            and leaf.dtype == view.dtype and leaf.shape == view.shape
            and leaf.is_contiguous() and view.is_contiguous()
            and not (leaf.is_conj() or leaf.is_neg() or leaf.is_quantized)):
        ctypes.memmove(view.data_ptr(), leaf.data_ptr(), nbytes)
    else:
        view.copy_(leaf)


class SharedRing:
    """Typed views of the ring buffer's shared-memory file."""

    def __init__(self, path: str, layout: ItemLayout, buffer_size: int,
                 memory: torch.Tensor):
        self.path = path
        self.buffer_size = buffer_size
        leaves = len(layout.leaves)
        self._state_at = _CONTROL_WORDS
        self._epoch_at = self._state_at + buffer_size
        self._passed_at = self._epoch_at + buffer_size
        self._length_at = self._passed_at + buffer_size
        self._leaves = leaves
        self._cost_at = self._length_at + buffer_size * leaves
        words = self._cost_at + buffer_size * _COST_WORDS
        # numpy views of the header: reading one word costs ~100 ns, which
        # keeps the polling loops of both processes cheap.
        self._header = memory[:words * 8].view(torch.int64).numpy()
        offset = _aligned(words * 8)
        self._slots: list[list[torch.Tensor]] = []
        for _ in range(buffer_size):
            views = []
            for spec in layout.leaves:
                raw = memory[offset:offset + spec.nbytes]
                views.append(raw.view(spec.dtype).view(spec.shape))
                offset += _aligned(spec.nbytes)
            self._slots.append(views)

    @staticmethod
    def size_in_bytes(layout: ItemLayout, buffer_size: int) -> int:
        """Bytes of the shared-memory file for ``layout`` and ``buffer_size``."""
        words = _CONTROL_WORDS + buffer_size * (3 + len(layout.leaves) + _COST_WORDS)
        slot = sum(_aligned(spec.nbytes) for spec in layout.leaves)
        return _aligned(words * 8) + buffer_size * slot

    @classmethod
    def create(cls, layout: ItemLayout, buffer_size: int) -> "SharedRing":
        """Create and map a new zeroed ring (every slot FREE)."""
        path = _new_path()
        size = cls.size_in_bytes(layout, buffer_size)
        _check_room(os.path.dirname(path), size, buffer_size)
        descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.ftruncate(descriptor, size)
        finally:
            os.close(descriptor)
        try:
            memory = torch.from_file(path, shared=True, size=size,
                                     dtype=torch.uint8)
        except BaseException:
            os.unlink(path)
            raise
        return cls(path, layout, buffer_size, memory)

    @classmethod
    def attach(cls, path: str, layout: ItemLayout,
               buffer_size: int) -> "SharedRing":
        """Map the ring another process created at ``path``."""
        size = cls.size_in_bytes(layout, buffer_size)
        memory = torch.from_file(path, shared=True, size=size, dtype=torch.uint8)
        return cls(path, layout, buffer_size, memory)

    def unlink(self) -> None:
        """Remove the file name; the mappings stay valid until released."""
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def release(self) -> None:
        """Drop this process's views (tensors handed out stay valid)."""
        self._slots = []
        self._header = None

    # Slots -----------------------------------------------------------------
    def state(self, index: int) -> int:
        return int(self._header[self._state_at + index])

    def epoch(self, index: int) -> int:
        return int(self._header[self._epoch_at + index])

    def passed(self, index: int) -> bool:
        """Whether leaves of slot ``index`` came through the worker's pipe."""
        return bool(self._header[self._passed_at + index])

    def lengths(self, index: int) -> list[int]:
        start = self._length_at + index * self._leaves
        return self._header[start:start + self._leaves].tolist()

    def cost(self, index: int) -> tuple[float, ...]:
        """What loading the item of slot ``index`` cost, seconds of each kind."""
        start = self._cost_at + index * _COST_WORDS
        return tuple(ns / 1e9 for ns in self._header[start:start + _COST_WORDS].tolist())

    def views(self, index: int) -> list[torch.Tensor]:
        """Full-size tensors over the leaves of slot ``index``."""
        return self._slots[index]

    def publish(self, index: int, kind: int, epoch: int, lengths: list[int],
                passed: bool = False, cost_s: tuple[float, ...] = (0.0,) * _COST_WORDS) -> None:
        """Hand slot ``index`` to the host: lengths, epoch, whether leaves were
        passed through the pipe and what loading the item cost (``cost_s``, seconds of
        each kind), then state."""
        start = self._length_at + index * self._leaves
        self._header[start:start + self._leaves] = lengths
        start = self._cost_at + index * _COST_WORDS
        self._header[start:start + _COST_WORDS] = [round(s * 1e9) for s in cost_s]
        self._header[self._epoch_at + index] = epoch
        self._header[self._passed_at + index] = int(passed)
        self._header[self._state_at + index] = kind

    def free(self, index: int) -> None:
        """Hand slot ``index`` back to the worker."""
        self._header[self._state_at + index] = FREE

    # Commands from the host --------------------------------------------------
    @property
    def min_epoch(self) -> int:
        return int(self._header[_MIN_EPOCH])

    @min_epoch.setter
    def min_epoch(self, epoch: int) -> None:
        self._header[_MIN_EPOCH] = epoch

    @property
    def shutdown_requested(self) -> bool:
        return bool(self._header[_SHUTDOWN])

    def request_shutdown(self) -> None:
        self._header[_SHUTDOWN] = 1

    @property
    def host_waiting(self) -> bool:
        return bool(self._header[_WAITING])

    @host_waiting.setter
    def host_waiting(self, waiting: bool) -> None:
        self._header[_WAITING] = int(waiting)
