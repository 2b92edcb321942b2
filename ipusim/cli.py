"""The ``ipusim`` command: read the profiles simulated runs wrote.

``report``, ``summary`` and ``trace`` re-render a saved autoReport directory
without simulating again; ``compare`` puts two of them side by side. The
commands that run PopTorch scripts (``run``, ``sweep``, ``advise``) belong to
the PopTorch shim, the layer above: the ``ipusim`` console script is the
shim's :mod:`poptorch_shim.commands`, which adds them to this parser;
``python -m ipusim`` adds those an installed package declares under the
``ipusim.commands`` entry point group.
"""
from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

#: Adds sub-commands to ``ipusim``'s parser (given its sub-parsers).
CommandsExtension = Callable[["argparse._SubParsersAction"], None]

ENTRY_POINT_GROUP = "ipusim.commands"
# Commands of ipusim's own; any other is looked for in the installed extensions.
OWN_COMMANDS = ("report", "summary", "trace", "compare")
# Commands the PopTorch shim adds, named in the error when none is installed.
SHIM_COMMANDS = ("run", "sweep", "advise")

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
  ipusim report --index reports/
        write reports/index.html: every report under reports/, its figures, a link
  ipusim trace reports/training --output /tmp/training.json
        write the Chrome trace again (open it in https://ui.perfetto.dev)
  ipusim trace reports/training --hta reports/training/hta
        and a PyTorch profiler trace per IPU, for HolisticTraceAnalysis
  ipusim compare before/training after/training
        what got faster, and why: throughput and step time of both, the step-time
        difference by part (compute, exchange, host I/O, sync, bubble, round trip),
        per IPU, the settings and operators that differ; writes after/training/compare.html

A profile directory holds profile.json, events.csv.gz, trace.json, report.html
and summary.txt (see ipusim.report.autoreport). run, sweep and advise come with
the PopTorch shim (poptorch_shim.commands)."""


def build_parser(extensions: Sequence[CommandsExtension] = ()) -> argparse.ArgumentParser:
    """The argument parser of ``ipusim``: its own sub-commands and those each
    of ``extensions`` adds."""
    parser = argparse.ArgumentParser(
        prog="ipusim", description=_DESCRIPTION, epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

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
            sub.add_argument("--output", "-o", metavar="FILE", type=path_argument,
                             help=f"where to write it (default: PROFILE_DIR/{default})")
        if name == "trace":
            sub.add_argument("--hta", metavar="DIR", type=path_argument,
                             help="also write a PyTorch profiler trace per IPU (rank-N.json) "
                                  "to DIR, for HolisticTraceAnalysis: "
                                  "hta.trace_analysis.TraceAnalysis(trace_dir=DIR)")
        if name == "report":
            sub.add_argument("--max-events-per-lane", type=int, metavar="N",
                             help="draw whole steps up to N events per timeline lane "
                                  "(default: 20000)")
            sub.add_argument("--index", action="store_true",
                             help="PROFILE_DIR is a folder of reports: write its index.html, "
                                  "every report under it with its figures and a link")
        if name != "summary":
            sub.add_argument("--full-detail", action="store_true",
                             help="every event one by one (default: beyond 200,000 events, "
                                  "the edges of the first and last steps, the rest as "
                                  "aggregate boxes; or IPUSIM_TRACE_DETAIL=full)")
            sub.add_argument("--window", type=float, nargs=2, metavar=("START_US", "END_US"),
                             help="also show the events between these simulated times (µs) "
                                  "one by one")
        sub.set_defaults(handler=handler)
    _add_compare(commands)
    for extend in extensions:
        extend(commands)
    return parser


_COMPARE_EPILOG = """\
examples:
  ipusim compare reports/tutorial_data_loading/tutorial_r1_real \
                 reports/tutorial_data_loading/tutorial_r4_real
        one replica against four: prints the comparison, writes
        reports/tutorial_data_loading/tutorial_r4_real/compare.html
  ipusim compare old/training/profile.json new/training -o /tmp/compare.html
  ipusim run --report new/ --compare-with old/ train.py
        the same, at the end of a run, for each model the run wrote

The parts of the step time are each the mean over a run's IPUs of the time an
IPU spends in them per step (span / steps), so they add up to the step time and
their differences to the difference of the step times."""


def _add_compare(commands: argparse._SubParsersAction) -> None:
    sub = commands.add_parser(
        "compare", help="compare two saved runs: what got faster, and why",
        description="Compare run B with run A, both saved autoReport directories: throughput\n"
                    "and step time with their ratio, the step-time difference by part as a\n"
                    "waterfall, per IPU, the settings and the operators that differ. Prints\n"
                    "a text summary and writes one self-contained HTML page.",
        epilog=_COMPARE_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    for name, what in (("a", "the run to compare with (the earlier one)"),
                       ("b", "the run compared (the later one)")):
        sub.add_argument(name, metavar=name.upper(),
                         help=f"{what}: an autoReport directory, or its profile.json")
    sub.add_argument("--output", "-o", metavar="FILE", type=path_argument,
                     help="where to write the page (a folder, or a name ending in /: "
                          "FILE/compare.html; default: B/compare.html)")
    sub.set_defaults(handler=_compare)


def path_argument(text: str) -> str:
    """An argparse type: a path, which an empty string is not (argparse names the option)."""
    if not text:
        raise argparse.ArgumentTypeError("expected a path, got an empty string")
    return text


def output_file(given: str, default_name: str) -> Path:
    """The file an ``--output`` names: ``given`` itself, or ``given/default_name`` where
    ``given`` is a folder or ends in a slash. Raises ValueError where a file stands in
    the way of a folder the path needs."""
    path = Path(given)
    if path.is_dir() or given.endswith(("/", os.sep)):
        path = path / default_name
    blocking = next((parent for parent in path.parents if parent.exists()), None)
    if blocking is not None and not blocking.is_dir():
        raise ValueError(f"--output {given}: {blocking} is a file, not a folder to write "
                         f"{path.name} into")
    return path


def main(argv: list[str] | None = None,
         extensions: Sequence[CommandsExtension] | None = None) -> int:
    """Entry point of ``python -m ipusim`` (and, with the shim's commands as
    ``extensions``, of the ``ipusim`` console script).

    ``extensions``: None for those installed packages declare, looked up only
    when the command is not one of ipusim's own.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if extensions is None:
        extensions = () if argv[:1] and argv[0] in OWN_COMMANDS else installed_extensions()
    parser = build_parser(extensions)
    command = argv[0] if argv else ""
    if command in SHIM_COMMANDS and not extensions:
        parser.exit(2, f"ipusim: `ipusim {command}` comes with the PopTorch shim: use the "
                       f"`ipusim` console script, or `python -m poptorch_shim.commands "
                       f"{command} ...`\n")
    if "--" in argv and not _passes_script_arguments(parser, command):
        extra = argv[argv.index("--") + 1:]
        parser.error(f"only `ipusim run` passes arguments after -- (to the script), got "
                     f"{' '.join(extra)!r} for `ipusim {command}`")
    args = parser.parse_args(argv)
    if getattr(args, "keeps_traceback", False):  # a script's own errors keep their traceback
        return args.handler(args)
    try:
        return args.handler(args)
    except (OSError, ValueError) as error:
        parser.exit(1, f"ipusim {args.command}: error: {_cause(error)}\n")
    except Exception as error:  # noqa: BLE001 - a damaged profile: one line, no traceback
        # compare reads its two runs itself, naming the one it cannot read.
        if args.command not in OWN_COMMANDS or not hasattr(args, "profile_dir"):
            raise
        parser.exit(1, f"ipusim {args.command}: error: {args.profile_dir} cannot be read "
                       f"back: {type(error).__name__}: {error}\n")


def _cause(error: Exception) -> str:
    """An error as one line: an OSError as the file and what went wrong with it."""
    if isinstance(error, OSError) and error.filename is not None and error.strerror:
        return f"{error.filename}: {error.strerror}"
    return " ".join(str(error).split()) or type(error).__name__


def installed_extensions() -> list[CommandsExtension]:
    """The commands installed packages add to ``ipusim``: the functions their
    ``ipusim.commands`` entry points name (one that cannot be imported is
    named on stderr and left out)."""
    from importlib.metadata import entry_points

    found = []
    for entry in entry_points(group=ENTRY_POINT_GROUP):
        try:
            found.append(entry.load())
        except ImportError as error:
            print(f"ipusim: left out the commands of {entry.value}: {error}", file=sys.stderr)
    return found


def _passes_script_arguments(parser: argparse.ArgumentParser, command: str) -> bool:
    """Whether ``command`` hands what follows ``--`` to a script (``ipusim run``)."""
    commands = next(action for action in parser._actions
                    if isinstance(action, argparse._SubParsersAction))
    sub = commands.choices.get(command)
    return sub is not None and bool(sub.get_default("passes_script_arguments"))


def _detail(args: argparse.Namespace):
    """The level of detail the --full-detail and --window options ask for."""
    from dataclasses import replace

    from ipusim.report.detail import Detail

    if args.window is not None and not args.window[0] < args.window[1]:
        raise ValueError(f"--window START_US END_US needs START_US < END_US, got "
                         f"{args.window[0]} {args.window[1]}")
    if args.window is not None and not all(math.isfinite(t) for t in args.window):
        raise ValueError(f"--window START_US END_US needs finite times, got "
                         f"{args.window[0]} {args.window[1]}")
    window = None if args.window is None else tuple(round(t * 10**6) for t in args.window)
    detail = Detail.from_environment()
    return replace(detail, full=args.full_detail or detail.full, window_ps=window)


def _load(directory: str):
    from ipusim.report.autoreport import load_report

    return load_report(directory)


def _report(args: argparse.Namespace) -> int:
    from ipusim.report import write_html
    from ipusim.report.autoreport import profile_names, saved_loader_spread, saved_verdict
    from ipusim.report.figures import MAX_EVENTS_PER_LANE

    if args.index:
        return _index(args)
    limit = MAX_EVENTS_PER_LANE if args.max_events_per_lane is None else \
        args.max_events_per_lane
    if limit < 1:
        raise ValueError(f"--max-events-per-lane must be a positive integer, got {limit}")
    timeline, profile = _load(args.profile_dir)
    output = Path(args.output) if args.output else Path(args.profile_dir) / "report.html"
    write_html(timeline, output, loader_items_per_s=profile.get("loader_items_per_s"),
               loader_spread=saved_loader_spread(profile),
               title=Path(args.profile_dir).resolve().name,
               max_events_per_lane=limit, detail=_detail(args),
               names=profile_names(profile), verdict=saved_verdict(profile),
               timing_only=profile.get("timing_only") is True)
    print(output)
    return 0


def _index(args: argparse.Namespace) -> int:
    from ipusim.report.index_page import write_index

    if args.output is not None:
        raise ValueError(f"--index writes index.html into {args.profile_dir} itself, where its "
                         f"links start from: leave out --output ({args.output})")
    # The index draws no timeline: options about one's detail would do nothing.
    ignored = [option for option, given in (
        ("--full-detail", args.full_detail), ("--window", args.window is not None),
        ("--max-events-per-lane", args.max_events_per_lane is not None)) if given]
    if ignored:
        raise ValueError(f"--index writes a page of links and figures, with no timeline: "
                         f"{', '.join(ignored)} would change nothing, leave "
                         f"{'it' if len(ignored) == 1 else 'them'} out (or give "
                         f"{'it' if len(ignored) == 1 else 'them'} to `ipusim report` of "
                         f"one report)")
    print(write_index(args.profile_dir))
    return 0


def _summary(args: argparse.Namespace) -> int:
    from ipusim.report import text_summary
    from ipusim.report.autoreport import profile_names, saved_loader_spread, saved_verdict

    timeline, profile = _load(args.profile_dir)
    print(text_summary(timeline, profile.get("loader_items_per_s"), profile.get("options"),
                       verdict=saved_verdict(profile), names=profile_names(profile),
                       loader_spread=saved_loader_spread(profile),
                       timing_only=profile.get("timing_only") is True), end="")
    return 0


def _trace(args: argparse.Namespace) -> int:
    from ipusim.report import write_chrome_trace
    from ipusim.report.chrome_trace import host_slices_in

    if args.hta and Path(args.hta).exists() and not Path(args.hta).is_dir():
        raise ValueError(f"--hta needs a folder to write a trace per IPU into (rank-N.json, "
                         f"as HolisticTraceAnalysis reads them): {args.hta} is a file")
    timeline, _ = _load(args.profile_dir)
    output = Path(args.output) if args.output else Path(args.profile_dir) / "trace.json"
    detail = _detail(args)
    # The run's tracepoints are in the trace it wrote, not in the profile: keep them.
    kept = host_slices_in(Path(args.profile_dir) / "trace.json")
    write_chrome_trace(timeline, output, detail=detail, host_slices=kept)
    print(output)
    if args.hta:
        from ipusim.report.kineto_trace import write_kineto_traces

        written = write_kineto_traces(timeline, args.hta, detail)
        print(f"{args.hta} ({len(written)} rank files)")
    return 0


def _compare(args: argparse.Namespace) -> int:
    from ipusim.analysis.comparison import compare
    from ipusim.report.compare import (
        COMPARE_HTML,
        comparison_text,
        load_run,
        write_comparison_html,
    )

    runs = []
    for label, path in (("A", args.a), ("B", args.b)):
        try:
            runs.append(load_run(path))
        except (OSError, ValueError) as error:  # bad input: named, exit status 2
            print(f"ipusim compare: error: {label}: {_cause(error)}", file=sys.stderr)
            return 2
    output = output_file(args.output, COMPARE_HTML) if args.output else \
        runs[1].path / COMPARE_HTML
    comparison = compare(*runs)
    print(comparison_text(comparison), end="", flush=True)
    write_comparison_html(comparison, output)
    print(f"\nPage: {output}")
    return 0
