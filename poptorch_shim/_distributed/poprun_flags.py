"""poprun's command line: the flags Graphcore's PopRun documents.

What means something on one simulated host is honoured: the layout
(``--num-replicas``, ``--num-instances``, ``--ipus-per-replica``, which the
script's models are checked against), ``-v``/``-vv`` (what poprun does),
``--only-output-from-instance``, ``--print-topology``, and environment
forwarding (mpirun's ``-x NAME[=VALUE]``, in ``--mpi-global-args`` or
``--mpi-local-args`` or given to poprun itself). The rest (the V-IPU server
and partition, NUMA binding, remote hosts, the executable cache, other
mpirun arguments) is accepted as PopRun spells it and named once as ignored.
"""
from __future__ import annotations

import argparse
import shlex
import socket
from dataclasses import dataclass, field

# PopRun's flags that take a value and mean nothing here, with why.
IGNORED = {
    "--vipu-server-host": "no V-IPU server", "--vipu-server-port": "no V-IPU server",
    "--vipu-server-timeout": "no V-IPU server", "--vipu-partition": "no V-IPU partition",
    "--vipu-partition-attempts": "no V-IPU partition",
    "--vipu-allocation": "no V-IPU partition", "--vipu-cluster": "no V-IPU partition",
    "--update-partition": "no V-IPU partition", "--reset-partition": "no V-IPU partition",
    "--remove-partition": "no V-IPU partition", "--num-ilds": "one IPU-Link domain",
    "--numa-aware": "no NUMA binding", "--hostfile": "every instance runs on this host",
    "--executable-cache-path": "nothing is compiled to cache",
    "--offline-mode": "the IPUs are simulated",
}
_TRUE, _FALSE = ("yes", "true", "on", "1"), ("no", "false", "off", "0")
_LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")


def _count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def _switch(text: str) -> bool:
    """A PopRun boolean value: yes/no, true/false, on/off, 1/0."""
    if text.lower() in _TRUE + _FALSE:
        return text.lower() in _TRUE
    raise argparse.ArgumentTypeError(f"must be one of yes, no, true, false, on, off, 1, 0; "
                                     f"got {text!r}")


def _exported(text: str) -> tuple[str, str | None]:
    """mpirun's ``-x NAME=VALUE`` (set it) or ``-x NAME`` (pass this one on)."""
    name, equals, value = text.partition("=")
    if not name.isidentifier():
        raise argparse.ArgumentTypeError(f"-x takes NAME or NAME=VALUE, got {text!r}")
    return name, value if equals else None


def parser() -> argparse.ArgumentParser:
    cli = argparse.ArgumentParser(
        prog="poprun",
        description="Run COMMAND as the instances of a distributed PopTorch run on the ipusim "
                    "simulator: each instance owns num-replicas / num-instances replicas and "
                    "the instances all-reduce their gradients over loopback. PopRun's V-IPU, "
                    "NUMA, host and cache flags are accepted and ignored (said once).")
    cli.add_argument("--num-replicas", type=_count, required=True,
                     help="replicas over all instances")
    cli.add_argument("--num-instances", type=_count, default=1,
                     help="processes to start, each with num-replicas / num-instances replicas")
    cli.add_argument("--ipus-per-replica", type=_count, default=1,
                     help="IPUs of each replica; a model that needs another number is an error")
    cli.add_argument("--only-output-from-instance", type=int, metavar="N",
                     help="show the output of instance N only")
    cli.add_argument("--print-topology", type=_switch, default=False, metavar="yes|no",
                     help="print which replicas and IPUs each instance owns")
    cli.add_argument("-v", "--verbose", action="count", default=0,
                     help="say what poprun starts and how each instance ends (-vv: also each "
                          "instance's variables)")
    cli.add_argument("--vv", action="store_const", const=2, dest="very_verbose", default=0,
                     help="very verbose, as -vv")
    cli.add_argument("-x", action="append", type=_exported, default=[], metavar="NAME[=VALUE]",
                     dest="exports", help="set (or pass on) an environment variable in "
                                          "every instance, as mpirun's -x")
    cli.add_argument("--mpi-global-args", default="", metavar="ARGS",
                     help="mpirun arguments, given as --mpi-global-args=\"...\": -x NAME[=VALUE] "
                          "is honoured, the rest ignored")
    cli.add_argument("--mpi-local-args", default="", metavar="ARGS",
                     help="per-instance mpirun arguments, as --mpi-global-args")
    cli.add_argument("-H", "--host", metavar="HOSTS",
                     help="hosts of the instances: every instance runs on this one here")
    for flag in IGNORED:
        cli.add_argument(flag, metavar="ARG", help=f"ignored here ({IGNORED[flag]})")
    cli.add_argument("command", nargs=argparse.REMAINDER,
                     help="what each instance runs, e.g. python train.py --epochs 2")
    return cli


@dataclass(frozen=True)
class Extras:
    """What poprun's flags ask for beyond the layout."""

    verbosity: int = 0
    print_topology: bool = False
    environment: dict[str, str] = field(default_factory=dict)  # set in every instance
    ignored: tuple[str, ...] = ()  # the flags given that mean nothing here, as given


def extras(args: argparse.Namespace, cli: argparse.ArgumentParser) -> Extras:
    """Read the flags beyond the layout; a malformed mpirun argument is a usage error."""
    ignored = [f"{flag}={getattr(args, _dest(flag))}" for flag in IGNORED
               if getattr(args, _dest(flag)) is not None]
    if args.host is not None and any(host not in _LOCAL_HOSTS + (socket.gethostname(),)
                                     for host in args.host.split(",")):
        ignored.append(f"--host={args.host}")
    exports = list(args.exports)
    for flag in ("--mpi-global-args", "--mpi-local-args"):
        words = shlex.split(getattr(args, _dest(flag)))
        rest, index = [], 0
        while index < len(words):
            word = words[index]
            if word in ("-x", "--x"):
                if index + 1 == len(words):
                    cli.error(f"{flag}: -x needs NAME or NAME=VALUE")
                try:
                    exports.append(_exported(words[index + 1]))
                except argparse.ArgumentTypeError as error:
                    cli.error(f"{flag}: {error}")
                index += 2
                continue
            if word != "--tag-output":  # poprun tags every line already
                rest.append(word)
            index += 1
        if rest:
            ignored.append(f"{flag}={shlex.join(rest)!r}")
    environment = {name: value for name, value in exports if value is not None}
    return Extras(verbosity=max(args.verbose, args.very_verbose),
                  print_topology=args.print_topology, environment=environment,
                  ignored=tuple(ignored))


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def ignored_notice(extras_: Extras) -> str | None:
    """The one line that names the flags poprun accepted and ignores here."""
    if not extras_.ignored:
        return None
    return (f"poprun: ignoring {', '.join(extras_.ignored)}: the simulator runs every "
            "instance on this host, with no V-IPU server, partition, NUMA binding or "
            "executable cache.")
