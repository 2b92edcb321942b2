"""A text summary of a run in the spirit of Poplar's profile summary.

Target, engine, memory per IPU and per stage, program steps with their
cycles (simulated time at the IPU clock), the headline figures and the
bottleneck verdict, as plain text a person reads in a terminal. The figures
are the timeline's (:mod:`ipusim.analysis.headline`); this module only formats them.
"""
from __future__ import annotations

import textwrap

from ipusim.analysis.headline import cycles_by_kind, delivered_items_per_s, grouped_steps
from ipusim.analysis.timeline import Timeline
from ipusim.cost.work import Execution
from ipusim.plan.memory import MB, MEMORY_PARTS
from ipusim.plan.setting_names import SettingNames
from ipusim.report.verdict import Verdict, bottleneck

MAX_STEP_ROWS = 20


def text_summary(timeline: Timeline, loader_items_per_s: float | None = None,
                 options: dict | None = None, verdict: Verdict | None = None,
                 names: SettingNames | None = None,
                 loader_spread: tuple[float, float] | None = None,
                 timing_only: bool = False) -> str:
    """The whole summary as text; the verdict's advice names the settings by
    ``names`` (default: ipusim's names); ``loader_spread``: the lowest and highest
    rate of the loader's measured windows of steps (see :func:`figure_rows`);
    ``timing_only``: the run computed no tensors, only the timeline."""
    verdict = verdict or bottleneck(timeline, loader_items_per_s, names)
    sections = [
        "ipusim profile summary (simulated timings, not measured on hardware)\n"
        + run_shape(timeline, timing_only),
        _target(timeline), _engine(timeline, options, timing_only), _memory(timeline),
        _execution(timeline), _figures(timeline, loader_items_per_s, loader_spread),
        _time_per_ipu(timeline), _verdict(verdict),
    ]
    return "\n\n".join(sections) + "\n"


def run_shape(timeline: Timeline, timing_only: bool = False) -> str:
    """What the run is, in one line: its batching and whether it computed any tensors,
    as the exit line and every report's header say it."""
    run = timeline.run
    shape = (f"micro-batch size {timeline.work.micro_batch_size}, device iterations "
             f"{run.device_iterations}, replicas {run.replicas}, gradient accumulation "
             f"{run.gradient_accumulation}")
    return shape + (f", {TIMING_ONLY}" if timing_only else "")


# What a timing-only run is, where a report or the exit line says it was one.
TIMING_ONLY = "timing-only (no tensors computed: outputs and losses are placeholders)"


def throughput_words(device_items_per_s: float, loader_items_per_s: float | None,
                     digits: int = 0) -> str:
    """The run's one throughput (:func:`~ipusim.analysis.headline.delivered_items_per_s`)
    and which it is: fed by the data loader, or the IPUs alone, with the IPUs' own
    where the two differ. What the exit line, the reports and their index give."""
    delivered = delivered_items_per_s(device_items_per_s, loader_items_per_s)
    figure = f"{delivered:,.{digits}f} items/s"
    if loader_items_per_s is None:
        return f"{figure} (the IPUs alone; no data loader measured)"
    if delivered < device_items_per_s:
        return f"{figure} fed by the data loader (the IPUs alone {device_items_per_s:,.{digits}f})"
    return f"{figure} (the IPUs alone; the data loader keeps up)"


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


def _engine(timeline: Timeline, options: dict | None, timing_only: bool) -> str:
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
        ("Timing-only", "yes: no tensors computed, outputs and losses are placeholders"
         if timing_only else "no"),
    ])
    if options:
        text += "\n  Options (as the script set them):\n" + "\n".join(
            f"    {key} = {value}" for key, value in options.items())
    return text


def execution_text(timeline: Timeline) -> str:
    """How the model runs: its execution strategy, stages and IPUs per replica; a model
    on one IPU is just that, whatever strategy it defaults to."""
    run, work = timeline.run, timeline.work
    stages = timeline.plan.forward_stages
    if work.ipus_per_replica == 1 and run.execution is Execution.SHARDED:
        return "single IPU" + (f", {stages} stages" if stages > 1 else "")
    return (f"{run.execution.value}, {stages} stage(s) on {work.ipus_per_replica} IPU(s) "
            "per replica")


def _memory(timeline: Timeline) -> str:
    per_ipu = timeline.memory_per_ipu()
    table = per_ipu[list(MEMORY_PARTS) + ["total", "capacity"]] / MB
    table["used"] = per_ipu["used"].map("{:.1%}".format)
    stages = timeline.memory_per_stage()
    stage_table = stages[list(MEMORY_PARTS) + ["total"]] / MB
    stage_table.insert(0, "ipu", stages["ipu"])
    stage_table.insert(0, "name", stages["name"])
    return ("Memory usage per IPU of one replica (MB):\n"
            + _indent(table.to_string(float_format="{:,.2f}".format))
            + "\n\nMemory per stage (MB, runtime code per tile not included):\n"
            + _indent(stage_table.to_string(float_format="{:,.2f}".format)))


def _execution(timeline: Timeline) -> str:
    steps = timeline.step_cycles()
    total = timeline.to_cycles(timeline.duration_ps)
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
    per_kind = cycles_by_kind(steps)
    text += ("\n\n  Cycles by kind of event (mean per IPU, all steps):\n"
             + "\n".join(f"    {kind:<16}{cycles:>16,}" for kind, cycles in per_kind.items()))
    return text


def _host_side(timeline: Timeline) -> str:
    """The host's part of every call, as the cost model prices it (docs/cost-model.md)."""
    cost = timeline.plan.cost
    return (f"{cost.host_call_ps / 1e6:,.0f} µs (PopTorch's Python path "
            f"{cost.poptorch_call_ps / 1e6:,.0f} µs, the engine's run "
            f"{cost.engine_run_ps / 1e6:,.0f} µs)")


def figure_rows(timeline: Timeline, loader_items_per_s: float | None,
                loader_spread: tuple[float, float] | None = None) -> list[tuple[str, str]]:
    """The headline figures as (name, formatted value), for the text and HTML reports.

    The throughput is the run's one figure (:func:`throughput_words`): with the data
    loader's rate, the IPUs' own or the loader's where that is lower, the figure the
    what-ifs and a run made with a change are compared by. ``loader_spread`` is the
    lowest and highest rate of the loader's windows of steps, when it was measured
    rather than given."""
    f = timeline.figures()
    rows = [
        ("Throughput", throughput_words(f["throughput(items/s)"], loader_items_per_s, 1)),
        ("Latency of a micro-batch (mean)",
         f"{f['latency(us)']:,.1f} µs (over every micro-batch, from its input to its output; "
         f"the timeline's arrow is one micro-batch's)"),
        ("Utilisation (mean over IPUs)", f"{f['utilisation']:.1%}"),
        ("Pipeline bubble", f"{f['bubble_fraction']:.1%}"
         if timeline.run.execution is Execution.PIPELINED else "— (not pipelined)"),
        ("Host I/O share", f"{f['host_io_share']:.1%}"),
        ("Host link occupancy (busiest link)", f"{f['host_link_occupancy']:.1%}"),
        ("Host round trip share", f"{f['host_round_trip_share']:.1%}"),
        ("Host side of a call", _host_side(timeline)),
        ("Sync wait share", f"{f['sync_wait_share']:.1%}"),
        ("Simulated duration", f"{f['duration(ms)']:,.3f} ms"),
        ("Items", f"{int(f['items']):,}"),
    ]
    if loader_items_per_s is not None:
        spread = ("" if loader_spread is None else
                  f" (measured on this host: its windows of steps {loader_spread[0]:,.0f} to "
                  f"{loader_spread[1]:,.0f}; Simulation.loaderRate sets it)")
        rows.append(("Data loader throughput", f"{loader_items_per_s:,.1f} items/s{spread}"))
    return rows


def _figures(timeline: Timeline, loader_items_per_s: float | None,
             loader_spread: tuple[float, float] | None) -> str:
    return "Figures:\n" + _rows(figure_rows(timeline, loader_items_per_s, loader_spread))


def _time_per_ipu(timeline: Timeline, most: int = 16) -> str:
    """Where each IPU's time goes (shares of the span): an IPU that waits while
    another computes shows here, as the share it does not compute."""
    shares = timeline.category_times()
    shares = shares.loc[:, (shares > 0).any()]
    shares.insert(0, "not computing", 1 - shares["compute"])
    shown = shares.head(most).map(lambda share: f"{share:.1%}")
    more = (f"\n  ... and {len(shares) - most} more IPUs (events.csv.gz holds them all)"
            if len(shares) > most else "")
    return "Time per IPU (share of the simulated span):\n" + _indent(shown.to_string()) + more


def _verdict(verdict: Verdict) -> str:
    advice = (textwrap.fill(line, 96, initial_indent="  - ", subsequent_indent="    ")
              for line in verdict.advice)
    headline = textwrap.fill(verdict.headline, 96, initial_indent="  ", subsequent_indent="  ")
    return f"Bottleneck: {verdict.kind}\n{headline}\n" + "\n".join(advice) + _what_if(verdict)


def _what_if(verdict: Verdict) -> str:
    """The changes the verdict tried, fastest first, as a table; those left out below."""
    if not verdict.what_if:
        return ""
    width = max(len(w["change"]) for w in verdict.what_if)
    lines = ["", "What if (the same calls simulated again with one change):",
             f"  {'change':<{width}}  {'items/s':>12}  {'step (ms)':>10}  speed-up  setting"]
    for w in verdict.what_if:
        setting = "" if w["option"] is None else w["option"] + (
            "" if w["value"] is None else f" -> {w['value']}")
        lines.append(f"  {w['change']:<{width}}  {w['items_per_s']:>12,.0f}  "
                     f"{w['step_time_ms']:>10,.3f}  {w['speedup']:>7.2f}x  {setting}".rstrip())
    lines += [f"  not tried: {item['change']} ({item['reason']})" for item in verdict.left_out]
    return "\n".join(lines)


def _indent(text: str, spaces: int = 2) -> str:
    return "\n".join(" " * spaces + line for line in text.splitlines())
