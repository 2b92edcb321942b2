"""autoReport-style profile directories: write one per engine, load it back.

PopTorch writes a profile into ``autoReport.directory/<training|inference|
modelName>/`` when the Poplar engine options ask for it; the caller picks that
directory, this module fills it with files named for what they hold:

=================  ===========================================================
profile.json       system, run, work, options, memory per IPU and per stage,
                   cycles per program step, each operator's program steps,
                   the figures, the verdict and the names its advice gives
                   the settings
events.csv.gz      the event table, to re-render the report without simulating
trace.json         Chrome Trace Event format (Perfetto, chrome://tracing)
report.html        the HTML report (plotly.js embedded)
summary.txt        the text summary
=================  ===========================================================

They are ipusim's own formats, not PopVision's. The ``profile.pop`` that libpva
scripts read (``import pva`` under the shim) is written beside them by
:mod:`ipusim.report.pop_profile`, in a format of ipusim's own too.
"""
from __future__ import annotations

import dataclasses
import json
import zlib
from pathlib import Path

import pandas as pd

from ipusim.analysis.codec import decode, encode
from ipusim.analysis.graph_profile import GraphProfile
from ipusim.analysis.headline import reported_figures
from ipusim.analysis.timeline import Timeline
from ipusim.cost.cost_model import CostModel
from ipusim.cost.work import Work
from ipusim.engine.event_kinds import KINDS
from ipusim.engine.recorder import COLUMNS
from ipusim.hardware import SystemSpec
from ipusim.hardware.specs import check_amount
from ipusim.plan.engine_plan import EnginePlan
from ipusim.plan.memory import MB, OutOfMemoryError, fits
from ipusim.plan.run_config import RunConfig
from ipusim.plan.setting_names import SettingNames
from ipusim.report.chrome_trace import write_chrome_trace
from ipusim.report.files import write_atomically
from ipusim.report.html import render_out_of_memory_html, write_html
from ipusim.report.summary import text_summary
from ipusim.report.verdict import Verdict, bottleneck

FORMAT = "ipusim-profile"
VERSION = 1
PROFILE, EVENTS, TRACE, HTML, SUMMARY = (
    "profile.json", "events.csv.gz", "trace.json", "report.html", "summary.txt")
OUTPUT_FILES = frozenset({PROFILE, EVENTS, TRACE, HTML, SUMMARY})

# What each Poplar autoReport output option makes us write. autoReport.all
# turns on the first four; outputSerializedGraph and outputDebugInfo are
# recognised but have no counterpart in a simulation.
ENGINE_OUTPUTS: dict[str, frozenset[str]] = {
    "autoReport.outputGraphProfile": frozenset({PROFILE, SUMMARY}),
    "autoReport.outputExecutionProfile": frozenset({PROFILE, EVENTS, TRACE, HTML, SUMMARY}),
    "autoReport.outputLoweredVars": frozenset(),
    "autoReport.outputArchive": frozenset(),
    "autoReport.outputSerializedGraph": frozenset(),
    "autoReport.outputDebugInfo": frozenset(),
}
_IN_ALL = ("autoReport.outputGraphProfile", "autoReport.outputExecutionProfile",
           "autoReport.outputLoweredVars", "autoReport.outputArchive")


def _flag(name: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise ValueError(f"Engine option {name} must be \"true\" or \"false\", got {value!r}; "
                     f"write for example {{'{name}': 'true'}}")


def outputs_from_engine_options(engine_options: dict) -> set[str]:
    """The files to write for Poplar engine options such as ``{"autoReport.all": "true"}``.

    ``autoReport.all`` turns on outputGraphProfile, outputExecutionProfile,
    outputLoweredVars and outputArchive; an option set explicitly overrides
    it (``"autoReport.outputExecutionProfile": "false"`` keeps only the
    graph profile). The graph profile gives profile.json and summary.txt;
    the execution profile gives all five files. Other options are ignored.
    """
    everything = _flag("autoReport.all", engine_options.get("autoReport.all", "false"))
    enabled = dict.fromkeys(_IN_ALL, everything)
    for name in ENGINE_OUTPUTS:
        if name in engine_options:
            enabled[name] = _flag(name, engine_options[name])
    return set().union(*(ENGINE_OUTPUTS[name] for name, on in enabled.items() if on))


def write_autoreport(directory: str | Path, timeline: Timeline, *, options: dict | None = None,
                     outputs: set[str] | None = None,
                     loader_items_per_s: float | None = None,
                     names: SettingNames | None = None,
                     verdict: Verdict | None = None,
                     loader_spread: tuple[float, float] | None = None,
                     graph: GraphProfile | None = None,
                     timing_only: bool = False,
                     contexts: dict[str, list[dict]] | None = None) -> Path:
    """Write the profile of ``timeline`` into ``directory`` (created); returns the directory.

    ``outputs`` names the files to write (default: all of :data:`OUTPUT_FILES`);
    ``options`` are the engine's options, recorded as given; ``names`` how the
    verdict's advice names the settings (default: ipusim's names), recorded so
    that a report rendered again from the profile words them the same way;
    ``loader_spread`` the lowest and highest rate of a measured loader's windows of steps;
    ``graph`` the run's graph profile, when worked out, for the report's tile and
    liveness views.
    ``timing_only`` that the run computed no tensors, which every output's header says;
    ``contexts`` the debug contexts of the operator runs by name (a front end's record of
    each operator's module and source line), which the operators' table and the trace's
    operator slices name them by.
    """
    names = names or SettingNames()
    outputs = set(OUTPUT_FILES if outputs is None else outputs)
    unknown = outputs - OUTPUT_FILES
    if unknown:
        raise ValueError(f"Unknown autoReport output(s) {sorted(unknown)}; outputs must be "
                         f"a subset of {sorted(OUTPUT_FILES)}")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    verdict = verdict or bottleneck(timeline, loader_items_per_s, names)
    if PROFILE in outputs:
        profile = _profile(timeline, options or {}, loader_items_per_s, verdict)
        profile["setting_names"] = names.to_dict()
        profile["loader_spread"] = None if loader_spread is None else list(loader_spread)
        profile["timing_only"] = timing_only
        profile["files"] = sorted(outputs)
        write_atomically(directory / PROFILE, json.dumps(profile, indent=1, default=str))
    if EVENTS in outputs:
        write_atomically(directory / EVENTS, lambda path: timeline.events.to_csv(
            path, index=False, compression="gzip"))
    if TRACE in outputs:
        write_chrome_trace(timeline, directory / TRACE, contexts=contexts)
    if HTML in outputs:
        write_html(timeline, directory / HTML, loader_items_per_s=loader_items_per_s,
                   title=directory.name, verdict=verdict, loader_spread=loader_spread,
                   graph=graph, timing_only=timing_only, contexts=contexts)
    if SUMMARY in outputs:
        text = text_summary(timeline, loader_items_per_s, options, verdict,
                            loader_spread=loader_spread, timing_only=timing_only)
        write_atomically(directory / SUMMARY, text)
    return directory


def write_out_of_memory_report(directory: str | Path, error: OutOfMemoryError,
                               options: dict | None = None) -> Path:
    """The report of a model that does not fit, written instead of a run's: the error,
    every IPU's memory against its SRAM (``profile.json``, a page and a summary), so
    that a run that ends out of memory still shows where the memory goes."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    table = error.memory
    profile = {"format": FORMAT, "version": VERSION, "out_of_memory": str(error),
               "options": options or {},
               "memory": {"per_ipu": table.reset_index().to_dict("records"), "fits": False}}
    write_atomically(directory / PROFILE, json.dumps(profile, indent=1, default=str))
    write_atomically(directory / HTML, render_out_of_memory_html(table, str(error),
                                                                 directory.name))
    shares = table["total"] / table["capacity"]
    rows = "\n".join(f"  IPU {ipu}: {row['total'] / MB:,.1f} MB of {row['capacity'] / MB:,.1f} MB"
                     f" ({shares[ipu]:.0%}){'  OVER' if shares[ipu] > 1 else ''}"
                     for ipu, row in table.iterrows())
    write_atomically(directory / SUMMARY, f"Out of memory\n  {error}\n\nMemory per IPU\n{rows}\n")
    return directory


def load_profile(directory: str | Path) -> dict:
    """The profile.json of an autoReport directory. Raises FileNotFoundError if
    there is none, ValueError naming the file and the cause if it is not a
    whole ipusim profile."""
    path = Path(directory) / PROFILE
    if not path.is_file():
        raise FileNotFoundError(f"No {PROFILE} in {directory}: expected a directory written by "
                                "ipusim's autoReport (autoReport.all or outputGraphProfile)")
    try:
        profile = json.loads(path.read_bytes().decode("utf-8"))
    except ValueError as error:  # not UTF-8, not JSON
        raise ValueError(f"{path} is not an ipusim profile: it is not JSON ({error})") from None
    found = profile.get("format") if isinstance(profile, dict) else profile
    if not isinstance(profile, dict) or found != FORMAT:
        raise ValueError(f"{path} is not an ipusim profile (format {found!r}, "
                         f"expected {FORMAT!r})")
    return profile


def profile_names(profile: dict) -> SettingNames:
    """The names the verdict of a profile gave the settings (ipusim's, if it records none)."""
    try:
        return SettingNames.from_dict(profile.get("setting_names"))
    except (TypeError, ValueError, AttributeError) as error:
        raise ValueError(f"the {PROFILE}'s setting_names are damaged: {error}") from None


def saved_loader_spread(profile: dict) -> tuple[float, float] | None:
    """The lowest and highest rate of the measured loader's windows of steps that a
    profile recorded (None: no loader, or its rate was given)."""
    spread = profile.get("loader_spread")
    if spread is None:
        return None
    if not (isinstance(spread, list) and len(spread) == 2 and all(
            isinstance(rate, (int, float)) and 0 < rate < float("inf") for rate in spread)):
        raise ValueError(f"the {PROFILE}'s loader_spread is damaged: expected two positive "
                         f"rates, got {spread!r}")
    return spread[0], spread[1]


def report_folder(path: str | Path) -> Path:
    """The autoReport folder ``path`` names: the folder itself, or the folder of its
    ``profile.json``. Raises FileNotFoundError or ValueError naming the path when it
    does not exist, is another file, or is a folder without a profile (one that holds
    the reports of several models says so and names one)."""
    given = Path(path)
    if not given.exists():
        raise FileNotFoundError(f"{given} does not exist: give an autoReport folder (it holds "
                                f"{PROFILE} and {EVENTS}) or its {PROFILE}")
    if given.is_file():
        if given.name != PROFILE:
            raise ValueError(f"{given} is not an autoReport folder nor its {PROFILE}")
        given = given.parent
    if not (given / PROFILE).is_file():
        inside = sorted(p.parent.name for p in given.glob(f"*/{PROFILE}"))
        if inside:
            raise FileNotFoundError(
                f"No {PROFILE} in {given}: it holds the reports of {len(inside)} model(s) "
                f"({', '.join(inside[:6])}{', ...' if len(inside) > 6 else ''}); name one of "
                f"them, e.g. {given / inside[0]}")
    return given


def load_report(directory: str | Path) -> tuple[Timeline, dict]:
    """The :class:`Timeline` of an autoReport directory and its profile, the profile read
    once. Raises FileNotFoundError for a missing file, ValueError naming the file (or
    the folder) and the cause for a damaged one, or anything else that cannot be
    read back."""
    profile = load_profile(directory)
    try:
        return _timeline(directory, profile), profile
    except (OSError, ValueError):
        raise
    except Exception as error:  # noqa: BLE001 - a damaged profile: one line naming it
        raise ValueError(f"{directory} cannot be read back: {type(error).__name__}: "
                         f"{error}") from None


def load_autoreport(directory: str | Path) -> Timeline:
    """Rebuild the :class:`Timeline` of an autoReport directory, without simulating.
    Raises FileNotFoundError for a missing file, ValueError naming the file and
    the cause for a damaged one."""
    return _timeline(directory, load_profile(directory))


def _timeline(directory: str | Path, profile: dict) -> Timeline:
    """The timeline of the autoReport directory whose profile is ``profile``."""
    if "out_of_memory" in profile:
        cause = (str(profile["out_of_memory"]).splitlines() or [""])[0]
        raise ValueError(f"{directory} is the report of a model that did not fit in memory "
                         f"({cause}): nothing was simulated, so it has no timeline; its "
                         f"{SUMMARY} and {HTML} show each IPU's memory")
    path = Path(directory) / EVENTS
    if not path.is_file():
        raise FileNotFoundError(
            f"No {EVENTS} in {directory}: the execution profile was not written; enable "
            "autoReport.outputExecutionProfile (or autoReport.all) to re-render the report")
    source = Path(directory) / PROFILE
    try:
        dtypes = profile["event_dtypes"]
        missing = [c for c in COLUMNS if c not in dtypes
                   and not (c == "pipeline_cycle" and "cycle" in dtypes)]  # an older name
        if missing:
            raise ValueError(f"its event_dtypes name no {', '.join(missing)} column "
                             f"(the events' columns are {', '.join(COLUMNS)})")
        columns = {c: t for c, t in dtypes.items() if c != "kind"}
        configs = (decode(Work, profile["work"]), decode(RunConfig, profile["run"]),
                   decode(SystemSpec, profile["system"]))
        # The run's own cost model, so that the stages are priced (and a diagnosis of
        # the loaded timeline simulates) as the run did; older profiles keep none.
        cost = decode(CostModel, profile["cost_model"]) if "cost_model" in profile else None
        steps, instance = profile["steps"], profile["instance"]
        check_amount("", "steps", steps, integer=True)
        check_amount("", "instance", instance, integer=True)
    except KeyError as error:
        raise ValueError(f"{source} is damaged: it has no {error}") from None
    except ValueError as error:
        raise ValueError(f"{source} is damaged: {error}") from None
    except (TypeError, AttributeError, StopIteration) as error:
        raise ValueError(f"{source} is damaged: {type(error).__name__}: {error}") from None
    try:
        events = pd.read_csv(path, dtype=columns, compression="gzip")
        unknown = set(events["kind"].unique()) - set(KINDS)
        if unknown:
            raise ValueError(f"it holds event kinds ipusim does not know: "
                             f"{sorted(map(str, unknown))[:5]} (it knows {', '.join(KINDS)})")
        events["kind"] = pd.Categorical(events["kind"], categories=KINDS)
        # Profiles written before the column was named for what it counts.
        events = events[list(dtypes)].rename(columns={"cycle": "pipeline_cycle"})
    except OSError as error:
        if error.errno is not None:  # it cannot be read (permissions, a folder), not damaged
            raise
        raise ValueError(f"{path} is damaged: {type(error).__name__}: {error}") from None
    except (EOFError, zlib.error, ValueError, TypeError, KeyError) as error:
        raise ValueError(f"{path} is damaged: {type(error).__name__}: {error}") from None
    try:
        plan = EnginePlan.build(*configs, cost) if cost is not None else None
        timeline = Timeline(events, *configs, steps, instance, plan)
    except (TypeError, ValueError, KeyError, AttributeError) as error:
        raise ValueError(f"{directory} holds a profile and events that do not go together: "
                         f"{type(error).__name__}: {error}") from None
    contradiction = _contradiction(timeline)
    if contradiction:
        raise ValueError(f"{directory} contradicts itself: {contradiction}")
    return timeline


def _contradiction(timeline: Timeline) -> str | None:
    """Why a loaded profile and its events cannot be one run (None if they can): no
    step, no event, or events on other IPUs than the run's replicas use."""
    if timeline.steps < 1:
        return f"{PROFILE} records {timeline.steps} steps; a report is written after one"
    events = timeline.events
    if events.empty:
        return f"{EVENTS} holds no events, though {PROFILE} records {timeline.steps} steps"
    used, found = timeline.num_ipus, set(events["ipu"].unique().tolist())
    outside = sorted(ipu for ipu in found if not 0 <= ipu < used)
    if outside:
        return (f"{EVENTS} has events on IPU {outside[0]}, but the run uses IPUs 0 to "
                f"{used - 1} ({timeline.run.replicas} replica(s) of "
                f"{timeline.plan.ipus_per_replica})")
    if len(found) < used:
        return (f"{PROFILE} records {timeline.run.replicas} replica(s) of "
                f"{timeline.plan.ipus_per_replica} IPU(s), {used} in all, but {EVENTS} has "
                f"events on {len(found)} of them")
    return None


def saved_verdict(profile: dict) -> Verdict | None:
    """The verdict a profile recorded, so that a report rendered again from it says what
    the run's own outputs said (None for a profile that records none)."""
    data = profile.get("verdict")
    if not isinstance(data, dict):
        return None
    fields = {f.name for f in dataclasses.fields(Verdict)}
    if not fields <= set(data):
        return None  # written by an older ipusim: let the caller work it out again
    return Verdict(**{**data, "advice": tuple(data["advice"]),
                      "what_if": tuple(data["what_if"]), "left_out": tuple(data["left_out"])})


def _operators(timeline: Timeline) -> list[dict]:
    """Each stage's operators for one micro-batch with their program steps: the stage,
    pass, operator, kernel, runs, cycles, and each step's program, name, role and
    cycles (all runs together)."""
    table = timeline.operator_breakdown()
    return [{"stage": row.stage, "stage_index": int(row.stage_index), "pass": row.pass_,
             "op": row.op, "kind": row.kind, "count": int(row.count),
             "total_cycles": float(row.total_cycles),
             "steps": [{"program": program, "name": name, "role": role, "cycles": cycles}
                       for program, name, role, cycles in row.steps]}
            for row in table.rename(columns={"pass": "pass_"}).itertuples(index=False)]


def _profile(timeline: Timeline, options: dict, loader_items_per_s: float | None,
             verdict) -> dict:
    per_ipu = timeline.memory_per_ipu()
    steps = timeline.step_cycles()
    return {
        "format": FORMAT, "version": VERSION,
        "system": encode(timeline.system), "run": encode(timeline.run),
        "work": encode(timeline.work), "cost_model": encode(timeline.plan.cost),
        "steps": timeline.steps, "instance": timeline.instance,
        "options": options, "loader_items_per_s": loader_items_per_s,
        "memory": {
            "per_ipu": per_ipu.reset_index().to_dict("records"),
            "per_stage": timeline.memory_per_stage().reset_index().to_dict("records"),
            "fits": fits(per_ipu),
        },
        "execution": {
            "clock_hz": timeline.system.ipu.clock_hz,
            "total_cycles": timeline.to_cycles(timeline.duration_ps),
            "steps": steps.to_dict("records"),
        },
        "operators": _operators(timeline),
        "figures": reported_figures(timeline),
        "verdict": verdict.to_dict(),
        "event_dtypes": {c: str(t) for c, t in timeline.events.dtypes.items()},
    }


