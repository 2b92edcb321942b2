"""``ipusim sweep`` and ``ipusim advise``: the command-line side of the sweep package.

:mod:`poptorch_shim.commands` parses the arguments and calls these lazily,
so the ``ipusim`` command imports nothing of the sweep until one of them runs.
Every failure ends in one ``ipusim sweep: error: ...`` (or ``ipusim advise:
error: ...``) line naming the file and the cause. SIGTERM and SIGHUP stop a
sweep as Ctrl-C does: its workers are stopped, and it says how to resume.
"""
from __future__ import annotations

import argparse
import contextlib
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

from ipusim.explore.design_point import accepted, outcomes
from poptorch_shim.sweep.backends import (
    InProcess,
    LocalProcesses,
    RayCluster,
    WorkersLost,
    interrupt,
)
from poptorch_shim.sweep.spec import ModelSource

INTERRUPTED = 130  # the shell's status for a command ended by Ctrl-C
# A sweep of more points than this is refused: its points would not fit in
# memory, let alone be simulated; a sample of the grid is what it needs.
MAX_POINTS = 1_000_000


class Stopped(KeyboardInterrupt):
    """The command got SIGTERM or SIGHUP: it stops as on Ctrl-C."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def stopped_by_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP raise :class:`Stopped`, and Ctrl-C KeyboardInterrupt, in
    the main thread while in the block, where the sweep can stop in order
    (:func:`~poptorch_shim.sweep.backends.interrupt`); signals after the first
    are ignored, so that they do not cut the stopping short."""
    stopping = []

    def handler(signum, frame):
        if stopping:
            return
        stopping.append(signum)
        interrupt(KeyboardInterrupt() if signum == signal.SIGINT else Stopped(signum))

    caught = [signal.SIGTERM, signal.SIGHUP]
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not if ignored
        caught.append(signal.SIGINT)
    saved = {signum: signal.signal(signum, handler) for signum in caught}
    try:
        yield
    finally:
        for signum, previous in saved.items():
            signal.signal(signum, previous)


def _status(interrupt: KeyboardInterrupt) -> tuple[str, int]:
    """How the command was stopped, in words, and its exit status."""
    if isinstance(interrupt, Stopped):
        return f"stopped by {signal.Signals(interrupt.signum).name}", 128 + interrupt.signum
    return "interrupted", INTERRUPTED


def _fail(command: str, message: str) -> int:
    print(f"ipusim {command}: error: {message}", file=sys.stderr)
    return 1


def backend(args: argparse.Namespace):
    """The backend the arguments ask for: Ray, this process (``--workers 0``)
    or local worker processes."""
    if args.ray is not None:
        try:
            return RayCluster(args.ray or None)
        except RuntimeError as error:  # Ray is not installed
            raise SystemExit(f"ipusim {args.command}: error: {error}") from None
    if args.workers == 0:
        return InProcess()
    return LocalProcesses(args.workers)


def run_sweep(args: argparse.Namespace) -> int:
    """``ipusim sweep SPEC.toml``: run (or resume) the sweep, print its best points."""
    from poptorch_shim.sweep import spec as sweep_spec

    try:
        spec = sweep_spec.load(args.spec)
    except (OSError, ValueError) as error:
        return _fail("sweep", str(error))
    if spec.size > MAX_POINTS:
        return _fail("sweep", f"{args.spec}: {spec.size:,} points (the product of the [space] "
                              f"axes' lengths) is more than {MAX_POINTS:,}: give [sweep] "
                              "sample = N to sweep a sample of the grid")
    output = Path(args.output) if args.output else Path(spec.output) if spec.output else \
        Path(args.spec).with_suffix(".parquet")
    with stopped_by_signals():
        return _sweep(args, spec, output)


def _sweep(args: argparse.Namespace, spec, output: Path) -> int:
    from poptorch_shim.sweep.run import THROUGHPUT, sweep

    resume = f"the finished points are in {output}: run the same command to resume"
    print(f"ipusim sweep: {spec.size:,} points, results in {output}", file=sys.stderr)
    try:
        table = sweep(spec, output, backend(args), progress=not args.no_progress)
    except KeyboardInterrupt as interrupt:
        how, status = _status(interrupt)
        print(f"\nipusim sweep: {how}; {resume}", file=sys.stderr)
        return status
    except WorkersLost as error:
        return _fail("sweep", f"{error}; {resume}")
    except (OSError, ValueError) as error:  # the model, the spec or the results file
        return _fail("sweep", f"{args.spec}: {error}")
    for reason, count in sorted(table.attrs.get("dropped", {}).items()):
        print(f"ipusim sweep: {count} recorded point(s) of {output} computed again: {reason}",
              file=sys.stderr)
    counts = outcomes(table)
    fitting = table[accepted(table)]
    print(f"{len(table)} points: {counts['fit']} fit, {counts['do not fit']} do not fit, "
          f"{counts['invalid']} invalid")
    if len(fitting):
        settings = [c for c in table.columns[2:table.columns.get_loc("ipus")]]
        best = fitting.nlargest(5, THROUGHPUT)
        print(best[settings + ["ipus", THROUGHPUT, "memory_max(MB)"]].to_string(index=False))
    if args.report:
        from poptorch_shim.sweep.report import write_sweep_report

        try:
            page = write_sweep_report(spec, table, args.report, points=args.report_points)
        except OSError as error:
            return _fail("sweep", f"--report {args.report}: cannot write the report "
                                  f"({error.strerror or error})")
        print(f"ipusim sweep: report written to {page}", file=sys.stderr)
    return 0


def run_advise(args: argparse.Namespace) -> int:
    """``ipusim advise SCRIPT``: the fastest configuration that fits, as code."""
    from poptorch_shim.sweep.advisor import advise, describe

    target = args.script
    if Path(target).is_file():
        source = ModelSource(script=str(Path(target).resolve()), args=tuple(args.script_args))
    elif ":" in target:
        source = ModelSource(factory=target)
    else:
        return _fail("advise", f"no such script: {target} (give a PopTorch script or a model "
                               "factory as module:function)")
    if args.ipus < 1:
        return _fail("advise", f"--ipus must be a positive integer, got {args.ipus}")
    try:
        with stopped_by_signals():
            advice = advise(source, args.ipus, args.system, args.top,
                            exhaustive_limit=args.exhaustive_limit, trials=args.trials,
                            backend=backend(args), progress=not args.no_progress)
    except KeyboardInterrupt as interrupt:
        how, status = _status(interrupt)
        print(f"\nipusim advise: {how}", file=sys.stderr)
        return status
    except WorkersLost as error:
        return _fail("advise", str(error))
    except (OSError, ValueError, RuntimeError) as error:  # the model, or Optuna missing
        return _fail("advise", f"{target}: {error}")
    print(describe(advice, args.ipus, args.system, args.top))
    return 0 if advice.settings is not None else 1
