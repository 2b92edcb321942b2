"""The HTML report: verdict, figures table, pipeline timeline, utilisation, memory.

One self-contained file that opens offline (the scaffold every page shares,
:mod:`ipusim.report.page`: plotly.js embedded once, the style, a render check a
headless browser reads); no script or style is fetched from the network.
"""
from __future__ import annotations

import html
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import plotly
import plotly.graph_objects as go
import plotly.io as pio

from ipusim.analysis.graph_profile import GraphProfile
from ipusim.analysis.timeline import Timeline
from ipusim.cost.cost_model import PS_PER_US
from ipusim.plan.setting_names import SettingNames
from ipusim.report import sortable_table
from ipusim.report.detail import Detail, aggregates, shown
from ipusim.report.figures import (
    MAX_EVENTS_PER_LANE,
    lane_positions,
    memory_figure,
    memory_table_figure,
    plotted_window,
    timeline_figure,
    timeline_name,
    utilisation_figure,
)
from ipusim.report.files import write_atomically
from ipusim.report.operators import OPERATORS_SCRIPT, operators_section
from ipusim.report.page import PLOT_CONFIG, page
from ipusim.report.program_views import program_views_section
from ipusim.report.summary import figure_rows, run_shape
from ipusim.report.tile_views import tile_views_section
from ipusim.report.verdict import Verdict, bottleneck

#: The report's own style, after the style every page shares.
STYLE = """
table.what-if { border-collapse: collapse; background: white; margin-top: 0.8rem; width: 100%;
                box-shadow: 0 1px 3px rgba(0,0,0,0.12); font-size: 0.9rem;
                table-layout: fixed; }
table.what-if th:nth-child(1) { width: 30%; }
table.what-if th:nth-child(2) { width: 34%; }
table.what-if code { white-space: normal; overflow-wrap: anywhere; font-size: 0.8rem; }
table.what-if caption { text-align: left; font-weight: 600; padding: 0.3rem 0; }
table.what-if td, table.what-if th { padding: 0.2rem 0.7rem; border-bottom: 1px solid #eee;
                                     text-align: left; }
table.what-if td:nth-child(n+3) { text-align: right; font-variant-numeric: tabular-nums; }
table.what-if tr.limit { background: #fff4e5; font-weight: 600; }
.top-operators, .operators-none, .roofline-note, .operator-filter { background: white;
  padding: 0.6rem 1.2rem; box-shadow: 0 1px 3px rgba(0,0,0,0.12); margin-top: 0.8rem; }
.top-operators { border-left: 6px solid #1f77b4; }
.top-operators ol { margin: 0.4rem 0 0; padding-left: 1.4rem; }
.top-operators .busiest { margin: 0.4rem 0 0; color: #555; font-size: 0.9rem; }
.top-operators .share { display: inline-block; min-width: 3.6rem; font-weight: 600;
                        font-variant-numeric: tabular-nums; }
.top-operators .where, .roofline-note { color: #555; }
.operator-filter { border-left: 6px solid #ff7f0e; display: flex; gap: 1rem;
                   align-items: center; justify-content: space-between; }
.operator-filter[hidden] { display: none; }
.operator-scroll { max-height: 36rem; overflow: auto; margin-top: 0.8rem; background: white;
                   box-shadow: 0 1px 3px rgba(0,0,0,0.12); }
table.operators { border-collapse: collapse; width: 100%; font-size: 0.85rem; }
table.operators th { position: sticky; top: 0; background: #f0f0f0; user-select: none;
                     padding: 0; text-align: left; white-space: nowrap; }
table.operators td { padding: 0.2rem 0.5rem; border-bottom: 1px solid #eee; white-space: nowrap; }
table.operators caption { text-align: left; padding: 0.3rem 0.5rem; color: #555; }
table.operators td:nth-child(1), table.operators td:nth-child(n+6) {
  text-align: right; font-variant-numeric: tabular-nums; }
table.operators tr.clicked { background: #fff4e5; }
table.operators td:last-child { text-align: left; }
table.operators details ol { margin: 0.2rem 0; padding-left: 1.6rem; font-size: 0.8rem; }
table.operators li.step-sync, table.operators li.step-exchange { color: #777; }
table.operators li.step-glue .step-name { color: #b35900; }
table.operators .source { color: #555; }
.program-tree-box { background: white; box-shadow: 0 1px 3px rgba(0,0,0,0.12); flex: 0 0 34%;
                    max-height: 28rem; overflow: auto; font-size: 0.8rem;
                    padding: 0.4rem 0.8rem; }
ol.program-tree, ol.program-tree ol { list-style: none; padding-left: 1rem; margin: 0.1rem 0; }
.program-kind { font-weight: 600; }
"""


def render_html(timeline: Timeline, loader_items_per_s: float | None = None,
                title: str | None = None, verdict: Verdict | None = None,
                max_events_per_lane: int = MAX_EVENTS_PER_LANE,
                detail: Detail | None = None, names: SettingNames | None = None,
                loader_spread: tuple[float, float] | None = None,
                graph: GraphProfile | None = None,
                timing_only: bool = False,
                contexts: dict[str, list[dict]] | None = None) -> str:
    """The report as one HTML string with plotly.js embedded.

    The timeline draws the events ``detail`` shows (default
    :meth:`Detail.from_environment`) and a grey box labelled aggregated for the rest;
    the verdict's advice names the settings by ``names`` (default: ipusim's names);
    ``graph``, the run's graph profile when it was worked out (with ``profile.pop``),
    adds the memory-by-tile and liveness views and the step's program tree and execution
    trace; ``contexts``, the operator runs' debug
    contexts by name, each operator's source in the operators' table.
    The header says what the run is (its batching, ``timing_only``).
    """
    verdict = verdict or bottleneck(timeline, loader_items_per_s, names)
    title = title or ("training" if timeline.run.training else "inference")
    plots = [
        ("timeline", _detailed_timeline_figure(timeline, max_events_per_lane, detail)),
        ("utilisation", utilisation_figure(timeline)),
        ("memory", memory_figure(timeline)),
    ]
    divs = {name: pio.to_html(fig, include_plotlyjs=False, full_html=False, div_id=name,
                              config=PLOT_CONFIG) for name, fig in plots}
    system = timeline.system
    subtitle = (f"{system.ipu.name} × {system.num_ipus}, {timeline.num_ipus} IPU(s) used, "
                f"{timeline.steps} step(s), {len(timeline.events):,} simulated events; "
                f"{run_shape(timeline, timing_only)}")
    return page(title, f"{subtitle} · simulated timings, not hardware measurements", f"""\
<div class="top">
<section><h2>Bottleneck</h2>
{_verdict_html(verdict)}</section>
<section><h2>Figures</h2>
{_figures_html(timeline, loader_items_per_s, loader_spread)}</section>
</div>
<h2>{timeline_name(timeline)}</h2>
<div class="figure">{divs["timeline"]}</div>
<h2>Utilisation and memory</h2>
<div class="row"><div class="figure">{divs["utilisation"]}</div>
<div class="figure">{divs["memory"]}</div></div>
{operators_section(timeline, PLOT_CONFIG, contexts)}
{tile_views_section(graph, PLOT_CONFIG) if graph is not None else ""}
{program_views_section(graph, PLOT_CONFIG) if graph is not None else ""}
<script>{sortable_table.SCRIPT}{OPERATORS_SCRIPT}</script>
<footer>Generated by ipusim with plotly {plotly.__version__} (plotly.js embedded, works offline).
Hover a box for its duration, stage, micro-batch, step, pipeline cycle, bytes and FLOPs; click a
compute box for its stage's operators; drag to zoom, double-click to reset.</footer>
""", style=STYLE)


def _detailed_timeline_figure(timeline: Timeline, max_events_per_lane: int,
                              detail: Detail | None):
    """The timeline figure at ``detail``: the events shown one by one, then one grey
    box per IPU, lane and step for the aggregated rest."""
    detail = Detail.from_environment() if detail is None else detail
    keep = shown(timeline.events, detail)
    if keep.all():
        return timeline_figure(timeline, max_events_per_lane)
    plotted = replace(timeline, events=timeline.events[keep])
    figure = timeline_figure(plotted, max_events_per_lane)
    window = plotted_window(plotted, max_events_per_lane).events
    positions = lane_positions(plotted, window)[0]
    boxes = aggregates(timeline.events, detail, keep)
    last = window["end_ps"].max() if len(window) else 0
    on_rows = [(positions[ipu, lane], box) for ipu, lane, box in zip(
        boxes["ipu"], boxes["lane"], boxes.itertuples(index=False)) if (ipu, lane) in positions
        and box.start_ps <= last]
    if on_rows:
        rows, chosen = zip(*on_rows)
        start = np.array([box.start_ps for box in chosen]) / PS_PER_US
        figure.add_trace(go.Bar(
            name="aggregated", orientation="h", y=np.array(rows, np.int32),
            base=np.round(start, 3),
            x=np.array([box.end_ps - box.start_ps for box in chosen]) / PS_PER_US,
            width=0.6, marker={"color": "rgba(150,150,150,0.35)",
                               "line": {"color": "#777", "width": 1}},
            text=[f"aggregated: {box.events:,} events" for box in chosen],
            textposition="inside", insidetextanchor="middle",
            customdata=[[box.kinds, 100 * box.busy_ps / max(box.end_ps - box.start_ps, 1)]
                        for box in chosen],
            hovertemplate=("<b>%{text}</b><br>%{customdata[0]}<br>busy %{customdata[1]:.0f}% "
                           "of %{base:,.3f} µs + %{x:,.3f} µs<br>IPUSIM_TRACE_DETAIL=full "
                           "shows every event<extra></extra>")))
    return figure


def write_html(timeline: Timeline, path: str | Path, **kwargs) -> Path:
    """Write :func:`render_html` to ``path`` (parents created, atomically) and return the
    path."""
    return write_atomically(path, render_html(timeline, **kwargs))


def _verdict_html(verdict: Verdict) -> str:
    advice = "".join(f"<li>{html.escape(line)}</li>" for line in verdict.advice)
    return (f'<div class="verdict {verdict.kind}"><span class="badge">{verdict.kind}</span>'
            f"{html.escape(verdict.headline)}<ul>{advice}</ul></div>{_what_if_html(verdict)}")


def _what_if_html(verdict: Verdict) -> str:
    """Every change the verdict tried, fastest first, and those the run cannot make."""
    if not verdict.what_if:
        return ""
    limit = ' class="limit"'
    rows = "".join(
        f"<tr{limit if w['limit'] == verdict.kind else ''}>"
        f"<td>{html.escape(w['change'])}</td>"
        f"<td><code>{html.escape(w['option'] or '')}</code>"
        f"{'' if w['value'] is None else ' → ' + html.escape(str(w['value']))}</td>"
        f"<td>{w['items_per_s']:,.0f}</td><td>{w['step_time_ms']:,.3f}</td>"
        f"<td>{w['speedup']:.2f}×</td></tr>" for w in verdict.what_if)
    left = "".join(f"<li>{html.escape(item['change'])}: {html.escape(item['reason'])}</li>"
                   for item in verdict.left_out)
    left_out = (f"<details><summary>Not tried ({len(verdict.left_out)})</summary>"
                f"<ul>{left}</ul></details>") if left else ""
    return ('<table class="what-if"><caption>What if: the same calls simulated again with '
            "one change</caption><tr><th>change</th><th>setting</th><th>items/s</th>"
            f"<th>step (ms)</th><th>speed-up</th></tr>{rows}</table>{_why_highlighted(verdict)}"
            f"{left_out}")


def _why_highlighted(verdict: Verdict) -> str:
    """The rule that picked the highlighted row, said where it is not the fastest."""
    proof = verdict.proof
    if proof is None or proof is verdict.what_if[0]:
        return ""
    return (f'<p class="why-highlighted">The highlighted row ({html.escape(proof["change"])}) '
            f"proves the verdict, {html.escape(verdict.kind)}: the verdict names the limit of "
            "the largest gain among the changes to how the model runs. More replicas on idle "
            "IPUs count only when none of those gains 5%, four times the gradient accumulation "
            "yields to four times the device iterations where it gains no more than 5% beyond "
            "them, and what no setting changes (compute, the IPU-Links) only when no setting "
            "gains 5%; where nothing gains 5%, the verdict is what bounds the run. So a faster "
            "row above it may not be the verdict's.</p>")


def render_out_of_memory_html(table: pd.DataFrame, message: str, title: str) -> str:
    """The page of a model that does not fit: why, and every IPU's memory against its
    SRAM (over 100% in red). Nothing was simulated, so it has no timeline."""
    memory = pio.to_html(memory_table_figure(table), include_plotlyjs=False, full_html=False,
                         div_id="memory", config=PLOT_CONFIG)
    return page(title, "the model does not fit: nothing was simulated", f"""\
<section><h2>Out of memory</h2>
<div class="verdict out_of_memory"><span class="badge">out_of_memory</span>{html.escape(message)}
</div></section>
<h2>Memory per IPU</h2>
<div class="figure">{memory}</div>""")


def _figures_html(timeline: Timeline, loader_items_per_s: float | None,
                  loader_spread: tuple[float, float] | None) -> str:
    rows = figure_rows(timeline, loader_items_per_s, loader_spread)
    body = "".join(f'<tr><th>{html.escape(name)}</th>'
                   f'<td class="value">{html.escape(value)}</td></tr>' for name, value in rows)
    return f'<table class="figures">{body}</table>'
