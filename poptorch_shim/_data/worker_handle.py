"""The host's handle on an ``AsynchronousDataAccessor`` worker: it starts the
process, runs the start-up handshake, reports the worker's failures and, when
closed, stops the worker and releases the ring buffer.

It is kept apart from the accessor so that ``weakref.finalize`` can close it
when the accessor is garbage collected or the interpreter exits, without the
finalizer keeping the accessor alive.
"""
import collections
import contextlib
import logging
import multiprocessing
import os
import pickle
import tempfile
from typing import Any

from poptorch_shim._core import aliases as _aliases
from poptorch_shim._data import shared_leaves
from poptorch_shim._data.item_structure import ItemLayout
from poptorch_shim._data.ring_buffer import SharedRing
from poptorch_shim._data.worker import DatasetFile, WorkerConfig, worker_main
from poptorch_shim.enums import SharingStrategy
from poptorch_shim.errors import Error

# How long a worker asked to stop may take before it is sent SIGTERM. It only
# matters when the worker is inside a slow dataset call.
_JOIN_TIMEOUT_S = 5.0
# How often the host checks the worker is alive while it waits on the pipe.
_POLL_INTERVAL_S = 0.01

_poptorch_log = logging.getLogger("poptorch")

_START_METHODS = {SharingStrategy.Fork: "fork",
                  SharingStrategy.ForkServer: "forkserver"}


class WorkerHandle:
    """A started worker process, the pipe to it and the shared ring."""

    def __init__(self, process, conn):
        self.process = process
        self.pid = process.pid
        self.conn = conn
        self.ring: SharedRing | None = None
        self.layout: ItemLayout | None = None
        self._closed = False
        # (slot, epoch, leaves) passed by the worker, read ahead of their slot.
        self._passed: collections.deque[tuple] = collections.deque()
        self._socket = None  # the pipe as a socket, to receive descriptors
        self._unreceived: tuple | None = None  # a "leaves" message, its descriptors unread
        self._failure: Exception | None = None  # how the worker failed, once known
        self.exitcode: int | None = None  # how the worker ended, once closed

    @classmethod
    def start(cls, dataset: Any, config: WorkerConfig,
              strategy: SharingStrategy) -> "WorkerHandle":
        """Start a worker over ``dataset``; return once its ring is ready."""
        start_method = _START_METHODS.get(strategy, "spawn")
        context = multiprocessing.get_context(start_method)
        with contextlib.ExitStack() as stack:
            source = dataset
            if strategy == SharingStrategy.FileSystem:
                # Kept until the worker has loaded it (after the handshake).
                source = _pickle_to_file(dataset, stack, strategy)
            host_conn, worker_conn = context.Pipe(duplex=True)
            # The aliases first: unpickling them in a spawned worker installs
            # them before the dataset, whose module may `import poptorch`.
            process = context.Process(
                target=worker_main,
                args=(_aliases.for_child(), worker_conn, [source], config),
                name="AsynchronousDataAccessor worker")
            try:
                process.start()
            except BaseException as error:
                host_conn.close()
                if start_method != "fork" and isinstance(
                        error, (pickle.PicklingError, TypeError, AttributeError)):
                    raise _unpicklable(dataset, error, strategy) from error
                raise
            finally:
                worker_conn.close()
            # PopTorch's lines, which tools read the worker's id from.
            _poptorch_log.debug("AsynchronousDataAccessor parent process: %d", os.getpid())
            _poptorch_log.debug("AsynchronousDataAccessor worker process: %d", process.pid)
            handle = cls(process, host_conn)
            try:
                handle._handshake(config.buffer_size)
            except BaseException:
                handle.close()
                raise
        return handle

    def _handshake(self, buffer_size: int) -> None:
        """Receive the item layout, create the ring, wait until the worker
        has mapped it, then unlink its file."""
        self.layout = self._receive("layout")[1]
        self.ring = SharedRing.create(self.layout, buffer_size)
        self.conn.send(("ring", self.ring.path))
        self._receive("attached")
        self.ring.unlink()

    def _receive(self, expected: str) -> tuple:
        while True:
            if self.conn.poll(_POLL_INTERVAL_S):
                message = self._read_message()
                if message is None:
                    _raise_start_failure(self._died_error("during start-up"))
                if message[0] == "failed":
                    _raise_start_failure(message[1].to_exception())
                if message[0] == expected:
                    return message
            elif not self.process.is_alive():
                _raise_start_failure(self._died_error("during start-up"))

    def _read_message(self) -> tuple | None:
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            return None  # the worker closed its end of the pipe

    def wait(self, timeout_s: float) -> Exception | None:
        """Block until the worker sends a message or ``timeout_s`` passes.
        Return the worker's reported exception, or an error if it died
        without reporting one; None while it is healthy. Once found, the
        failure is returned at once on every later call."""
        if self._failure is None:
            self._failure = self._poll(timeout_s)
        return self._failure

    def _poll(self, timeout_s: float) -> Exception | None:
        if self.conn.poll(timeout_s):
            failure = self._drain()
            if failure is not None:
                return failure
        if self.process.is_alive():
            return None
        # It may have reported its failure just before exiting.
        return self._drain() or self._died_error("while loading")

    def passed_leaves(self, slot: int, epoch: int) -> dict[int, Any]:
        """The leaves the worker passed through the pipe for the item it
        published in ``slot``: it sends them before publishing, so they are
        in the pipe or already read. Raises the worker's failure if it
        failed before they could be read."""
        while not self._passed:
            failure = self.wait(_POLL_INTERVAL_S)
            if failure is not None and not self._passed:
                raise failure
        got_slot, got_epoch, leaves = self._passed.popleft()
        if (got_slot, got_epoch) != (slot, epoch):
            raise RuntimeError(
                f"AsynchronousDataAccessor: the worker passed the leaves of "
                f"slot {got_slot} (epoch {got_epoch}) when those of slot "
                f"{slot} (epoch {epoch}) were due; the ring is out of step.")
        return leaves

    def _drain(self) -> Exception | None:
        """Read every pending message; the failure if one is among them.
        Passed leaves are kept until their slot is read."""
        while True:
            if self._unreceived is not None and not self._receive_passed():
                return self._died_error("while loading")
            if not self.conn.poll():
                return None
            message = self._read_message()
            if message is None:
                return self._died_error("while loading")
            if message[0] == "failed":
                return message[1].to_exception()
            if message[0] == "leaves":
                # Remembered first: if Ctrl-C stops the receiving, the next
                # call receives the descriptors before reading a message.
                self._unreceived = message[1:]
            # Anything else is a wake-up: the caller looks at the ring.

    def _receive_passed(self) -> bool:
        """Receive the descriptors that follow a "leaves" message; False if
        the worker is gone."""
        slot, epoch, shapes = self._unreceived
        if self._socket is None:
            self._socket = shared_leaves.socket_of(self.conn)
        try:
            leaves = shared_leaves.receive(self._socket, shapes)
        except (EOFError, OSError):
            return False
        self._unreceived = None
        self._passed.append((slot, epoch, leaves))
        return True

    def _died_error(self, when: str) -> RuntimeError:
        self.process.join(_JOIN_TIMEOUT_S)  # it closed the pipe: let it exit
        code = self.process.exitcode
        if code is None:
            how = "closed its pipe but did not exit"
        elif code < 0:
            how = f"was killed by signal {-code}"
        else:
            how = f"exited with code {code}"
        return RuntimeError(
            f"The AsynchronousDataAccessor worker process (pid "
            f"{self.pid}) {how} {when} without reporting an error. "
            "Look above for its output (for example a dataset that could not "
            "be unpickled in the worker, or the kernel's out-of-memory killer).")

    def close(self) -> None:
        """Stop the worker, reap it and release the ring buffer. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self.ring is not None:
            self.ring.request_shutdown()
        self.conn.close()  # a worker still in the handshake sees EOF and exits
        if self._socket is not None:
            self._socket.close()
        self.process.join(_JOIN_TIMEOUT_S)
        if self.process.exitcode is None:
            self.process.terminate()
            self.process.join(_JOIN_TIMEOUT_S)
        if self.process.exitcode is None:
            self.process.kill()
            self.process.join()
        self.exitcode = self.process.exitcode  # negative: it had to be stopped by a signal
        self._passed.clear()
        self.process.close()
        if self.ring is not None:
            self.ring.unlink()
            self.ring.release()


def _raise_start_failure(cause: Exception) -> None:
    """Raise PopTorch's error for a worker that failed before its ring was
    ready (the first item, or the dataset, could not be loaded), the worker's
    own exception, with its traceback, as the cause and in the message."""
    raise Error("AsynchronousDataAccessor worker thread failed to start: "
                f"{cause}") from cause


def _pickle_to_file(dataset: Any, stack: contextlib.ExitStack,
                    strategy: SharingStrategy) -> DatasetFile:
    """Pickle ``dataset`` to a file that lives as long as ``stack``.

    On Linux the file has no name (``O_TMPFILE``): the worker opens it
    through ``/proc/<host pid>/fd``, and it is gone when the host closes it
    or dies, whatever signal kills it. Elsewhere it is a named file in a
    temporary directory, removed when ``stack`` closes.
    """
    try:
        fd = os.open(tempfile.gettempdir(), os.O_TMPFILE | os.O_RDWR, 0o600)
    except (AttributeError, OSError):  # no O_TMPFILE here, or not on this file system
        directory = stack.enter_context(tempfile.TemporaryDirectory(prefix="ipusim-dataset-"))
        path = os.path.join(directory, "dataset.pkl")
        file = open(path, "wb")
    else:
        stack.callback(os.close, fd)
        path = f"/proc/{os.getpid()}/fd/{fd}"
        file = os.fdopen(os.dup(fd), "wb")
    try:
        with file:
            pickle.dump(dataset, file, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, TypeError, AttributeError) as error:
        raise _unpicklable(dataset, error, strategy) from error
    return DatasetFile(path)


def _unpicklable(dataset: Any, error: BaseException,
                 strategy: SharingStrategy) -> pickle.PicklingError:
    return pickle.PicklingError(
        f"The AsynchronousDataAccessor cannot pickle the dataset (a "
        f"{type(dataset).__name__}): {type(error).__name__}: {error}. With "
        f"sharing_strategy=SharingStrategy.{strategy.name} its worker process "
        "is started with the 'spawn' method (as in PopTorch, to avoid the "
        "hangs OpenMP causes after fork()), so the dataset must be "
        "serializable by pickle: define its classes and functions at module "
        "level and keep lambdas, open files, locks and generators out of it "
        "(or rebuild them in __setstate__). In a script, also guard the entry "
        "point with `if __name__ == '__main__':`. "
        "sharing_strategy=SharingStrategy.Fork needs no pickling, at the risk "
        "of those hangs.")
