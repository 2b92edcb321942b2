"""The sweep report: one offline HTML page to choose a configuration from.

It reads a sweep's results table (a row per point: see
:mod:`ipusim.explore.design_point`) and draws what people choose by: the Pareto
front of throughput against memory, throughput against IPUs and the pipeline
bubble against gradient accumulation, each only where it says something (a
figure whose axis does not change over the sweep, or a bubble where nothing
is pipelined, is left out, and the page says why). Below them, the points
PopTorch would run, in a table that sorts and filters in the browser, each
with a details row; and apart, the points it would refuse (its checks, or out
of memory) with the reason. A point with its own timeline report links to it,
from the table and by clicking its marker; the others' markers open their row.
plotly.js is embedded, as in the run report.

The table's columns name its settings; the one that holds the gradient
accumulation is ``gradient_accumulation``, or the column a
:class:`~ipusim.plan.run_config.SettingNames` gives for it.
"""
from __future__ import annotations

import html
import json
from pathlib import Path

import pandas as pd
import plotly
import plotly.graph_objects as go
import plotly.io as pio

from ipusim.explore.design_point import OUT_OF_MEMORY, accepted, pareto_front, refusals
from ipusim.plan.setting_names import SettingNames
from ipusim.report import sortable_table
from ipusim.report.page import PLOT_CONFIG, page
from ipusim.report.sweep_table import (
    MEMORY,
    SCRIPT,
    STYLE,
    THROUGHPUT,
    figure_columns,
    filter_html,
    number,
    pipelined,
    refusal_columns,
    settings_columns,
    table_html,
    text,
    varying_settings,
)

TITLES = {"pareto": "Throughput against memory (fullest IPU)",
          "throughput_vs_ipus": "Throughput against IPUs",
          "bubble_vs_ga": "Pipeline bubble against gradient accumulation"}

# A click on a marker opens the point's timeline report where it has one, else its row.
_OPEN_ON_CLICK = """document.querySelectorAll(".js-plotly-plot").forEach(function (gd) {
  gd.on("plotly_click", function (data) {
    var point = data.points[0].customdata;
    if (!point) { return; }
    if (point[1]) { window.open(point[1], "_blank"); } else { window.ipusimSweep.open(point[0]); }
  });
});"""


def _constant(part: pd.DataFrame, column: str, what: str, unit: str = "") -> str | None:
    """Why a figure with ``column`` on an axis is left out: the column has one value."""
    values = part[column].dropna().unique()
    if len(values) == 1:
        return f"every point has the same {what}: {number(values[0])}{unit}"
    return None


def _plans(table: pd.DataFrame, ga: str) -> dict[str, tuple[pd.DataFrame, str, str] | str]:
    """Each figure's points and axes (the rows, x, y), or why it is left out. Memory
    shows the points that do not fit too (how far over the SRAM they are); the
    others, only the points PopTorch would run."""
    ran = table[table["error"].isna() & table[THROUGHPUT].notna()]
    runs = ran[accepted(ran)]
    if ran.empty:
        return {name: "no point ran: PopTorch refuses every one (see Refused points)"
                for name in TITLES}
    plans: dict[str, tuple[pd.DataFrame, str, str] | str] = {
        "pareto": (_constant(ran, MEMORY, "memory on its fullest IPU", " MB")
                   or _constant(ran, THROUGHPUT, "throughput", " items/s")
                   or (ran, MEMORY, THROUGHPUT))}
    if runs.empty:
        return {**plans, **{name: "no point fits in memory (see Refused points)"
                            for name in ("throughput_vs_ipus", "bubble_vs_ga")}}
    plans["throughput_vs_ipus"] = (_constant(runs, "ipus", "number of IPUs")
                                   or _constant(runs, THROUGHPUT, "throughput", " items/s")
                                   or (runs, "ipus", THROUGHPUT))
    piped = runs[pipelined(runs)]
    if piped.empty:
        plans["bubble_vs_ga"] = "no point is pipelined, so none has a pipeline bubble"
    elif ga not in table:
        plans["bubble_vs_ga"] = "the gradient accumulation is not a setting of this sweep"
    else:
        piped = piped.assign(**{ga: pd.to_numeric(piped[ga], errors="coerce")})
        plans["bubble_vs_ga"] = (
            _constant(piped, ga, "gradient accumulation")
            or _constant(piped, "bubble_fraction", "pipeline bubble")
            or (piped, ga, "bubble_fraction"))
    return plans


def _label(row: pd.Series, names: list[str]) -> str:
    return "<br>".join(f"{html.escape(name)} = {html.escape(text(row[name]))}"
                       for name in names) or f"point {row['point']}"


def _scatter(table: pd.DataFrame, x: str, y: str, names: list[str], links: dict[str, str],
             title: str, xaxis: str, yaxis: str, front: pd.Index | None = None) -> go.Figure:
    figure = go.Figure()
    fits = accepted(table)
    for label, chosen, colour, symbol in (("out of memory", ~fits, "#d62728", "x"),
                                          ("fits", fits, "#1f77b4", "circle")):
        part = table[chosen & table[y].notna()]
        if part.empty:
            continue
        figure.add_trace(go.Scatter(
            x=part[x], y=part[y], mode="markers", name=label,
            marker={"color": colour, "symbol": symbol, "size": 8,
                    "opacity": 0.85 if label == "fits" else 0.6},
            customdata=[[row["point_id"], links.get(row["point_id"], "")]
                        for _, row in part.iterrows()],
            hovertext=[_label(row, names) for _, row in part.iterrows()],
            hovertemplate="%{hovertext}<br>" + f"{xaxis}: %{{x:,.4g}}<br>{yaxis}: %{{y:,.4g}}"
                          "<extra>point %{customdata[0]}</extra>"))
    if front is not None and len(front):
        line = table.loc[front].sort_values(x)
        figure.add_trace(go.Scatter(x=line[x], y=line[y], mode="lines+markers",
                                    name="Pareto front (fits)", line={"color": "#2ca02c"},
                                    marker={"size": 9},
                                    customdata=[[row["point_id"], links.get(row["point_id"], "")]
                                                for _, row in line.iterrows()],
                                    hovertext=[_label(row, names) for _, row in line.iterrows()],
                                    hovertemplate="%{hovertext}<extra>Pareto</extra>"))
    figure.update_layout(title=title, xaxis_title=xaxis, yaxis_title=yaxis, height=400,
                         margin={"l": 60, "r": 20, "t": 50, "b": 50}, template="plotly_white",
                         legend={"orientation": "h", "y": -0.18, "traceorder": "reversed"})
    return figure


def figures(table: pd.DataFrame, links: dict[str, str],
            setting_names: SettingNames | None = None) -> dict[str, go.Figure]:
    """The report's figures that say something, by name (see :func:`left_out`
    for the others); ``setting_names`` says which column holds which setting
    (default: each setting's own name)."""
    return _drawn(table, _plans(table, _ga(setting_names)), pareto_front(table),
                  varying_settings(table), links)


def _ga(setting_names: SettingNames | None) -> str:
    """The column of the gradient accumulation."""
    return (setting_names or SettingNames()).column("gradient_accumulation")


def _drawn(table: pd.DataFrame, plans: dict, front: pd.DataFrame, names: list[str],
           links: dict[str, str]) -> dict[str, go.Figure]:
    """:func:`figures`, of the table's plans, Pareto front and varying settings."""
    axes = {"pareto": ("MB on the fullest IPU", "items/s"),
            "throughput_vs_ipus": ("IPUs", "items/s"),
            "bubble_vs_ga": ("gradient accumulation", "bubble fraction")}
    out = {}
    for name, plan in plans.items():
        if isinstance(plan, str):
            continue
        part, x, y = plan
        out[name] = _scatter(part, x, y, names, links, TITLES[name], *axes[name],
                             front=front if name == "pareto" else None)
    capacity = table["capacity(MB)"].dropna()
    if "pareto" in out and len(capacity):
        sram = float(capacity.min())
        out["pareto"].update_xaxes(title=f"MB on the fullest IPU (SRAM of an IPU: {sram:,.1f} MB)")
        if table[MEMORY].max() >= sram / 2:  # what fits lies left of the line
            out["pareto"].add_vline(x=sram, line_dash="dash", line_color="#777",
                                    annotation_text="SRAM of an IPU")
    for name in ("throughput_vs_ipus", "bubble_vs_ga"):  # counts, often powers of two
        if name in out:
            values = sorted({float(x) for trace in out[name].data for x in trace.x})
            ticks = {"tickvals": values, "ticktext": [number(x) for x in values]} \
                if len(values) <= 12 else {}
            out[name].update_xaxes(type="log", **ticks)
    for name in ("pareto", "throughput_vs_ipus"):  # orders of magnitude apart: a log axis
        if name in out:
            shown = [y for trace in out[name].data for y in trace.y if y > 0]
            if shown and max(shown) > 20 * min(shown):
                out[name].update_yaxes(type="log")
    if "bubble_vs_ga" in out:
        out["bubble_vs_ga"].update_yaxes(tickformat=".0%", rangemode="tozero")
    return out


def left_out(table: pd.DataFrame, setting_names: SettingNames | None = None) -> dict[str, str]:
    """The figures the report leaves out, by name, each with why."""
    return _reasons(_plans(table, _ga(setting_names)))


def _reasons(plans: dict) -> dict[str, str]:
    return {name: plan for name, plan in plans.items() if isinstance(plan, str)}


def _left_out_html(reasons: dict[str, str]) -> str:
    if not reasons:
        return ""
    items = "".join(f"<li>{html.escape(TITLES[name])}: {html.escape(why)}.</li>"
                    for name, why in reasons.items())
    return f'<div class="note" id="left-out">Not drawn:<ul>{items}</ul></div>'


def _shared_html(table: pd.DataFrame, names: list[str]) -> str:
    shared = [name for name in settings_columns(table) if name not in names]
    if not shared or table.empty:
        return ""
    values = " · ".join(f"<code>{html.escape(name)} = {html.escape(text(table[name].iloc[0]))}"
                        "</code>" for name in shared)
    return f'<p class="shared">Every point: {values}</p>'


def render_sweep_html(table: pd.DataFrame, links: dict[str, str] | None = None,
                      title: str = "sweep", names: SettingNames | None = None,
                      code: dict[str, str] | None = None) -> str:
    """The sweep report as one HTML string; ``links`` maps a point id to the
    address of its timeline report, ``code`` to its settings as code, ``names``
    which column holds which setting (default: each setting's own name)."""
    links, code = links or {}, code or {}
    plans, front, varying = _plans(table, _ga(names)), pareto_front(table), \
        varying_settings(table)
    drawn, reasons = _drawn(table, plans, front, varying, links), _reasons(plans)
    divs = [pio.to_html(figure, include_plotlyjs=False, full_html=False, div_id=name,
                        config=PLOT_CONFIG) for name, figure in drawn.items()]
    runs, refused = table[accepted(table)], refusals(table)
    out_of_memory = int((refused["refusal"] == OUT_OF_MEMORY).sum())
    why = ", ".join(f"{count} {words}" for count, words in (
        (out_of_memory, "out of memory"), (len(refused) - out_of_memory, "by PopTorch's checks"))
        if count)
    summary = (f"{len(table)} points: {len(runs)} PopTorch would run, {len(front)} of them on "
               f"the Pareto front; {len(refused)} refused" + (f" ({why})" if why else ""))
    check = json.dumps({"points": len(table), "runs": len(runs), "pareto": len(front),
                        "refused": len(refused), "links": len(links),
                        "figures": list(drawn), "left_out": list(reasons)})
    figures_html = (f'<div class="row">{"".join(f"<div class=figure>{div}</div>" for div in divs)}'
                    "</div>" if divs else "")
    ordered = runs.sort_values(THROUGHPUT, ascending=False, kind="stable")
    columns = figure_columns(runs)
    points = (filter_html("points", len(runs), True)
              + table_html("points", table, ordered, varying, columns, links, code, front,
                           sorted_by=columns[0][0]) if len(runs) else
              "<p>None: every point is refused (below).</p>")
    refused_html = (f"<h2>Refused points ({len(refused)})</h2>"
                    '<p class="sub">What PopTorch would not run: options its checks refuse, '
                    "and models that do not fit an IPU's SRAM (it refuses to compile them "
                    "unless told to allow out-of-memory models).</p>"
                    + filter_html("refused", len(refused), False)
                    + table_html("refused", table, table.loc[refused.index], varying,
                                 refusal_columns(refused), links, code)
                    if len(refused) else "")
    body = f"""{figures_html}
{_left_out_html(reasons)}
<h2>Points PopTorch would run ({len(runs)})</h2>
<p class="sub">Sorted by throughput; click a heading to sort by it. Green: on the Pareto front
(no other point is both faster and smaller). Click a marker above to open its point.</p>
{_shared_html(table, varying)}
{points}
{refused_html}
<footer>Generated by ipusim with plotly {plotly.__version__} (plotly.js embedded, works
offline). Simulated timings, not hardware measurements.</footer>
<pre id="sweep-check" hidden>{html.escape(check)}</pre>
<script>{sortable_table.SCRIPT}{SCRIPT}{_OPEN_ON_CLICK}</script>"""
    return page(f"sweep of {title}", summary, body, style=STYLE)


def write_sweep_html(table: pd.DataFrame, path: str | Path, **kwargs) -> Path:
    """Write :func:`render_sweep_html` to ``path`` (parents created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_sweep_html(table, **kwargs), encoding="utf-8")
    return path
