"""PopTorch's profiling switches, written out as ipusim autoReport directories.

``Options.enableProfiling(dir)`` or the engine options ``autoReport.all`` /
``autoReport.directory`` ask for a report; so does the run's report directory
(``ipusim run --report DIR`` or ``IPUSIM_REPORT_DIR``). Each model writes
``dir/<modelName | training | inference>/`` when it is destroyed and, for
every other model that asked, when the runner finishes the script (the
models are kept until then, so a report outlives the script's variables).
Two models of one name (two unnamed inference models, say) write to
``inference`` and ``inference-2``; so do two runs at once on one report
directory: each run holds a lock (``fcntl.flock``) on the folder it chose until
its report is written, and another run skips a locked folder. A model name is
one folder inside the report directory: a name with a path separator or
``..`` is refused. Under poprun each instance writes
``name/instance-N/``, and the last instance to finish adds the whole job's
report (every instance's IPUs in one timeline) in ``name/`` itself.
"""
from __future__ import annotations

import enum
import fcntl
import os
import sys
import weakref
from dataclasses import dataclass
from pathlib import Path

from ipusim.cost.cost_model import PS_PER_US
from ipusim.report.summary import run_shape, throughput_words
from poptorch_shim._core import run_settings
from poptorch_shim._core.option_names import REPORT_NAMES
from poptorch_shim._core.simulated_clock import host_calls_s
from poptorch_shim._data.data_loader import measured_loader_rate
from poptorch_shim._data.loader_rate import LoaderRate
from poptorch_shim.options import Options

JOB_ID_FILE = "job-id.txt"
# Seconds of real compute after which the exit line suggests a timing-only run.
SLOW_COMPUTE_S = 30.0

# Compiled executors whose report is still to be written.
_pending: list = []


@dataclass
class _Figures:
    """A model compiled while the runner runs a script, for its figures at exit."""

    name: str
    device: object | None  # the SimulatedDevice, until its figures are taken
    directory: Path | None
    given_options: Options  # the script's own: the DataLoaders built with them know them
    line: str | None = None
    whose: str = ""  # under poprun: which instance's replicas the figures are
    timing_only: bool = False  # no tensors computed: its exit line says so


_compiled: list[_Figures] = []
collecting = False  # set by the runner while it runs a script
# The directory each executor was given, and every directory given so far.
_given: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_taken: set[Path] = set()
_reported: weakref.WeakSet = weakref.WeakSet()  # executors whose report is written
# The report folders this process holds a lock on (their descriptors), and
# the reports written since the runner started the script.
_locks: dict[Path, int] = {}
reports_written: list[Path] = []
# The reports written over one an earlier run left in the same folder.
reports_replaced: set[Path] = set()
# The Chrome trace each report wrote, with its model's calls (host and simulated
# times), for the tracepoints the runner adds to it at the end of the script.
traces_written: list[tuple[Path, list[tuple[int, int, int, int]]]] = []
# Each debug.cbor this process wrote, and the operations' contexts in it.
_debug_written: dict[Path, dict[str, list[dict]]] = {}


class ReportsNotWritten(RuntimeError):
    """One or more reports could not be written; the others were."""


def report_directory(executor) -> Path | None:
    """Where ``executor``'s autoReport goes, or None if nobody asked for one.

    The first model of a name gets ``root/name``; a later one of the same
    name ``root/name-2`` and so on, and is told so on stderr.
    """
    if executor in _given:
        return _given[executor]
    options = executor.options
    root = options.profile_dir or run_settings.current().report_dir
    if not root:
        return None
    name = folder_name(options, executor.training)
    distributed = options.Distributed
    directory, count = Path(root) / name, 1
    # A poprun job's instances share their folder; any other run locks its own.
    while directory in _taken or (distributed.num_processes == 1 and not _claim(directory)):
        count += 1
        directory = Path(root) / f"{name}-{count}"
    if count > 1 and executor in _reported:
        print(f"ipusim: {name} was destroyed and compiled again: its earlier report is "
              f"in {Path(root) / name}, this one writes to {directory}", file=sys.stderr)
    elif count > 1:
        print(f"ipusim: another model or run already writes its report to "
              f"{Path(root) / name}; this one writes to {directory} (name models with "
              f"Options.modelName)", file=sys.stderr)
    _taken.add(directory)
    if distributed.num_processes > 1:  # the job's report goes in ``directory`` itself
        directory = directory / f"instance-{distributed.process_id}"
    _given[executor] = directory
    return directory


def _claim(directory: Path) -> bool:
    """Lock ``directory`` (created) for this process's report; False if another
    process holds it. A folder that cannot be created or opened is not
    refused here: writing the report names the problem."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(directory, os.O_RDONLY)
    except OSError:
        return True
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(descriptor)
        return False
    _locks[directory] = descriptor
    return True


def _remove_if_empty(directory: Path) -> None:
    """Remove the report folder this process made for a model that wrote nothing."""
    try:
        directory.rmdir()
    except OSError:  # not empty, or not there
        pass


def _release(directory: Path) -> None:
    """Let other runs have ``directory`` again (its report is written)."""
    descriptor = _locks.pop(directory, None)
    if descriptor is not None:
        os.close(descriptor)


def model_name(options, training: bool) -> str:
    """A model's name in reports and the exit line: ``Options.modelName``, else
    training or inference."""
    return options.model_name or ("training" if training else "inference")


def folder_name(options, training: bool) -> str:
    """A model's folder in the report directory: its :func:`model_name`. PopTorch uses
    the name for this folder alone, so only a model that writes a report is held to
    it: raises ValueError for a name that is not one folder (a path separator, ``..``)."""
    name = options.model_name
    if name is not None and (not name or name in (".", "..") or "\0" in name
                             or any(sep and sep in name for sep in ("/", os.sep, os.altsep))):
        raise ValueError(f"Options.modelName: model_name names the model's folder inside the "
                         f"report directory, so it must be one folder name (no '/', no '..', "
                         f"not empty), got {name!r}.")
    return name or ("training" if training else "inference")


def register(executor) -> None:
    """Remember a compiled executor: for its figures at exit, and, if it asked
    for one, for the report the runner must write at the end."""
    if collecting:
        name = model_name(executor.options, executor.training)
        directory = report_directory(executor)
        _compiled.append(_Figures(name, executor.device, directory, executor.given_options,
                                  whose=_whose(executor.options.Distributed, directory),
                                  timing_only=executor.timing_only))
    if report_directory(executor) is not None and executor not in _pending:
        _pending.append(executor)


def _whose(distributed, directory: Path | None) -> str:
    """Under poprun, whose figures an instance's exit line gives: its own replicas'."""
    if distributed.num_processes == 1:
        return ""
    job = "" if directory is None else "; the last instance to finish gives the whole job's"
    return (f" (instance {distributed.process_id} of {distributed.num_processes}: its own "
            f"replicas{job})")


def keep_figures(executor) -> None:
    """Take a compiled model's figures before it is destroyed."""
    for entry in _compiled:
        if entry.device is executor.device:
            entry.line, entry.device = _figures_line(entry), None


def _figures_line(entry: _Figures) -> str | None:
    """The exit line of a model: its verdict (the one its report shows, a model that
    does not fit saying so first), throughput and latency, what the run is (its
    batching, timing-only) and where its report is."""
    device = entry.device
    if device is None or not device.step_durations:
        return None
    timeline = device.timeline
    rate = loader_rate(device, entry.given_options)
    verdict = model_verdict(device, entry.given_options)
    where = f"; report {entry.directory}" if entry.directory is not None else ""
    fit = f"{verdict.does_not_fit} Simulated as if it fitted: " if verdict.does_not_fit else ""
    return (f"  {entry.name}{entry.whose}: {fit}{_throughput(timeline.throughput(), rate)}, "
            f"latency {timeline.latency_ps() / PS_PER_US:,.1f} µs per micro-batch, bottleneck "
            f"{verdict.kind}{_gain(verdict)}; {run_shape(timeline, entry.timing_only)}{where}")


def _throughput(device_items_per_s: float, rate: LoaderRate | None) -> str:
    """The run's one throughput, as every report and their index give it (fed by its
    data loader where that is slower than the IPUs), and the loader's rate with its
    spread."""
    said = throughput_words(device_items_per_s, _items_per_s(rate))
    if rate is None:
        return said
    how = (f"measured, windows of steps {rate.low:,.0f} to {rate.high:,.0f}" if rate.measured
           else "given")
    return f"{said} [the data loader {rate.items_per_s:,.0f} {how}]"


def _gain(verdict) -> str:
    """What lifting the verdict's limit gains, as the exit line words it."""
    proof = verdict.proof
    if proof is None or proof["speedup"] <= 1:
        return ""
    return f" ({proof['change']}: {proof['speedup']:.2f}x)"


def _items_per_s(rate: LoaderRate | None) -> float | None:
    return None if rate is None else rate.items_per_s


def loader_rate(device, given_options: Options) -> LoaderRate | None:
    """The data loader's rate for a model's verdict, with its spread: the one the
    script gave (``Options.Simulation.loaderRate``), else the one measured on the
    loader whose steps the model received (``device.fed_loader_rate``), else on a
    loader built with the script's options (``given_options``) that fed no other
    model. It needs no executor: a model the script no longer holds still has its
    exit line."""
    given = given_options.Simulation.loader_rate
    if given:
        return LoaderRate.given(given)
    if device.fed_loader_rate is not None:
        return device.fed_loader_rate
    return measured_loader_rate(given_options)


def model_verdict(device, given_options: Options):
    """The one verdict of a model, which its exit line and every report show."""
    return device.verdict(_items_per_s(loader_rate(device, given_options)))


def print_simulated_figures(stream=None, simulated_clock: bool = False,
                            computed_before_s: float = 0.0) -> None:
    """Print, for each model the script ran, its simulated throughput, latency
    and bottleneck and where its report is: the figures a script's own
    wall-clock timings on this host cannot give (unless it ran with the
    simulated clock). ``computed_before_s``: the host's seconds in model calls
    before the script started (:func:`host_calls_s`), which are not its own."""
    lines = [line for line in (entry.line or _figures_line(entry) for entry in _compiled)
             if line is not None]
    _compiled.clear()
    whose = ("the script's own timings followed the simulated clock" if simulated_clock
             else "the script's own timings are this host's wall clock, not the IPUs'")
    if lines:
        print(f"\nipusim: simulated figures ({whose}):", *lines, sep="\n",
              file=stream or sys.stderr)
        computed = host_calls_s() - computed_before_s
        if computed > SLOW_COMPUTE_S:
            print(f"ipusim: computing the models took {computed:,.0f} s on this CPU; "
                  "--timing-only (opts.Simulation.timingOnly(True)) gives the same simulated "
                  "timeline without computing.", file=stream or sys.stderr)


def write_report(executor) -> Path | None:
    """Write the autoReport directory of a compiled executor that asked for one."""
    if executor in _pending:
        _pending.remove(executor)
    directory = report_directory(executor)
    if directory is None:
        return None
    if not executor.isCompiled() or executor.device.simulation.steps == 0:
        _release(directory)
        _remove_if_empty(directory)  # claimed when compiled; nothing ran to report
        return None
    from ipusim.report import outputs_from_engine_options, write_autoreport
    from ipusim.report.autoreport import PROFILE, TRACE
    from ipusim.report.files import write_atomically
    options = executor.options
    # Engine options that name no autoReport output (only a directory, or an
    # IPUSIM_REPORT_DIR run) still get the whole report.
    outputs = outputs_from_engine_options(options.engine_options) or None
    device = executor.device
    rate = loader_rate(device, executor.given_options)
    plain = user_options(options)
    spread = (rate.low, rate.high) if rate is not None and rate.measured else None
    if (directory / "profile.json").is_file():  # an earlier run's, in the folder it names
        reports_replaced.add(directory)
    # The graph profile, for profile.pop and the report's tile and liveness views.
    graph = (executor.timeline.graph_profile(device.named)
             if outputs is None or PROFILE in outputs else None)
    contexts = device.debug_contexts(executor.timeline)  # each operator's module and line
    try:
        done = write_autoreport(directory, executor.timeline, options=plain, outputs=outputs,
                                loader_items_per_s=_items_per_s(rate), names=device.names,
                                verdict=model_verdict(device, executor.given_options),
                                loader_spread=spread, graph=graph,
                                timing_only=executor.timing_only, contexts=contexts)
        if graph is not None:
            _write_pva_files(executor, done, graph, contexts=contexts)
    finally:
        _release(directory)
    reports_written.append(done)
    # A model destroyed and compiled again writes its next report to a folder of its own.
    _given.pop(executor, None)
    _reported.add(executor)
    traces_written.append((done / TRACE, list(executor.device.host_calls)))
    if options.Distributed.num_processes > 1:
        write_atomically(directory / JOB_ID_FILE, run_settings.current().job_id)
        _write_job_report(directory.parent, options.Distributed.num_processes, plain,
                          _items_per_s(rate))
    return done


def write_compiled_profile(executor) -> Path | None:
    """The graph profile of a model just compiled, if its autoReport asks for one:
    ``profile.pop`` (its compiled step simulated apart, not run) and, with
    ``autoReport.outputDebugInfo``, ``debug.cbor``. Poplar writes the graph profile
    when the engine compiles, so a script that only compiles (``compile()``, an offline
    target) or reads the folder before the model is destroyed finds it, as PopTorch's
    own tests do; the model's report, written later, replaces it with the run's.
    Under the runner every report is written when the script ends, and this one is not
    (the script's end comes before anything could read it)."""
    if collecting:
        return None
    directory = report_directory(executor)
    if directory is None:
        return None
    from ipusim.report.autoreport import PROFILE, outputs_from_engine_options
    outputs = outputs_from_engine_options(executor.options.engine_options) or None
    if outputs is not None and PROFILE not in outputs:
        return None
    device = executor.device
    timeline = device.compiled_timeline()
    graph = timeline.graph_profile(device.named)
    try:
        _write_pva_files(executor, directory, graph, timeline, executed=False)
    except OSError:  # a file where the folder goes: the model's report says so when written
        return None
    return directory


def _write_pva_files(executor, directory: Path, graph, timeline=None,
                     executed: bool = True, contexts: dict | None = None) -> None:
    """Beside a model's report, what libpva reads (``import pva``): ``profile.pop`` of its
    graph profile, the host side's ``host.pvti``, and with ``autoReport.outputDebugInfo``
    the operations' debug contexts in ``debug.cbor`` of the autoReport directory (one a
    process, as PopTorch writes it, each model adding its operations). ``timeline``: the
    step they describe (default: the model's own calls); ``executed``: whether it ran
    (see :func:`ipusim.report.pop_profile.pop_document`); ``contexts``: its operators'
    debug contexts when already worked out."""
    from ipusim.report.pop_profile import DEBUG, write_debug, write_pop
    from poptorch_shim.profiling import PVTI_FILE, write_pvti
    device = executor.device
    timeline = timeline or executor.timeline
    write_pop(directory, timeline, graph, executed)
    write_pvti(directory / PVTI_FILE, directory.name, list(device.host_calls))
    engine = executor.options.engine_options
    if str(engine.get("autoReport.outputDebugInfo", "false")).lower() == "true":
        path = directory.parent / DEBUG
        known = _debug_written.setdefault(path, {})
        known.update(device.debug_contexts(timeline) if contexts is None else contexts)
        write_debug(path, known)


def write_out_of_memory_report(executor, error) -> Path | None:
    """Write the report of an executor whose model does not fit, if it asked for one:
    the error and every IPU's memory against its SRAM, so the run still leaves a report."""
    directory = report_directory(executor)
    if directory is None or getattr(error, "memory", None) is None:
        return None
    from ipusim.report import write_out_of_memory_report as write
    try:
        written = write(directory, error, user_options(executor.options))
    finally:
        _release(directory)
    reports_written.append(written)
    print(f"ipusim: the model does not fit; its memory report is in {written}", file=sys.stderr)
    return written


def _write_job_report(directory: Path, instances: int, options: dict,
                      loader_rate: float | None) -> None:
    """Once every instance of a poprun job has written its report, write the
    job's: one timeline of all their IPUs. The instances finish in any order,
    so each checks under a lock on the directory, and the last one writes it.
    Each report is stamped with poprun's job id, so that the reports an
    earlier run left in the same place are never mixed in."""
    from ipusim import job_timeline
    from ipusim.report import load_autoreport, write_autoreport
    from ipusim.report.files import write_atomically
    job = run_settings.current().job_id
    parts = [directory / f"instance-{index}" for index in range(instances)]
    lock = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _job_of(directory) == job or any(_job_of(part) != job for part in parts):
            return  # written already, or an instance of this job is still running
        timeline = job_timeline([load_autoreport(part) for part in parts])
        write_autoreport(directory, timeline, options=options, loader_items_per_s=loader_rate,
                         names=REPORT_NAMES)
        write_atomically(directory / JOB_ID_FILE, job)
        print(f"ipusim: {directory.name}, the whole job ({instances} instances): "
              f"{timeline.throughput():,.0f} items/s; report {directory}", file=sys.stderr)
    finally:
        os.close(lock)


def _job_of(directory: Path) -> str | None:
    """The poprun job id a report directory was written by (None: none written)."""
    try:
        return (directory / JOB_ID_FILE).read_text(encoding="utf-8")
    except OSError:
        return None


def write_pending_reports() -> list[Path]:
    """Write the reports still pending, each whatever became of the others;
    the runner calls this at the end of a script. Raises
    :class:`ReportsNotWritten` naming every report that failed."""
    written, failures = [], []
    for executor in list(_pending):
        try:
            path = write_report(executor)
        except OSError as error:  # a full disk, a file where a folder should be
            failures.append(f"{error.filename}: {error.strerror}"
                            if error.filename and error.strerror else
                            f"{report_directory(executor)}: {type(error).__name__}: {error}")
        except Exception as error:  # noqa: BLE001 - reported below, with the others
            failures.append(f"{report_directory(executor)}: {type(error).__name__}: {error}")
        else:
            if path is not None:
                written.append(path)
    if failures:
        raise ReportsNotWritten(f"{len(failures)} report(s) could not be written "
                                f"({len(written)} were): " + "; ".join(failures))
    return written


def user_options(options) -> dict:
    """The options the script set, under the names it set them by (``deviceIterations``,
    ``Training.gradientAccumulation``, ``_Popart.engineOptions``...), as JSON-friendly
    values: what a report's summary lists."""
    out = {}
    groups = [("", options)] + [(f"{name}.", group) for name, group in options._groups().items()]
    for prefix, group in groups:
        # A setter of several settings is listed as its call's arguments; one of
        # them alone as its value, as a setter of one setting is.
        for setter, arguments in group._calls().items():
            out[prefix + setter] = ([_plain(a) for a in arguments] if len(arguments) > 1
                                    else _plain(arguments[0]))
    defaults = Options()._popart.options
    for key, value in options._popart.options.items():
        if key not in defaults or defaults[key] != value:
            out[f"_Popart.{key}"] = _plain(value)
    return out


def _plain(value):
    """An option's value as JSON takes it: enums as ``OutputMode.All``, objects by repr."""
    if isinstance(value, enum.Enum):
        return f"{type(value).__name__}.{value.name}"
    if isinstance(value, (str, int, float, bool, type(None), list, dict)):
        return value
    return repr(value)
