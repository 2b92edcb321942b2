"""Where a sweep's points are simulated: this process, local worker processes, or Ray.

Every backend takes ``(point id, design point)`` pairs and yields ``(point
id, row, seconds)`` as points finish, in whatever order they finish. Workers
run :func:`ipusim.explore.design_point.evaluate`, which imports only ipusim (but a
spawned worker imports the parent's main script, so a script that calls
:func:`~poptorch_shim.sweep.sweep` keeps it under ``if __name__ == "__main__":``). A
bounded number of points is in flight at a time, so an interrupted sweep
stops quickly; leaving the iteration early (Ctrl-C, an error) cancels what
is in flight and stops the workers, leaving no process behind.
"""
from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from importlib.util import find_spec

from ipusim.explore.design_point import DesignPoint, evaluate, evaluate_parts

Task = tuple[str, DesignPoint]
Result = tuple[str, dict, float]


class WorkersLost(RuntimeError):
    """Workers died (killed, or a Ray node lost): the points they held are not done."""


# Where a signal may stop a sweep. A handler that raises stops the main
# thread wherever it is, and inside concurrent.futures (waiting on futures,
# handing one out) that can leave a lock taken that the pool's own thread then
# waits for forever. So a signal handler calls :func:`interrupt`: inside those
# calls the exception is kept, and raised as soon as the call returns.
_deferring = 0
_deferred: list[BaseException] = []


def interrupt(error: BaseException) -> None:
    """Raise ``error`` (a signal handler's), now or as soon as it is safe."""
    if _deferring:
        if not _deferred:
            _deferred.append(error)
        return
    raise error


class _Deferred:
    """A region where :func:`interrupt` keeps its exception, raising it on leaving."""

    def __enter__(self) -> None:
        global _deferring
        _deferring += 1

    def __exit__(self, *exc_info) -> None:
        global _deferring
        _deferring -= 1
        if not _deferring and _deferred:
            raise _deferred.pop()


class InProcess:
    """Each point in turn in this process: no start-up, no parallelism."""

    name = "in-process"
    workers = 1

    def map_unordered(self, tasks: Iterable[Task]) -> Iterator[Result]:
        for key, point in tasks:
            row, seconds = evaluate(point)
            yield key, row, seconds


# A worker simulates on one core: numeric libraries' thread pools (which spin
# while idle) would only take cores from the other workers. Ray does the same.
_THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


# Each worker's setup, run by the builtin exec (a function of this module would
# make every worker import the shim, and torch with it). Workers leave Ctrl-C
# and a hang-up of the terminal to the parent, which stops them in order; and
# die with the parent however it ends (SIGKILL included): Linux sends them
# SIGKILL when it dies (prctl PR_SET_PDEATHSIG), and one whose parent is
# already gone exits at once. Nothing is left behind, and with every process
# that held it gone, multiprocessing's resource tracker removes the
# semaphores in /dev/shm. A worker's progress bars (tqdm) lock with a thread
# lock, not the named semaphore tqdm would make, which a worker ended by its
# parent could not remove (the resource tracker would, warning of a leak).
_WORKER_SETUP = """
import os, signal, sys, threading
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGHUP, signal.SIG_IGN)
try:
    import tqdm
    tqdm.tqdm.set_lock(threading.RLock())
except ImportError:
    pass
if sys.platform.startswith("linux"):
    import ctypes
    ctypes.CDLL(None).prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
if os.getppid() != {parent}:
    os._exit(1)
"""


class LocalProcesses:
    """Worker processes on this machine (spawned: no state shared with the
    parent), each on one thread (the spawned workers inherit the setting)."""

    name = "local"

    def __init__(self, workers: int | None = None):
        if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int)
                                    or workers < 1):
            raise ValueError(f"LocalProcesses: workers must be a positive integer, got "
                             f"{workers!r} (InProcess() runs the points in this process)")
        self.workers = workers or os.cpu_count() or 1

    def map_unordered(self, tasks: Iterable[Task]) -> Iterator[Result]:
        saved = {name: os.environ.get(name) for name in _THREAD_VARIABLES}
        os.environ.update({name: "1" for name, value in saved.items() if value is None})
        try:
            yield from self._run(tasks)
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)

    def _run(self, tasks: Iterable[Task]) -> Iterator[Result]:
        pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"),
                                   initializer=exec,
                                   initargs=(_WORKER_SETUP.format(parent=os.getpid()), {}))
        pending: dict[Future, str] = {}
        tasks = iter(tasks)
        finished = False
        try:
            while True:
                _check_workers(pool)
                while len(pending) < 2 * self.workers:
                    entry = next(tasks, None)
                    if entry is None:
                        break
                    with _Deferred():
                        future = pool.submit(evaluate, entry[1])
                    pending[future] = entry[0]
                if not pending:
                    finished = True
                    return
                # Not waiting long at a time: a signal kept while waiting is
                # raised within the timeout, however long the points take.
                with _Deferred():
                    done, _ = wait(pending, timeout=0.25, return_when=FIRST_COMPLETED)
                for future in done:
                    key = pending.pop(future)
                    row, seconds = future.result()
                    yield key, row, seconds
        except BrokenProcessPool as error:
            raise WorkersLost(f"a worker process died ({error}); the points it held are not "
                              "done") from None
        finally:
            if finished:
                pool.shutdown(wait=True)
            else:
                _stop(pool)


def _check_workers(pool: ProcessPoolExecutor) -> None:
    """Raise :class:`WorkersLost` if a worker has exited. The pool's own
    thread notices a death only when it next looks, so the sweep could end on
    the survivors first; the pool never retires a worker itself, so an exited
    one is a lost one, seen here before any more work is handed out."""
    for process in list((pool._processes or {}).values()):  # no public way to reach them
        if process.exitcode is not None:
            raise WorkersLost(f"a worker process died (pid {process.pid}, exit code "
                              f"{process.exitcode}); the points it held are not done")


def _stop(pool: ProcessPoolExecutor) -> None:
    """Cancel what is queued, end the workers now and return once every one
    has exited. The pool's thread reaps them (it joins each worker on its way
    out), so it is that thread this waits for: a second reaper racing it could
    return while a dead worker still looked alive. ``shutdown(wait=True)``
    cannot wait for it here, as ``shutdown(wait=False)`` forgot the thread."""
    processes = list((pool._processes or {}).values())  # no public way to reach them
    manager = pool._executor_manager_thread
    pool.shutdown(wait=False, cancel_futures=True)
    for process in processes:
        process.terminate()
    if manager is not None:
        manager.join()


# Ray's own processes die with the driver that started them, but not all of
# them (its agents outlive a killed driver): a watchdog the sweep starts with
# a local Ray is told their ids as they appear, and kills them if the sweep
# dies without saying it is done (its end of the pipe closes either way).
_RAY_WATCHDOG = """
import os, signal, sys
for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
    signal.signal(signum, signal.SIG_IGN)

def started(pid):
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[19]
    except OSError:
        return None

watched = {}
for line in sys.stdin:
    if line.strip() == "done":
        sys.exit(0)
    pid, start = line.split()
    watched[int(pid)] = start
for pid, start in watched.items():
    if started(pid) == start:  # the same process, not a later one given its id
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
"""


def _started(pid: int) -> str | None:
    """When a process started (its start time in /proc), or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[19]
    except OSError:
        return None


def _descendants(pid: int) -> set[int]:
    """The processes below ``pid`` (Linux: /proc)."""
    found, todo = set(), [pid]
    while todo:
        parent = todo.pop()
        try:
            with open(f"/proc/{parent}/task/{parent}/children") as children:
                listed = children.read().split()
        except OSError:
            continue
        for child in map(int, listed):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


class _Watchdog:
    """Kills the processes it is told about if this process dies before :meth:`done`."""

    def __init__(self):
        self._process = subprocess.Popen([sys.executable, "-c", _RAY_WATCHDOG],
                                         stdin=subprocess.PIPE, text=True,
                                         start_new_session=True)
        self._told: set[int] = set()
        self._looked = 0.0

    def watch_descendants(self, every_s: float = 0.0) -> None:
        """Tell it about this process's descendants (at most every ``every_s``)."""
        if time.monotonic() - self._looked < every_s:
            return
        self._looked = time.monotonic()
        try:
            for pid in _descendants(os.getpid()) - self._told - {self._process.pid}:
                start = _started(pid)
                if start is not None:
                    self._process.stdin.write(f"{pid} {start}\n")
                    self._told.add(pid)
            self._process.stdin.flush()
        except OSError:  # the watchdog is gone: nothing more to do
            pass

    def done(self) -> None:
        try:
            self._process.stdin.write("done\n")
            self._process.stdin.close()
        except OSError:
            pass
        self._process.wait()


class RayCluster:
    """Ray tasks on a running cluster (``address``) or a local Ray started
    here (``address`` None) and shut down when the sweep ends. Each measured
    work goes to the object store once; a point ships only its options."""

    name = "ray"

    def __init__(self, address: str | None = None, num_cpus: int | None = None):
        try:
            import ray
        except ImportError:
            raise RuntimeError("the Ray backend needs Ray: pip install 'ipusim[ray]'") from None
        if address and address.startswith("ray://") and find_spec("grpc") is None:
            raise RuntimeError(f"--ray {address} connects through Ray Client, which needs "
                               "ray[client] (grpcio): pip install 'ipusim[ray-client]'; or "
                               "give the cluster as HOST:PORT from one of its nodes")
        self._ray = ray
        self.address, self.num_cpus = address, num_cpus
        self._started = False
        self._watchdog: _Watchdog | None = None
        self.workers = num_cpus or 1

    def _start(self) -> None:
        ray = self._ray
        if ray.is_initialized():
            self.workers = int(ray.cluster_resources().get("CPU", 1))
            return
        import ipusim
        runtime_env = {"py_modules": [ipusim]} if self.address else None
        # Ray's driver replaces the handlers of SIGTERM (and others) with its
        # own, which abort the process: this one keeps its own, so that a
        # signal stops the sweep in order (Ray shut down, the resume hint).
        caught = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
        saved = {signum: signal.getsignal(signum) for signum in caught}
        ray.init(address=self.address, num_cpus=None if self.address else self.num_cpus,
                 runtime_env=runtime_env, include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
        for signum, handler in saved.items():
            if handler is not None:
                try:
                    signal.signal(signum, handler)
                except ValueError:  # not the main thread: Ray's handlers stay
                    break
        if sys.platform.startswith("linux"):
            self._watchdog = _Watchdog()
            self._watchdog.watch_descendants()
        self._started = True
        self.workers = int(ray.cluster_resources().get("CPU", 1))

    def map_unordered(self, tasks: Iterable[Task]) -> Iterator[Result]:
        ray = self._ray
        self._start()
        remote = ray.remote(num_cpus=1, max_retries=2)(evaluate_parts)
        works: dict[int, tuple[object, object]] = {}  # id(work) -> (work, its object ref)
        pending: dict[object, str] = {}
        tasks = iter(tasks)
        try:
            while True:
                for key, point in tasks:
                    if id(point.work) not in works:
                        works[id(point.work)] = (point.work, ray.put(point.work))
                    reference = works[id(point.work)][1]
                    pending[remote.remote(reference, point.run, point.system, point.cost_model,
                                          point.steps)] = key
                    if len(pending) >= 4 * self.workers:
                        break
                if not pending:
                    return
                done, _ = ray.wait(list(pending), num_returns=1)
                for reference in done:
                    key = pending.pop(reference)
                    try:
                        row, seconds = ray.get(reference)
                    except ray.exceptions.RayError as error:
                        raise WorkersLost(f"Ray lost the point's worker ({type(error).__name__}); "
                                          "the points in flight are not done") from None
                    yield key, row, seconds
                if self._watchdog is not None:  # Ray starts processes as it goes
                    self._watchdog.watch_descendants(every_s=2.0)
        finally:
            # A local Ray this sweep started goes down whole with its tasks: cancelling
            # them first races their replies, which Ray 2.60's driver can abort on
            # ("Tried to complete task that was not pending"), exit status 1.
            if self.address:
                for reference in pending:
                    ray.cancel(reference, force=True)
            if self._started:
                ray.shutdown()
                self._started = False
            if self._watchdog is not None:
                self._watchdog.done()
                self._watchdog = None
