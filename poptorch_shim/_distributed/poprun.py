"""``poprun``: run a PopTorch script as the instances of one distributed run.

``poprun --num-replicas R --num-instances I [--ipus-per-replica K]
[--only-output-from-instance N] COMMAND ...`` starts I processes on this host,
each owning R / I of the R replicas, with the environment PopRun gives its
instances: popdist's ``POPDIST_*`` variables and OpenMPI's
``OMPI_COMM_WORLD_*`` (which ``poptorch.Options.Distributed`` reads), plus a
torch.distributed rendezvous on loopback (``MASTER_ADDR``, ``MASTER_PORT``,
``RANK``, ``WORLD_SIZE``) through which the instances all-reduce gradients.
``python SCRIPT.py`` (or a bare ``SCRIPT.py``) runs through the shim runner
with the interpreter poprun runs in, so that ``import poptorch`` and
``import popdist`` resolve to the shim; any other command runs as given,
with the aliases on ``PYTHONPATH``. The other flags PopRun documents (``-vv``,
``--print-topology``, mpirun's ``-x``, the V-IPU ones...) are read in
:mod:`poptorch_shim._distributed.poprun_flags`.

Every output line is tagged ``[1,i]<stdout>:`` or ``[1,i]<stderr>:`` as
mpirun's ``--tag-output`` does. If an instance fails the others are stopped
(SIGTERM, then SIGKILL after a grace period) and poprun exits with its code;
Ctrl-C and SIGTERM are passed on to every instance. Each instance runs in
its own process group, which poprun kills before it exits, so no process of
the run outlives it.
"""
from __future__ import annotations

import collections
import ctypes
import os
import queue
import re
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from poptorch_shim._core.aliases import ALIASES
from poptorch_shim._core.run_settings import JOB_ID_ENV, available_ipus
from poptorch_shim._distributed.poprun_flags import Extras, extras, ignored_notice, parser

GRACE_SECONDS = 5.0  # between asking the instances to stop and killing them
REAP_SECONDS = 5.0  # how long poprun waits for killed processes to be gone
# An instance that fails on a lost connection to its peers may have failed
# because another one stopped: wait this long for the one that stopped first.
CULPRIT_SECONDS = 3.0
# What an instance's last words look like when it failed on a peer's account.
PEER_LOST = re.compile(r"gloo|connection (?:closed|reset) by peer|remote worker|"
                       r"ProcessGroup|DistBackendError|DistNetworkError", re.IGNORECASE)
_PYTHON = re.compile(r"python[0-9.]*$")
_PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class Layout:
    """How the replicas of the run are spread over its instances."""

    num_replicas: int
    num_instances: int
    ipus_per_replica: int = 1

    def __post_init__(self) -> None:
        if self.num_replicas % self.num_instances:
            raise ValueError(
                f"--num-replicas ({self.num_replicas}) must be divisible by --num-instances "
                f"({self.num_instances}): every instance owns the same number of replicas. "
                f"Choose a replica count that is a multiple of {self.num_instances}, or an "
                f"instance count that divides {self.num_replicas}.")
        needed, machine = self.num_replicas * self.ipus_per_replica, available_ipus()
        if needed > machine:
            raise ValueError(
                f"--num-replicas {self.num_replicas} x --ipus-per-replica "
                f"{self.ipus_per_replica} needs {needed} IPUs but the simulated machine has "
                f"{machine}; use fewer replicas or set IPUSIM_NUM_IPUS={needed}.")

    @property
    def local_replicas(self) -> int:
        return self.num_replicas // self.num_instances

    def environment(self, index: int, port: int) -> dict[str, str]:
        """What instance ``index`` finds in its environment (PopRun's and mpirun's
        variable names, and torch.distributed's rendezvous)."""
        values = {
            "POPDIST_NUM_TOTAL_REPLICAS": self.num_replicas,
            "POPDIST_NUM_LOCAL_REPLICAS": self.local_replicas,
            "POPDIST_REPLICA_INDEX_OFFSET": index * self.local_replicas,
            "POPDIST_NUM_IPUS_PER_REPLICA": self.ipus_per_replica,
            "POPDIST_UNIFORM_REPLICAS_PER_INSTANCE": 1,
            "POPDIST_LOCAL_INSTANCE_INDEX": index,  # every instance runs on this host
            "OMPI_COMM_WORLD_RANK": index, "OMPI_COMM_WORLD_SIZE": self.num_instances,
            "OMPI_COMM_WORLD_LOCAL_RANK": index, "OMPI_COMM_WORLD_LOCAL_SIZE": self.num_instances,
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": port,
            "RANK": index, "WORLD_SIZE": self.num_instances,
            "LOCAL_RANK": index, "LOCAL_WORLD_SIZE": self.num_instances,
        }
        return {name: str(value) for name, value in values.items()}


def child_command(command: list[str]) -> list[str]:
    """``command`` as an instance runs it: Python scripts through the shim runner."""
    if command[0].endswith(".py"):
        return [sys.executable, "-m", "poptorch_shim", *command]
    if _PYTHON.match(os.path.basename(command[0])):
        flags = []
        for position, word in enumerate(command[1:], start=1):
            if word in ("-m", "-c") or not word.startswith("-"):
                break
            flags.append(word)
        else:
            return list(command)
        if word.endswith(".py"):
            return [sys.executable, *flags, "-m", "poptorch_shim", *command[position:]]
    return list(command)


def child_environment(layout: Layout, index: int, port: int, job: str = "") -> dict[str, str]:
    env = dict(os.environ)
    env.update(layout.environment(index, port))
    env[JOB_ID_ENV] = job  # the instances' reports of this run belong together
    paths = [str(ALIASES)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                              if p and p != str(ALIASES)]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONUNBUFFERED"] = "1"  # lines reach poprun as they are printed
    loopback = _loopback_interface()
    if loopback is not None:
        env.setdefault("GLOO_SOCKET_IFNAME", loopback)  # gloo talks over loopback only
    return env


def _loopback_interface() -> str | None:
    """The name of the loopback network interface (lo on Linux, lo0 on macOS)."""
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        return None
    return next((name for name in names if name in ("lo", "lo0")), None)


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _die_with_parent():
    """For Popen's preexec_fn: have Linux kill the instance if poprun dies."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up before fork
    return lambda: prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def _live_members(groups: set[int]) -> list[int]:
    """The processes, zombies aside, whose process group is one of ``groups``.

    Read from /proc; where there is none (not Linux), signalling the group
    with signal 0 says whether any member remains.
    """
    proc = Path("/proc")
    if not proc.is_dir():
        live = []
        for group in groups:
            try:
                os.killpg(group, 0)
                live.append(group)
            except (ProcessLookupError, PermissionError):
                pass
        return live
    members = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone while we looked
        state, group = fields[0], int(fields[2])
        if group in groups and state not in ("Z", "X"):
            members.append(int(entry.name))
    return members


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def _describe(code: int) -> str:
    if code < 0:
        return f"was killed by {_signal_name(-code)}"
    return f"exited with code {code}"


class Run:
    """The instances of one poprun invocation, their output and their fate."""

    def __init__(self, layout: Layout, command: list[str], only_output_from: int | None,
                 wanted: Extras = Extras()):
        self.layout, self.command, self.only_output_from = layout, command, only_output_from
        self.wanted = wanted
        self.processes: list[subprocess.Popen] = []
        self.threads: list[threading.Thread] = []
        self.exits: queue.Queue[tuple[int, int]] = queue.Queue()
        self.lock = threading.Lock()
        self.stop_deadline: float | None = None
        self.signalled: int | None = None
        self.last_words: list[collections.deque] = []  # each instance's last stderr lines
        self.stderr_pumps: list[threading.Thread] = []

    # -- starting ------------------------------------------------------------
    def start(self) -> None:
        port, preexec, job = free_port(), _die_with_parent(), uuid.uuid4().hex
        layout, verbosity = self.layout, self.wanted.verbosity
        if verbosity:
            print(f"poprun: starting {layout.num_instances} instance(s) on this host, "
                  f"{layout.num_replicas} replica(s) ({layout.local_replicas} each) of "
                  f"{layout.ipus_per_replica} IPU(s): {shlex.join(self.command)}",
                  file=sys.stderr)
        # Every instance is started before any thread: forking is safest then.
        for index in range(layout.num_instances):
            env = child_environment(layout, index, port, job)
            env.update(self.wanted.environment)
            if verbosity > 1:
                shown = {**layout.environment(index, port), **self.wanted.environment}
                print(f"poprun: instance {index}: "
                      + " ".join(f"{name}={value}" for name, value in shown.items()),
                      file=sys.stderr)
            self.processes.append(subprocess.Popen(
                self.command, env=env,
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                start_new_session=True, preexec_fn=preexec))
        for index, process in enumerate(self.processes):
            self.last_words.append(collections.deque(maxlen=20))
            self._thread(self._pump, index, "stdout", process.stdout)
            self.stderr_pumps.append(self._thread(self._pump, index, "stderr", process.stderr))
            self._thread(self._watch, index, process)

    def _thread(self, target, *args) -> threading.Thread:
        thread = threading.Thread(target=target, args=args, daemon=True)
        thread.start()
        self.threads.append(thread)
        return thread

    def _pump(self, index: int, name: str, pipe: IO[bytes]) -> None:
        """Copy one instance's stream line by line, tagged, to poprun's own."""
        shown = self.only_output_from in (None, index)
        with pipe:
            for raw in iter(pipe.readline, b""):
                line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                if name == "stderr":
                    self.last_words[index].append(line)
                if not shown:
                    continue  # still read, or the instance would block on a full pipe
                sink = sys.stdout if name == "stdout" else sys.stderr
                with self.lock:
                    try:
                        sink.write(f"[1,{index}]<{name}>:{line}\n")
                        sink.flush()
                    except (BrokenPipeError, ValueError):
                        shown = False  # nobody reads poprun's output any more

    def _watch(self, index: int, process: subprocess.Popen) -> None:
        code = process.wait()
        if self.wanted.verbosity:
            with self.lock:
                print(f"poprun: instance {index} (pid {process.pid}) {_describe(code)}.",
                      file=sys.stderr)
        self.exits.put((index, code))

    # -- stopping --------------------------------------------------------------
    def _signal_all(self, signum: int) -> None:
        """Send ``signum`` to every instance's process group (its children too)."""
        for process in self.processes:
            try:
                os.killpg(process.pid, signum)
            except (ProcessLookupError, PermissionError):
                pass  # the group is gone already

    def stop(self, signum: int = signal.SIGTERM) -> None:
        """Ask every instance to stop; they are killed if still running after the grace."""
        if self.stop_deadline is None:
            self.stop_deadline = time.monotonic() + GRACE_SECONDS
        self._signal_all(signum)

    def _kill_leftovers(self) -> None:
        """SIGKILL what the instances left behind and wait until it is gone.

        A kill is delivered asynchronously: without the wait, poprun could
        return while a grandchild (a data loader worker, a shell's child) is
        still running.
        """
        groups = {process.pid for process in self.processes}
        deadline = time.monotonic() + REAP_SECONDS
        while True:
            self._signal_all(signal.SIGKILL)
            left = _live_members(groups)
            if not left:
                return
            if time.monotonic() > deadline:
                print(f"poprun: process(es) {', '.join(map(str, left))} of the run did not "
                      f"stop within {REAP_SECONDS:g} s of SIGKILL.", file=sys.stderr)
                return
            time.sleep(0.01)

    def abandon(self) -> None:
        """Kill and reap the instances started so far (when another could not start)."""
        self._signal_all(signal.SIGKILL)
        for process in self.processes:
            process.wait()

    def on_signal(self, signum: int, _frame) -> None:
        """Ctrl-C or SIGTERM to poprun: pass it on; a second one kills."""
        if self.signalled is not None:
            self._signal_all(signal.SIGKILL)
            return
        self.signalled = signum
        self.stop(signum)

    # -- waiting -------------------------------------------------------------------
    def _lost_its_peers(self, index: int) -> bool:
        """Whether instance ``index`` failed on a lost connection to the others
        (so perhaps because one of them stopped), by its last stderr lines."""
        self.stderr_pumps[index].join(timeout=1.0)  # its stderr ends as it exits
        return any(PEER_LOST.search(line) for line in self.last_words[index])

    def wait(self) -> int:
        """Wait for every instance; poprun's exit status.

        The instance blamed is the first to fail by its own doing: one that
        failed on a lost connection to its peers waits up to
        ``CULPRIT_SECONDS`` for another to fail first on its own account.
        """
        running, failure, suspect, finished = set(range(len(self.processes))), None, None, []
        while running:
            now = time.monotonic()
            if self.stop_deadline is not None and now > self.stop_deadline:
                self._signal_all(signal.SIGKILL)
                self.stop_deadline = float("inf")  # killed once is enough
            if failure is None and suspect is not None and now > suspect[2]:
                # Nobody else failed first: blame it, and stop those still running.
                failure, suspect = (suspect[0], suspect[1], sorted(running)), None
                self.stop()
            try:
                index, code = self.exits.get(timeout=0.1)
            except queue.Empty:
                continue
            running.discard(index)
            if code == 0:
                finished.append(index)
            elif failure is None and self.stop_deadline is None:
                if not self._lost_its_peers(index):
                    failure, suspect = (index, code, sorted(running)), None
                    self.stop()
                elif suspect is None:
                    suspect = (index, code, now + CULPRIT_SECONDS)
        if failure is None and suspect is not None:
            failure = (suspect[0], suspect[1], [])
        self._kill_leftovers()
        for thread in self.threads:
            thread.join(timeout=2.0)
        return self._report(failure, finished)

    def _report(self, failure: tuple[int, int, list[int]] | None, finished: list[int]) -> int:
        if failure is not None:
            index, code, stopped = failure
            others = f"; stopped instance(s) {', '.join(map(str, stopped))}" if stopped else ""
            why = ""
            if self._lost_its_peers(index):
                why = (" on a lost connection to the other instances (torch.distributed)"
                       + (f", after instance(s) {', '.join(map(str, finished))} had finished "
                          "with code 0: the instances ran different numbers of steps (each "
                          "must make as many calls to its model as the others)"
                          if finished else ""))
            print(f"poprun: instance {index} {_describe(code)}{why}{others}.", file=sys.stderr)
            return code if code > 0 else 128 - code
        if self.signalled is not None:
            print(f"poprun: interrupted by {_signal_name(self.signalled)}; stopped "
                  "every instance.", file=sys.stderr)
            return 128 + self.signalled
        return 0


@contextmanager
def forwarding_signals(run: Run) -> Iterator[None]:
    """Pass SIGINT and SIGTERM on to the instances while they run (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {signum: signal.signal(signum, run.on_signal)
             for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)


def launch(layout: Layout, command: list[str], only_output_from: int | None = None,
           wanted: Extras = Extras()) -> int:
    """Run ``command`` as the instances of ``layout``; poprun's exit status."""
    run = Run(layout, child_command(command), only_output_from, wanted)
    with forwarding_signals(run):
        try:
            run.start()
        except OSError as error:
            run.abandon()
            print(f"poprun: cannot run {command[0]!r}: {error.strerror}.", file=sys.stderr)
            return 127
        return run.wait()


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``poprun`` and ``python -m poptorch_shim._distributed.poprun``."""
    cli = parser()
    args = cli.parse_args(argv)
    if not args.command:
        cli.error("give the command each instance runs, e.g. poprun --num-replicas 2 "
                  "--num-instances 2 python train.py")
    try:
        layout = Layout(args.num_replicas, args.num_instances, args.ipus_per_replica)
    except ValueError as error:
        cli.error(str(error))
    only = args.only_output_from_instance
    if only is not None and not 0 <= only < layout.num_instances:
        cli.error(f"--only-output-from-instance must name an instance from 0 to "
                  f"{layout.num_instances - 1}, got {only}.")
    wanted = extras(args, cli)
    notice = ignored_notice(wanted)
    if notice is not None:
        print(notice, file=sys.stderr)
    if wanted.print_topology:
        print(topology(layout))
    return launch(layout, args.command, only, wanted)


def topology(layout: Layout) -> str:
    """The table ``--print-topology`` prints: each instance's replicas and IPUs."""
    rows = [("instance", "host", "replicas", "IPUs")]
    per, ipus = layout.local_replicas, layout.ipus_per_replica
    for index in range(layout.num_instances):
        first = index * per
        rows.append((str(index), socket.gethostname(), _span(first, first + per - 1),
                     _span(first * ipus, (first + per) * ipus - 1)))
    widths = [max(len(row[column]) for row in rows) for column in range(4)]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip()
                     for row in rows)


def _span(first: int, last: int) -> str:
    return str(first) if first == last else f"{first}-{last}"


if __name__ == "__main__":
    sys.exit(main())
