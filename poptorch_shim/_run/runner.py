"""Run an unmodified PopTorch script on the simulator.

``python -m poptorch_shim SCRIPT.py [ARGS]`` makes ``import poptorch`` (and
``import popdist``, ``import popart``) resolve to this package, runs the script as
``__main__`` and, when it ends, writes the profiling reports its models
asked for.
"""
from __future__ import annotations

import os
import runpy
import signal
import sys
import threading
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

from poptorch_shim import profiling as tracepoints
from poptorch_shim._core import aliases as _aliases
from poptorch_shim._core import run_settings
from poptorch_shim._core.run_settings import SIMULATED_CLOCK_ENV, RunSettings
from poptorch_shim._core.simulated_clock import host_calls_s
from poptorch_shim._core.simulated_clock import watching as watching_clock
from poptorch_shim._run import model_reports
from poptorch_shim._run.model_reports import ReportsNotWritten, write_pending_reports


def install_aliases() -> None:
    """Make ``poptorch`` importable here and in any process started from here."""
    _aliases.install()


def run_script(path: str, argv: list[str], settings: RunSettings | None = None) -> int:
    """Run the script at ``path`` with ``argv`` as its arguments, as ``__main__``.

    ``settings``: where reports go, timing-only, the progress bar and the
    simulated clock (see :mod:`poptorch_shim._core.run_settings`); None: as the
    ``IPUSIM_*`` environment variables say (checked before the script starts).
    Returns the status the script gave ``sys.exit`` (0 when it ends without
    one), or 1 when a report could not be written (said in one line on stderr,
    naming the file); the reports written are in ``model_reports.reports_written``.
    A script that ends in ``sys.exit(...)`` has finished: its reports and
    figures are written and printed as for one that returns.
    """
    script = Path(path)
    if not script.is_file():
        raise FileNotFoundError(f"No such script: {path}")
    install_aliases()
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [str(script)] + list(argv)
    sys.path.insert(0, str(script.resolve().parent))
    if settings is None:
        settings = RunSettings.from_environment()
    finished, model_reports.collecting, first_tracepoint = False, True, tracepoints.count()
    computed_before_s = host_calls_s()  # another script's, run earlier in this process
    model_reports.reports_written.clear()
    model_reports.reports_replaced.clear()
    model_reports.traces_written.clear()
    status = 0
    simulated_clock = settings.simulated_clock
    try:
        with run_settings.given(settings), _script_is_mp_main(), _terminated_as_exit(), \
                watching_clock(script, simulated_clock):
            try:
                runpy.run_path(str(script), run_name="__main__")
            except SystemExit as exit_:
                status = _exit_status(exit_)
        finished = True
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        try:
            write_pending_reports()
            if settings.report_dir:  # the script's poptorch.profiling tracepoints beside them
                tracepoints.write_tracepoints(settings.report_dir, since=first_tracepoint)
            # and in each model's trace, on its host process, in its simulated time
            tracepoints.add_to_traces(model_reports.traces_written, since=first_tracepoint)
        except (ReportsNotWritten, OSError) as error:
            # After the script's own error, if any, which keeps its traceback.
            print(f"ipusim: error: {_one_line(error)}", file=sys.stderr)
            status = status or 1
        finally:
            model_reports.collecting = False
            if finished:
                model_reports.print_simulated_figures(simulated_clock=simulated_clock,
                                                      computed_before_s=computed_before_s)
    return status


def _exit_status(exit_: SystemExit) -> int:
    """The process status ``sys.exit(code)`` gives under plain python: None is 0, an
    integer itself, anything else (a message) is printed on stderr and is 1."""
    code = exit_.code
    if code is None or isinstance(code, int):
        return int(code or 0)
    print(code, file=sys.stderr)
    return 1


def print_script_error(error: BaseException, script: str, stream=None) -> None:
    """Print ``error``, raised from the script at ``script``, as ``python script.py``
    prints it: the traceback from the script's own frame down, without the runner's
    and runpy's frames above it (all of it where the script has no frame in it)."""
    path = os.path.abspath(script)
    tb = error.__traceback__
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) != path:
        tb = tb.tb_next
    traceback.print_exception(type(error), error, tb or error.__traceback__,
                              file=stream or sys.stderr)


def _one_line(error: Exception) -> str:
    """An error as one line: an OSError as the file and what went wrong with it."""
    if isinstance(error, OSError) and error.filename and error.strerror:
        return f"{error.filename}: {error.strerror}"
    return " ".join(str(error).split())


@contextmanager
def _terminated_as_exit() -> Iterator[None]:
    """While the script runs, SIGTERM ends it as ``sys.exit(128 + SIGTERM)`` would, so
    that the reports of its models so far are written (no empty report folder is left)
    and the run exits with the status a shell gives a terminated process. Only where
    nobody handles SIGTERM yet, and only in the main thread, where Python runs handlers."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def terminate(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second one is not caught
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


@contextmanager
def _script_is_mp_main() -> Iterator[None]:
    """Let ``__mp_main__`` name the script's module while it runs, as it does
    under plain python.

    A worker process started with spawn imports the script as
    ``__mp_main__``, so what it pickles (a dataset's exception class, say)
    names that module; multiprocessing aliased ``__mp_main__`` to this
    runner when it was imported, so the parent would not find the class.
    runpy puts the script's module in ``sys.modules["__main__"]`` while it
    runs; a module-level ``__getattr__`` on the alias looks names up there.
    """
    saved = sys.modules.get("__mp_main__")
    alias = type(sys)("__mp_main__")
    alias.__getattr__ = lambda name: getattr(sys.modules["__main__"], name)
    sys.modules["__mp_main__"] = alias
    try:
        yield
    finally:
        if saved is None:
            sys.modules.pop("__mp_main__", None)
        else:
            sys.modules["__mp_main__"] = saved


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m poptorch_shim``."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        settings = RunSettings.from_environment()
    except ValueError as error:  # checked before the script runs, not when its report is
        print(f"python -m poptorch_shim: error: {error}", file=sys.stderr)
        return 2
    while args[:1] == ["--simulated-clock"]:  # the runner's own flag, before the script
        settings, args = replace(settings, simulated_clock=True), args[1:]
    if not args or args[0] in ("-h", "--help"):
        print("usage: python -m poptorch_shim [--simulated-clock] SCRIPT.py [ARGS ...]\n\n"
              "Run a PopTorch script on the ipusim simulator: `import poptorch` resolves to\n"
              "poptorch_shim, every micro-batch is computed with torch on the CPU and the\n"
              "IPU system is simulated. Set IPUSIM_REPORT_DIR to write autoReport\n"
              "directories for every model there; IPUSIM_NUM_IPUS sizes the machine (16).\n\n"
              "--simulated-clock  on the script's time.time(), time.perf_counter() and\n"
              "                   time.monotonic() each model call lasts its simulated\n"
              "                   duration, so its own timings are the IPUs'\n"
              f"                   (or set {SIMULATED_CLOCK_ENV}=1)")
        return 0 if args else 2
    if args[0].startswith("-"):
        print(f"python -m poptorch_shim: error: unknown option {args[0]} (the only option "
              "before SCRIPT is --simulated-clock)", file=sys.stderr)
        return 2
    if not Path(args[0]).is_file():
        print(f"python -m poptorch_shim: error: no such script: {args[0]}", file=sys.stderr)
        return 2
    try:
        return run_script(args[0], args[1:], settings)
    except Exception as error:  # noqa: BLE001 - the script's own error, shown as python would
        print_script_error(error, args[0])
        return 1
