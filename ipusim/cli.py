"""The ``ipusim`` command: run PopTorch scripts on the simulator, read their profiles.

``ipusim run`` hands a script to the PopTorch shim's runner; ``report``,
``summary`` and ``trace`` re-render a saved autoReport directory without
simulating again.
"""
from __future__ import annotations

import argparse
import os
import sys
from contextlib import contextmanager
from pathlib import Path

REPORT_DIR_ENV = "IPUSIM_REPORT_DIR"
PROGRESS_ENV = "IPUSIM_PROGRESS"
TIMING_ONLY_ENV = "IPUSIM_TIMING_ONLY"
SIMULATED_CLOCK_ENV = "IPUSIM_SIMULATED_CLOCK"

_DESCRIPTION = """\
Simulate Graphcore IPU systems running real PopTorch programs, and read the
profiles they write. Timings are simulated (SimPy model of IPUs, host links,
IPU-Links and sync groups); the numerics are real torch computed on the CPU."""

_EXAMPLES = """\
examples:
  ipusim run --report reports/ scenarios/tutorial_data_loading.py
        run a PopTorch script; every model writes reports/<training|inference|name>/
  ipusim run --report reports/ --timing-only train.py --replicas 4 --synthetic-data
        everything after the script goes to the script
  ipusim run --simulated-clock tutorial.py
        the script's own time.time() timings give the simulated IPUs' figures
  ipusim summary reports/training
        print the text summary: target, memory per IPU, cycles per step, verdict
  ipusim report reports/training --output /tmp/training.html
        re-render the HTML report (pipeline timeline, utilisation, memory)
  ipusim trace reports/training --output /tmp/training.json
        write the Chrome trace again (open it in https://ui.perfetto.dev)

A profile directory holds profile.json, events.csv.gz, trace.json, report.html
and summary.txt (see ipusim.report.autoreport)."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``ipusim`` and its sub-commands."""
    parser = argparse.ArgumentParser(
        prog="ipusim", description=_DESCRIPTION, epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    run = commands.add_parser(
        "run", help="run a PopTorch script on the simulated IPUs",
        usage="ipusim run [-h] [--report DIR] [--timing-only] [--no-progress] "
              "[--simulated-clock] SCRIPT [SCRIPT_ARGS ...]",
        description="Run SCRIPT as __main__ with `import poptorch` resolved to ipusim's\n"
                    "PopTorch shim. Everything after SCRIPT is passed to the script.",
        epilog="example: ipusim run --report reports/ train.py --epochs 1",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    run.add_argument("script", metavar="SCRIPT", help="the PopTorch script (.py) to run")
    run.add_argument("script_args", nargs=argparse.REMAINDER, metavar="SCRIPT_ARGS",
                     help="everything after SCRIPT goes to the script")
    run.add_argument("--report", metavar="DIR",
                     help="write an autoReport directory per model under DIR "
                          f"(sets {REPORT_DIR_ENV})")
    run.add_argument("--timing-only", action="store_true",
                     help="simulate without computing: measure each stage once on fake "
                          "tensors; outputs hold NaN and weights are not updated "
                          f"(sets {TIMING_ONLY_ENV}=1)")
    run.add_argument("--no-progress", action="store_true",
                     help="no progress bar of the simulated calls on stderr")
    run.add_argument("--simulated-clock", action="store_true",
                     help="on the script's time.time(), time.perf_counter() and "
                          "time.monotonic() each model call lasts its simulated duration, so "
                          "its own timings are the IPUs' (sets IPUSIM_SIMULATED_CLOCK=1)")
    run.set_defaults(handler=_run)

    sweep = commands.add_parser(
        "sweep", help="simulate every point of a design-space sweep (SPEC.toml)",
        description="Measure the spec's model once per stage signature (timing-only), then\n"
                    "simulate every point, recording each as it finishes; run it again to\n"
                    "resume. See poptorch_shim.sweep.spec for the spec's format.",
        epilog="example: ipusim sweep scenarios/sweeps/bert_large.toml --ray --report reports/",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    sweep.add_argument("spec", metavar="SPEC", help="the sweep spec (.toml)")
    sweep.add_argument("--output", "-o", metavar="FILE",
                       help="results file, .parquet or .csv (default: the spec's [sweep] output)")
    sweep.add_argument("--report", metavar="DIR", help="write the sweep report under DIR")
    sweep.add_argument("--report-points", choices=("pareto", "all", "none"), default="pareto",
                       help="which points get their own timeline report (default: pareto)")
    advise = commands.add_parser(
        "advise", help="the fastest configuration of a model that fits in memory",
        usage="ipusim advise [-h] [--ipus N] [--system PRESET] [options] SCRIPT [SCRIPT_ARGS ...]",
        description="Search replicas, micro-batch size and gradient accumulation (keeping the\n"
                    "global batch), recomputation and optimizer placement for SCRIPT's first\n"
                    "model (or a module:function factory), and print the fastest that fits\n"
                    "as poptorch.Options code, with the runners-up.",
        epilog="example: ipusim advise --ipus 16 --system bow scenarios/resnet50.py --size reduced",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    advise.add_argument("script", metavar="SCRIPT", help="a PopTorch script or module:function")
    advise.add_argument("script_args", nargs=argparse.REMAINDER, metavar="SCRIPT_ARGS",
                        help="everything after SCRIPT goes to the script")
    advise.add_argument("--ipus", type=int, default=16, help="IPUs of the machine (default: 16)")
    advise.add_argument("--system", choices=("bow", "mk2", "mk1"), default="bow",
                        help="the IPU (default: bow)")
    advise.add_argument("--top", type=int, default=5, help="runners-up to show (default: 5)")
    advise.add_argument("--trials", type=int, default=48,
                        help="configurations Optuna tries in a large space (default: 48)")
    advise.add_argument("--exhaustive-limit", type=int, default=64, metavar="N",
                        help="search exhaustively up to N configurations (default: 64)")
    for sub, handler in ((sweep, _sweep), (advise, _advise)):
        sub.add_argument("--workers", type=int, default=None, metavar="N",
                         help="local worker processes (default: one per core; 0: in this "
                              "process)")
        sub.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                         help="run on Ray: the cluster at ADDRESS, or a local Ray if none "
                              "(a bare --ray goes before another option, not before "
                              "SCRIPT or SPEC, which it would take for the address)")
        sub.add_argument("--no-progress", action="store_true", help="no progress bar")
        sub.set_defaults(handler=handler)

    for name, help_text, handler in (
            ("report", "re-render the HTML report of a saved profile directory", _report),
            ("summary", "print the text summary of a saved profile directory", _summary),
            ("trace", "write the Chrome trace of a saved profile directory", _trace)):
        sub = commands.add_parser(name, help=help_text, description=help_text[0].upper()
                                  + help_text[1:] + ", without simulating again.")
        sub.add_argument("profile_dir", metavar="PROFILE_DIR",
                         help="a directory written by ipusim's autoReport "
                              "(it holds profile.json and events.csv.gz)")
        if name != "summary":
            default = "report.html" if name == "report" else "trace.json"
            sub.add_argument("--output", "-o", metavar="FILE",
                             help=f"where to write it (default: PROFILE_DIR/{default})")
        if name == "report":
            sub.add_argument("--max-events-per-lane", type=int, default=20_000, metavar="N",
                             help="draw whole steps up to N events per timeline lane "
                                  "(default: 20000)")
        if name != "summary":
            sub.add_argument("--full-detail", action="store_true",
                             help="every event one by one (default: beyond 200,000 events, "
                                  "the edges of the first and last steps, the rest as "
                                  "aggregate boxes; or IPUSIM_TRACE_DETAIL=full)")
            sub.add_argument("--window", type=float, nargs=2, metavar=("START_US", "END_US"),
                             help="also show the events between these simulated times (µs) "
                                  "one by one")
        sub.set_defaults(handler=handler)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``ipusim`` console script and of ``python -m ipusim``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    if "--" in argv and argv[:1] != ["run"]:
        extra = argv[argv.index("--") + 1:]
        parser.error(f"only `ipusim run` passes arguments after -- (to the script), got "
                     f"{' '.join(extra)!r} for `ipusim {argv[0] if argv else ''}`")
    args = parser.parse_args(argv)
    if args.command == "run":  # the script's own errors keep their traceback
        if args.script_args[:1] == ["--"]:  # `SCRIPT -- ARGS`, as earlier versions wanted
            args.script_args = args.script_args[1:]
        if not Path(args.script).is_file():
            parser.exit(1, f"ipusim run: error: no such script: {args.script}\n")
        return args.handler(args)
    try:
        return args.handler(args)
    except (FileNotFoundError, ValueError) as error:
        parser.exit(1, f"ipusim {args.command}: error: {error}\n")


@contextmanager
def _environment(name: str, value: str | None):
    """Set an environment variable for the duration of the block (None: leave it alone)."""
    saved = os.environ.get(name)
    if value is not None:
        os.environ[name] = value
    try:
        yield
    finally:
        if value is not None:
            if saved is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = saved


def _run(args: argparse.Namespace) -> int:
    from poptorch_shim.runner import run_script

    report = str(Path(args.report).resolve()) if args.report else None
    if report:
        _check_writable(Path(report))
    progress = None if args.no_progress else "1"
    timing_only = "1" if args.timing_only else None
    clock = "1" if args.simulated_clock else None
    with _environment(REPORT_DIR_ENV, report), _environment(PROGRESS_ENV, progress), \
            _environment(TIMING_ONLY_ENV, timing_only), _environment(SIMULATED_CLOCK_ENV, clock):
        status = run_script(args.script, args.script_args)
    if report:
        written = sorted(path.parent for path in Path(report).glob("*/profile.json"))
        for directory in written:
            print(f"ipusim: profile written to {directory}", file=sys.stderr)
        if not written:
            print(f"ipusim: no model wrote a profile under {report} (did the script run a "
                  "poptorch model?)", file=sys.stderr)
    return status if isinstance(status, int) else 0


def _sweep(args: argparse.Namespace) -> int:
    from poptorch_shim.sweep.cli import run_sweep

    return run_sweep(args)


def _advise(args: argparse.Namespace) -> int:
    from poptorch_shim.sweep.cli import run_advise

    return run_advise(args)


def _check_writable(directory: Path) -> None:
    """Fail before the script runs if its reports could not be written."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / ".ipusim-write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise SystemExit(f"ipusim run: error: --report {directory}: cannot write reports "
                         f"there ({error.strerror or error})")


def _detail(args: argparse.Namespace):
    """The level of detail the --full-detail and --window options ask for."""
    from dataclasses import replace

    from ipusim.report.detail import Detail

    if args.window is not None and not args.window[0] < args.window[1]:
        raise ValueError(f"--window START_US END_US needs START_US < END_US, got "
                         f"{args.window[0]} {args.window[1]}")
    window = None if args.window is None else tuple(round(t * 10**6) for t in args.window)
    detail = Detail.from_environment()
    return replace(detail, full=args.full_detail or detail.full, window_ps=window)


def _load(directory: str):
    from ipusim.report import load_autoreport, load_profile

    return load_autoreport(directory), load_profile(directory)


def _report(args: argparse.Namespace) -> int:
    from ipusim.report import write_html

    if args.max_events_per_lane < 1:
        raise ValueError(f"--max-events-per-lane must be a positive integer, got "
                         f"{args.max_events_per_lane}")
    timeline, profile = _load(args.profile_dir)
    output = Path(args.output) if args.output else Path(args.profile_dir) / "report.html"
    write_html(timeline, output, loader_items_per_s=profile.get("loader_items_per_s"),
               title=Path(args.profile_dir).resolve().name,
               max_events_per_lane=args.max_events_per_lane, detail=_detail(args))
    print(output)
    return 0


def _summary(args: argparse.Namespace) -> int:
    from ipusim.report import text_summary

    timeline, profile = _load(args.profile_dir)
    print(text_summary(timeline, profile.get("loader_items_per_s"), profile.get("options")),
          end="")
    return 0


def _trace(args: argparse.Namespace) -> int:
    from ipusim.report import write_chrome_trace

    timeline, _ = _load(args.profile_dir)
    output = Path(args.output) if args.output else Path(args.profile_dir) / "trace.json"
    write_chrome_trace(timeline, output, detail=_detail(args))
    print(output)
    return 0
