"""The figures of a run and a text summary in the spirit of Poplar's profile summary.

Target, engine, memory per IPU and per stage, program steps with their
cycles (simulated time at the IPU clock), the headline figures and the
bottleneck verdict, as plain text a person reads in a terminal.
"""
from __future__ import annotations

import textwrap
from dataclasses import replace

import pandas as pd

from ipusim.cost_model import PS_PER_S
from ipusim.memory import MemoryModel, memory_per_ipu
from ipusim.recorder import KINDS
from ipusim.report.verdict import (Verdict, bottleneck, host_link_occupancy,
                                   host_round_trip_share)
from ipusim.simulation import Timeline
from ipusim.work import Execution, Work

MB = 1e6
MAX_STEP_ROWS = 20
MEMORY_PARTS = ("weights", "optimizer", "accumulators", "stash", "code", "exchange")


def figures(timeline: Timeline) -> dict[str, float]:
    """The headline figures, unit-suffixed as in :meth:`Timeline.summary`, as plain floats."""
    out = {name: float(value) for name, value in timeline.summary().items()}
    out["host_link_occupancy"] = host_link_occupancy(timeline)
    out["steps"] = float(timeline.steps)
    return out


def to_cycles(ps: float, timeline: Timeline) -> int:
    """Simulated picoseconds as cycles of the IPU clock."""
    return int(round(ps * timeline.system.ipu.clock_hz / PS_PER_S))


def step_cycles(timeline: Timeline) -> pd.DataFrame:
    """Cycles of every program step (call to the model), and per kind of event.

    Columns: step, start_cycle, cycles, duration(us), then one ``<kind>_cycles``
    column per kind: the cycles an IPU spent on that kind in the step, as a
    mean over the engine's IPUs.
    """
    events = timeline.events
    grouped = events.groupby("step")
    start, end = grouped["start_ps"].min(), grouped["end_ps"].max()
    table = pd.DataFrame({
        "start_cycle": [to_cycles(ps, timeline) for ps in start],
        "cycles": [to_cycles(ps, timeline) for ps in end - start],
        "duration(us)": (end - start) / 1e6,
    }, index=start.index)
    busy = (events["end_ps"] - events["start_ps"]).groupby(
        [events["step"], events["kind"].astype(str)]).sum().unstack(fill_value=0)
    busy = busy.reindex(columns=[k for k in KINDS if k in busy.columns])
    for kind in busy.columns:
        table[f"{kind}_cycles"] = [to_cycles(ps / timeline.num_ipus, timeline) for ps in busy[kind]]
    table.index.name = "step"
    return table.reset_index()


def memory_per_stage(timeline: Timeline, model: MemoryModel = MemoryModel()) -> pd.DataFrame:
    """Bytes each (merged) stage needs, by category, without the per-IPU runtime code.

    Each stage is what :func:`ipusim.memory.memory_per_ipu` counts for it on
    its IPU: measured by placing every stage on an IPU of its own.
    """
    merged = timeline.run.scheduled(timeline.work)
    alone = Work(tuple(replace(stage, ipu=k) for k, stage in enumerate(merged.stages)),
                 merged.micro_batch_size, merged.input_bytes_per_sample,
                 merged.output_bytes_per_sample)
    table = memory_per_ipu(alone, timeline.run, timeline.system, model)
    table["code"] -= model.code_bytes_per_tile * timeline.system.ipu.tiles
    table["total"] = table[list(MEMORY_PARTS)].sum(axis=1)
    table.insert(0, "ipu", [stage.ipu for stage in merged.stages])
    table.insert(0, "name", [stage.name for stage in merged.stages])
    table.index.name = "stage"
    return table.drop(columns="capacity")


def text_summary(timeline: Timeline, loader_items_per_s: float | None = None,
                 options: dict | None = None, verdict: Verdict | None = None) -> str:
    """The whole summary as text."""
    verdict = verdict or bottleneck(timeline, loader_items_per_s)
    sections = [
        "ipusim profile summary (simulated timings, not measured on hardware)",
        _target(timeline), _engine(timeline, options), _memory(timeline),
        _execution(timeline), _figures(timeline, loader_items_per_s), _verdict(verdict),
    ]
    return "\n\n".join(sections) + "\n"


def _rows(pairs: list[tuple[str, str]]) -> str:
    width = max([28] + [len(name) + 2 for name, _ in pairs])
    return "\n".join(f"  {name + ':':<{width}}{value}" for name, value in pairs)


def _target(timeline: Timeline) -> str:
    system, ipu = timeline.system, timeline.system.ipu
    return "Target:\n" + _rows([
        ("Type", f"{ipu.name} (simulated)"),
        ("Number of IPUs", f"{system.num_ipus} ({timeline.num_ipus} used by this engine)"),
        ("Tiles per IPU", f"{ipu.tiles:,}"),
        ("Total tiles", f"{ipu.tiles * system.num_ipus:,}"),
        ("Memory per tile", f"{ipu.sram_per_tile_bytes / 1024:,.1f} KiB"),
        ("Memory per IPU", f"{ipu.sram_bytes / MB:,.1f} MB"),
        ("Clock", f"{ipu.clock_hz / 1e9:.2f} GHz"),
        ("Host links", f"{system.num_host_links} ({system.ipus_per_host_link} IPUs per link, "
                       f"{system.host_link_bandwidth / 1e9:.1f} GB/s each way)"),
    ])


def _engine(timeline: Timeline, options: dict | None) -> str:
    run, work = timeline.run, timeline.work
    text = "Engine:\n" + _rows([
        ("Mode", "training" if run.training else "inference"),
        ("Execution", execution_text(timeline)),
        ("Replicas", str(run.replicas)),
        ("Device iterations", str(run.device_iterations)),
        ("Gradient accumulation", str(run.gradient_accumulation)),
        ("Micro-batch size", str(work.micro_batch_size)),
        ("Sync pattern", run.sync_pattern.value),
        ("Synthetic data", "yes" if run.synthetic_data else "no"),
        ("Recomputation", "yes" if run.recompute else "no"),
        ("Instance", str(timeline.instance)),
    ])
    if options:
        text += "\n  Options (as the script set them):\n" + "\n".join(
            f"    {key} = {value}" for key, value in options.items())
    return text


def execution_text(timeline: Timeline) -> str:
    """How the model runs: its execution strategy, stages and IPUs per replica; a model
    on one IPU is just that, whatever strategy it defaults to."""
    run, work = timeline.run, timeline.work
    stages = len(run.scheduled(work).stages)
    if work.ipus_per_replica == 1 and run.execution is Execution.SHARDED:
        return "single IPU" + (f", {stages} stages" if stages > 1 else "")
    return (f"{run.execution.value}, {stages} stage(s) on {work.ipus_per_replica} IPU(s) "
            "per replica")


def _memory(timeline: Timeline) -> str:
    per_ipu = memory_per_ipu(timeline.work, timeline.run, timeline.system)
    table = per_ipu[list(MEMORY_PARTS) + ["total", "capacity"]] / MB
    table["used"] = (per_ipu["total"] / per_ipu["capacity"]).map("{:.1%}".format)
    stages = memory_per_stage(timeline)
    stage_table = stages[list(MEMORY_PARTS) + ["total"]] / MB
    stage_table.insert(0, "ipu", stages["ipu"])
    stage_table.insert(0, "name", stages["name"])
    return ("Memory usage per IPU of one replica (MB):\n"
            + _indent(table.to_string(float_format="{:,.2f}".format))
            + "\n\nMemory per stage (MB, runtime code per tile not included):\n"
            + _indent(stage_table.to_string(float_format="{:,.2f}".format)))


def _execution(timeline: Timeline) -> str:
    steps = step_cycles(timeline)
    total = to_cycles(timeline.duration_ps, timeline)
    grouped = grouped_steps(steps)
    shown = grouped.head(MAX_STEP_ROWS)
    text = (f"Execution (cycles at {timeline.system.ipu.clock_hz / 1e9:.2f} GHz):\n" + _rows([
        ("Total cycles", f"{total:,}"),
        ("Program steps (calls)", str(timeline.steps)),
        ("Events", f"{len(timeline.events):,}"),
    ]) + "\n\n  Program steps (consecutive steps of equal cycles on one row):\n"
        + _indent(shown.to_string(index=False, float_format="{:,.3f}".format), 4))
    if len(grouped) > MAX_STEP_ROWS:
        text += f"\n    ... {len(grouped) - MAX_STEP_ROWS} more row(s)"
    kinds = [c for c in steps.columns if c.endswith("_cycles") and c != "start_cycle"]
    per_kind = steps[kinds].sum()
    per_kind.index = [name.removesuffix("_cycles") for name in kinds]
    text += ("\n\n  Cycles by kind of event (mean per IPU, all steps):\n"
             + "\n".join(f"    {kind:<16}{cycles:>16,}" for kind, cycles in per_kind.items()))
    return text


def grouped_steps(steps: pd.DataFrame) -> pd.DataFrame:
    """The program steps of :func:`step_cycles`, consecutive steps of equal cycles on
    one row: steps ("0-9"), count, start_cycle of the first, cycles and duration(us) of
    each."""
    run = (steps["cycles"] != steps["cycles"].shift()).cumsum()
    grouped = steps.groupby(run, sort=False).agg(
        first=("step", "min"), last=("step", "max"), count=("step", "size"),
        start_cycle=("start_cycle", "min"), cycles=("cycles", "first"),
        duration=("duration(us)", "first"))
    label = grouped["first"].astype(str).where(
        grouped["count"] == 1, grouped["first"].astype(str) + "-" + grouped["last"].astype(str))
    return pd.DataFrame({"steps": label.to_numpy(), "count": grouped["count"].to_numpy(),
                         "start_cycle": grouped["start_cycle"].to_numpy(),
                         "cycles": grouped["cycles"].to_numpy(),
                         "duration(us)": grouped["duration"].to_numpy()})


def figure_rows(timeline: Timeline, loader_items_per_s: float | None) -> list[tuple[str, str]]:
    """The headline figures as (name, formatted value), for the text and HTML reports."""
    f = figures(timeline)
    rows = [
        ("Throughput", f"{f['throughput(items/s)']:,.1f} items/s"),
        ("Latency of a micro-batch (mean)", f"{f['latency(us)']:,.1f} µs"),
        ("Utilisation (mean over IPUs)", f"{f['utilisation']:.1%}"),
        ("Pipeline bubble", f"{f['bubble_fraction']:.1%}"
         if timeline.run.execution is Execution.PIPELINED else "— (not pipelined)"),
        ("Host I/O share", f"{f['host_io_share']:.1%}"),
        ("Host link occupancy (busiest link)", f"{f['host_link_occupancy']:.1%}"),
        ("Host round trip share", f"{host_round_trip_share(timeline):.1%}"),
        ("Sync wait share", f"{f['sync_wait_share']:.1%}"),
        ("Simulated duration", f"{f['duration(ms)']:,.3f} ms"),
        ("Items", f"{int(f['items']):,}"),
    ]
    if loader_items_per_s is not None:
        rows.append(("Data loader throughput", f"{loader_items_per_s:,.1f} items/s"))
    return rows


def _figures(timeline: Timeline, loader_items_per_s: float | None) -> str:
    return "Figures:\n" + _rows(figure_rows(timeline, loader_items_per_s))


def _verdict(verdict: Verdict) -> str:
    advice = (textwrap.fill(line, 96, initial_indent="  - ", subsequent_indent="    ")
              for line in verdict.advice)
    headline = textwrap.fill(verdict.headline, 96, initial_indent="  ", subsequent_indent="  ")
    return f"Bottleneck: {verdict.kind}\n{headline}\n" + "\n".join(advice)


def _indent(text: str, spaces: int = 2) -> str:
    return "\n".join(" " * spaces + line for line in text.splitlines())
