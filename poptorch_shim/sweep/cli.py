"""``ipusim sweep`` and ``ipusim advise``: the command-line side of the sweep package.

:mod:`poptorch_shim.commands` parses the arguments and calls these lazily,
so the ``ipusim`` command imports nothing of the sweep until one of them runs.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from poptorch_shim.sweep.backends import InProcess, LocalProcesses, RayCluster, WorkersLost
from poptorch_shim.sweep.spec import ModelSource

INTERRUPTED = 130  # the shell's status for a command ended by Ctrl-C


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
    from poptorch_shim.sweep.run import THROUGHPUT, sweep

    spec = sweep_spec.load(args.spec)
    output = Path(args.output) if args.output else Path(spec.output) if spec.output else \
        Path(args.spec).with_suffix(".parquet")
    print(f"ipusim sweep: {len(spec.points())} points, results in {output}", file=sys.stderr)
    try:
        table = sweep(spec, output, backend(args), progress=not args.no_progress)
    except KeyboardInterrupt:
        print(f"\nipusim sweep: interrupted; the finished points are in {output}: run the "
              "same command to resume", file=sys.stderr)
        return INTERRUPTED
    except WorkersLost as error:
        print(f"ipusim sweep: error: {error}; the finished points are in {output}: run the "
              "same command to resume", file=sys.stderr)
        return 1
    failed = int(table["error"].notna().sum())
    fitting = table[table["error"].isna() & table["fits"].fillna(False).astype(bool)]
    print(f"{len(table)} points: {len(fitting)} fit, {len(table) - failed - len(fitting)} do "
          f"not fit, {failed} invalid")
    if len(fitting):
        settings = [c for c in table.columns[2:table.columns.get_loc("ipus")]]
        best = fitting.nlargest(5, THROUGHPUT)
        print(best[settings + ["ipus", THROUGHPUT, "memory_max(MB)"]].to_string(index=False))
    if args.report:
        from poptorch_shim.sweep.report import write_sweep_report

        page = write_sweep_report(spec, table, args.report, points=args.report_points)
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
        raise FileNotFoundError(f"no such script: {target} (give a PopTorch script or a model "
                                "factory as module:function)")
    if args.ipus < 1:
        raise ValueError(f"--ipus must be a positive integer, got {args.ipus}")
    try:
        advice = advise(source, args.ipus, args.system, args.top,
                        exhaustive_limit=args.exhaustive_limit, trials=args.trials,
                        backend=backend(args), progress=not args.no_progress)
    except KeyboardInterrupt:
        print("\nipusim advise: interrupted", file=sys.stderr)
        return INTERRUPTED
    print(describe(advice, args.ipus, args.system, args.top))
    return 0 if advice.settings is not None else 1
