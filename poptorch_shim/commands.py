"""The ``ipusim`` commands that run PopTorch scripts: ``run``, ``sweep`` and ``advise``,
and ``alias``, which makes ``import poptorch`` the shim in a whole environment.

They live with the shim, the layer that runs torch code; :func:`add_commands`
adds them to the parser of :mod:`ipusim.cli` (which reads saved profiles),
and :func:`main` is the ``ipusim`` console script: both together. The
command-line flags become the run's :class:`~poptorch_shim._core.run_settings.RunSettings`,
handed to the runner as an argument. ``python -m poptorch_shim.commands`` is the
same command without the console script. From Python, :func:`run_script` with a
:class:`RunSettings` does what ``ipusim run`` does, and :func:`install_aliases`
makes ``import poptorch`` resolve to the shim.
"""
from __future__ import annotations

import argparse
import re
import sys
import time
from dataclasses import replace
from pathlib import Path

from ipusim import cli
from poptorch_shim._core.run_settings import (
    REPORT_DIR_ENV,
    SIMULATED_CLOCK_ENV,
    TIMING_ONLY_ENV,
    RunSettings,
)
from poptorch_shim._run import model_reports
from poptorch_shim._run.runner import install_aliases, print_script_error, run_script

__all__ = ["RunSettings", "add_commands", "install_aliases", "main", "run_script"]


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``ipusim`` console script: ipusim's commands and the shim's."""
    return cli.main(argv, extensions=[add_commands])


def add_commands(commands: argparse._SubParsersAction) -> None:
    """Add ``run``, ``sweep``, ``advise`` and ``alias`` to ``ipusim``'s sub-parsers."""
    run = commands.add_parser(
        "run", help="run a PopTorch script on the simulated IPUs",
        usage="ipusim run [-h] [--report DIR] [--compare-with DIR] [--timing-only] "
              "[--no-progress] [--simulated-clock] SCRIPT [SCRIPT_ARGS ...]",
        description="Run SCRIPT as __main__ with `import poptorch` resolved to ipusim's\n"
                    "PopTorch shim. Everything after SCRIPT is passed to the script.",
        epilog="examples:\n"
               "  ipusim run --report reports/ train.py --epochs 1\n"
               "  ipusim run --report new/ --compare-with old/ train.py\n"
               "        then what got faster, and why: each model's report against the one\n"
               "        of its name in old/ (ipusim compare), a page beside the new report",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_script(run, "the PopTorch script (.py) to run")
    run.add_argument("--report", metavar="DIR", type=cli.path_argument,
                     help="write an autoReport directory per model under DIR "
                          f"(or set {REPORT_DIR_ENV})")
    run.add_argument("--compare-with", metavar="DIR", type=cli.path_argument,
                     help="at the end, compare the report the run wrote with DIR, an earlier "
                          "report folder (or an earlier --report directory: each model with "
                          "the one of its name): prints the comparison and writes "
                          "compare.html beside the new report; needs --report")
    run.add_argument("--timing-only", action="store_true",
                     help="simulate without computing: measure each stage once on fake "
                          "tensors; outputs hold NaN and weights are not updated "
                          f"(or set {TIMING_ONLY_ENV}=1)")
    run.add_argument("--no-progress", action="store_true",
                     help="no progress bar of the simulated calls on stderr")
    run.add_argument("--simulated-clock", action="store_true",
                     help="on the script's time.time(), time.perf_counter() and "
                          "time.monotonic() each model call lasts its simulated duration, so "
                          f"its own timings are the IPUs' (or set {SIMULATED_CLOCK_ENV}=1)")
    run.set_defaults(handler=_run, passes_script_arguments=True, keeps_traceback=True)

    sweep = _add_ray_command(
        commands, "sweep", help="simulate every point of a design-space sweep (SPEC.toml)",
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
    advise = _add_ray_command(
        commands, "advise", help="the fastest configuration of a model that fits in memory",
        usage="ipusim advise [-h] [--ipus N] [--system PRESET] [options] SCRIPT [SCRIPT_ARGS ...]",
        description="Search replicas, micro-batch size and gradient accumulation (keeping the\n"
                    "global batch), recomputation and optimizer placement for SCRIPT's first\n"
                    "model (or a module:function factory), and print the fastest that fits\n"
                    "as poptorch.Options code, with the runners-up.",
        epilog="example: ipusim advise --ipus 16 --system bow scenarios/resnet50.py --size reduced",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_script(advise, "a PopTorch script or module:function")
    advise.add_argument("--ipus", type=_at_least(1), default=16,
                        help="IPUs of the machine (default: 16)")
    advise.add_argument("--system", choices=("bow", "mk2", "mk1"), default="bow",
                        help="the IPU (default: bow)")
    advise.add_argument("--top", type=_at_least(1), default=5,
                        help="runners-up to show (default: 5)")
    advise.add_argument("--trials", type=_at_least(1), default=48,
                        help="configurations Optuna tries in a large space (default: 48)")
    advise.add_argument("--exhaustive-limit", type=_at_least(1), default=64, metavar="N",
                        help="search exhaustively up to N configurations (default: 64)")
    alias = commands.add_parser(
        "alias", help="make `import poptorch` mean the shim in this whole environment",
        description="install: write a .pth file into this environment's site-packages so that\n"
                    "every interpreter of it (pytest, notebooks, spawned workers) imports\n"
                    "ipusim's PopTorch shim as `poptorch`, `popdist` and `popart`; refused\n"
                    "where a real PopTorch is installed. remove: delete that file. status: say\n"
                    "which is on.",
        epilog="example: .venv/bin/ipusim alias install && .venv/bin/python -m pytest tests/",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    alias.add_argument("action", choices=("install", "remove", "status"))
    alias.add_argument("--site-packages", metavar="DIR", default=None, type=cli.path_argument,
                       help="the site-packages folder (default: this interpreter's, "
                            "the venv's in a venv)")
    alias.set_defaults(handler=_alias)
    for sub, handler in ((sweep, _sweep), (advise, _advise)):
        sub.add_argument("--workers", type=_at_least(0), default=None, metavar="N",
                         help="local worker processes (default: one per core; 0: in this "
                              "process)")
        sub.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                         help="run on Ray: the cluster at ADDRESS (auto, HOST:PORT or "
                              "ray://HOST:PORT), or a local Ray if none")
        sub.add_argument("--no-progress", action="store_true", help="no progress bar")
        sub.set_defaults(handler=handler)


# What ray.init takes for an address: "auto", "local", HOST:PORT or a URL (ray://HOST:PORT).
_RAY_ADDRESS = re.compile(r"auto|local|\w+://\S+|\S+:\d+")
# A model factory, "module:function", as `ipusim advise` takes one.
_FACTORY = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")


def _names_the_input(word: str) -> bool:
    """Whether ``word`` after a bare ``--ray`` is the command's SPEC or SCRIPT, not an
    address: not one, and a file, a ``.toml`` or ``.py`` name or a ``module:function``."""
    return not _RAY_ADDRESS.fullmatch(word) and (
        Path(word).is_file() or word.endswith((".toml", ".py")) or bool(_FACTORY.fullmatch(word)))


class _RayCommandParser(argparse.ArgumentParser):
    """The parser of a command with ``--ray [ADDRESS]``: a bare ``--ray`` before the
    command's SPEC or SCRIPT is a local Ray, not an address (``--ray SPEC`` is read
    as ``--ray= SPEC``). Only the options before SPEC or SCRIPT are looked at: what
    follows a script is its own."""

    def parse_known_args(self, args=None, namespace=None):
        args = list(sys.argv[1:] if args is None else args)
        index = 0
        while index < len(args) and args[index].startswith("-") and args[index] != "--":
            word, following = args[index], args[index + 1:index + 2]
            if word == "--ray" and following and _names_the_input(following[0]):
                args[index] = "--ray="
                break
            if word == "--ray":  # with an address, or bare before another option
                takes_a_value = bool(following and _RAY_ADDRESS.fullmatch(following[0]))
            else:
                action = self._option_string_actions.get(word)
                takes_a_value = action is not None and action.nargs is None
            index += 2 if takes_a_value else 1
        return super().parse_known_args(args, namespace)


def _add_ray_command(commands: argparse._SubParsersAction, name: str,
                     **kwargs) -> argparse.ArgumentParser:
    """``commands.add_parser(name, ...)`` for a command that takes ``--ray [ADDRESS]``."""
    parser = commands.add_parser(name, **kwargs)
    parser.__class__ = _RayCommandParser  # argparse makes every sub-parser of one class
    return parser


def _at_least(minimum: int):
    """An argparse type: an integer of at least ``minimum`` (argparse names the option)."""
    def number(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    number.__name__ = "integer"
    return number


def _add_script(parser: argparse.ArgumentParser, what: str) -> None:
    """SCRIPT, and everything after it as the script's own arguments."""
    parser.add_argument("script", metavar="SCRIPT", help=what)
    parser.add_argument("script_args", nargs=argparse.REMAINDER, metavar="SCRIPT_ARGS",
                        help="everything after SCRIPT goes to the script")


def run_settings_of(args: argparse.Namespace) -> RunSettings:
    """The settings ``ipusim run``'s flags give, over those of the environment."""
    settings = RunSettings.from_environment()
    report = str(Path(args.report).resolve()) if args.report else settings.report_dir
    return replace(settings, report_dir=report, progress=not args.no_progress,
                   timing_only=args.timing_only or settings.timing_only,
                   simulated_clock=args.simulated_clock or settings.simulated_clock)


def _run(args: argparse.Namespace) -> int:
    if args.script_args[:1] == ["--"]:  # `SCRIPT -- ARGS`, as earlier versions wanted
        args.script_args = args.script_args[1:]
    if not Path(args.script).is_file():
        print(f"ipusim run: error: no such script: {args.script}", file=sys.stderr)
        return 1
    try:
        settings = run_settings_of(args)
    except ValueError as error:  # an IPUSIM_* variable, refused before the script runs
        print(f"ipusim run: error: {error}", file=sys.stderr)
        return 2
    given = Path(args.compare_with or "")
    if given.name == "profile.json" and given.is_file():  # as `ipusim compare` takes it
        args.compare_with = str(given.parent)
    if args.compare_with is not None:
        problem = _compare_with_problem(args)
        if problem:
            print(f"ipusim run: error: {problem}", file=sys.stderr)
            return 2
    if args.report:
        _check_writable(Path(settings.report_dir))
    started = time.time()
    try:
        status = run_script(args.script, args.script_args, settings)
    except Exception as error:  # noqa: BLE001 - the script's own error, shown as python would
        print_script_error(error, args.script)
        return 1
    if args.report:
        # What this run wrote (its own reports, else its poprun instances'), never what an
        # earlier or a concurrent run left there.
        written = sorted(set(model_reports.reports_written)) or sorted(
            path.parent for path in Path(settings.report_dir).glob("*/profile.json")
            if path.stat().st_mtime >= started)
        for directory in written:
            replaced = (" (over the report an earlier run left there)"
                        if directory in model_reports.reports_replaced else "")
            print(f"ipusim: profile written to {directory}{replaced}", file=sys.stderr)
        if not written:
            print(f"ipusim: no model wrote a profile under {settings.report_dir} (did the "
                  "script run a poptorch model?)", file=sys.stderr)
        if args.compare_with is not None:
            compared = _compare_with(Path(args.compare_with), written)
            status = status or compared
    return status if isinstance(status, int) else 0


def _compare_with_problem(args: argparse.Namespace) -> str | None:
    """Why ``--compare-with`` cannot work, found before the script runs (None if it can)."""
    from ipusim.report.compare import holds_reports

    if not args.report:
        return (f"--compare-with {args.compare_with} needs --report DIR: the run's own report "
                "is what it compares")
    if not Path(args.compare_with).is_dir():
        return f"--compare-with {args.compare_with}: no such directory"
    if not holds_reports(Path(args.compare_with)):
        return (f"--compare-with {args.compare_with}: it holds no profile.json, nor folders "
                "that do: give an earlier run's report folder or --report directory")
    earlier, report = Path(args.compare_with).resolve(), Path(args.report).resolve()
    if report in (earlier, earlier.parent):
        return (f"--compare-with {args.compare_with} is where this run writes its reports "
                f"(--report {args.report}): the run would overwrite what it compares with; "
                "give the run another --report directory")
    return None


def _compare_with(baseline: Path, written: list[Path]) -> int:
    """Compare each report the run wrote with its counterpart in ``baseline``; prints the
    comparisons (the page beside each new report) and why a report has none. Returns 2
    if a report could not be read, else 0."""
    from ipusim.analysis.comparison import compare
    from ipusim.report.compare import (
        COMPARE_HTML,
        baseline_pairs,
        comparison_text,
        load_run,
        write_comparison_html,
    )

    pairs, notes = baseline_pairs(baseline, written)
    for note in notes:
        print(f"ipusim: nothing compared: {note}", file=sys.stderr)
    status = 0
    for before, after in pairs:
        try:
            comparison = compare(load_run(before), load_run(after))
        except (OSError, ValueError) as error:
            print(f"ipusim: cannot compare {after} with {before}: {error}", file=sys.stderr)
            status = 2
            continue
        page = write_comparison_html(comparison, after / COMPARE_HTML)
        print(f"\n{comparison_text(comparison)}\nPage: {page}")
    return status


def _sweep(args: argparse.Namespace) -> int:
    from poptorch_shim.sweep.cli import run_sweep

    return run_sweep(args)


def _advise(args: argparse.Namespace) -> int:
    from poptorch_shim.sweep.cli import run_advise

    return run_advise(args)


def _alias(args: argparse.Namespace) -> int:
    from poptorch_shim._core import aliases as _aliases

    site = Path(args.site_packages) if args.site_packages else _aliases.site_packages()
    pth = site / _aliases.PTH_NAME
    try:
        if args.action == "install":
            _aliases.install_in_site(site)
            print(f"ipusim alias: `import poptorch` is now ipusim's shim in {site} ({pth.name}; "
                  "`ipusim alias remove` undoes it)")
        elif args.action == "remove":
            removed = _aliases.remove_from_site(site)
            print(f"ipusim alias: removed {removed}" if removed else
                  f"ipusim alias: no alias was installed in {site}")
        elif pth.is_file() and not _aliases.ours(pth):
            print(f"ipusim alias: not installed in {site}: {pth.name} there was not written "
                  "by `ipusim alias install`")
        else:
            print(f"ipusim alias: installed ({pth})" if pth.is_file() else
                  f"ipusim alias: not installed in {site}")
    except OSError as error:
        print(f"ipusim alias {args.action}: error: {error}", file=sys.stderr)
        return 1
    return 0


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


if __name__ == "__main__":
    sys.exit(main())
