"""The sweep report: one offline HTML page to choose a configuration from.

It reads a sweep's results table (a row per point, and its Pareto front: see
:mod:`ipusim.explore.design_point`) and draws what people choose by: throughput
against IPUs, the Pareto front of throughput against memory, and the
pipeline bubble against gradient accumulation, above the table of every
point. A point with its own timeline report links to it, from the table
and by clicking its marker. plotly.js is embedded, as in the run report.

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
from plotly.offline import get_plotlyjs

from ipusim.explore.design_point import outcomes, pareto_front
from ipusim.plan.run_config import SettingNames
from ipusim.report.html import PLOT_CONFIG, STYLE

THROUGHPUT, MEMORY = "throughput(items/s)", "memory_max(MB)"

# A click on a marker that carries a report's address opens it.
_OPEN_ON_CLICK = """document.querySelectorAll(".js-plotly-plot").forEach(function (gd) {
  gd.on("plotly_click", function (data) {
    var link = data.points[0].customdata && data.points[0].customdata[1];
    if (link) { window.open(link, "_blank"); }
  });
});"""

_TABLE_STYLE = """
table.points { border-collapse: collapse; background: white; font-size: 0.85rem;
               box-shadow: 0 1px 3px rgba(0,0,0,0.12); }
table.points td, table.points th { padding: 0.15rem 0.6rem; border-bottom: 1px solid #eee;
                                   text-align: right; white-space: nowrap; }
table.points tr.pareto { background: #eef6ee; }
table.points tr.invalid { color: #999; }
"""


def settings_columns(table: pd.DataFrame) -> list[str]:
    """The columns that name a point's settings (between its id and its figures)."""
    columns = list(table.columns)
    return columns[columns.index("point_id") + 1:columns.index("ipus")]


def _label(row: pd.Series, names: list[str]) -> str:
    return "<br>".join(f"{name} = {row[name]}" for name in names)


def _scatter(table: pd.DataFrame, x: str, y: str, names: list[str], links: dict[str, str],
             title: str, xaxis: str, yaxis: str, front: pd.Index | None = None) -> go.Figure:
    figure = go.Figure()
    fits = table["fits"].fillna(False).astype(bool)
    for label, chosen, colour in (("fits", fits, "#1f77b4"), ("does not fit", ~fits, "#d62728")):
        part = table[chosen & table[y].notna()]
        if part.empty:
            continue
        figure.add_trace(go.Scatter(
            x=part[x], y=part[y], mode="markers", name=label, marker={"color": colour},
            customdata=[[row["point_id"], links.get(row["point_id"], "")]
                        for _, row in part.iterrows()],
            hovertext=[_label(row, names) for _, row in part.iterrows()],
            hovertemplate="%{hovertext}<br>" + f"{xaxis}: %{{x}}<br>{yaxis}: %{{y:,.4g}}"
                          "<extra>%{customdata[0]}</extra>"))
    if front is not None and len(front):
        line = table.loc[front].sort_values(x)
        figure.add_trace(go.Scatter(x=line[x], y=line[y], mode="lines+markers",
                                    name="Pareto front", line={"color": "#2ca02c"},
                                    customdata=[[row["point_id"], links.get(row["point_id"], "")]
                                                for _, row in line.iterrows()],
                                    hovertemplate="%{customdata[0]}<extra>Pareto</extra>"))
    figure.update_layout(title=title, xaxis_title=xaxis, yaxis_title=yaxis, height=420,
                         margin={"l": 60, "r": 20, "t": 50, "b": 50}, template="plotly_white")
    return figure


def figures(table: pd.DataFrame, links: dict[str, str],
            setting_names: SettingNames | None = None) -> dict[str, go.Figure]:
    """The report's figures, by name; ``setting_names`` says which column holds
    which setting (default: each setting's own name)."""
    names = settings_columns(table)
    ga = (setting_names or SettingNames()).column("gradient_accumulation")
    front = pareto_front(table)
    out = {
        "throughput_vs_ipus": _scatter(table, "ipus", THROUGHPUT, names, links,
                                       "Throughput against IPUs", "IPUs", "items/s"),
        "pareto": _scatter(table, MEMORY, THROUGHPUT, names, links,
                           "Throughput against memory (fullest IPU)", "MB", "items/s", front),
    }
    capacity = table["capacity(MB)"].dropna()
    if len(capacity):  # what fits lies left of the line
        out["pareto"].add_vline(x=float(capacity.min()), line_dash="dash", line_color="#777",
                                annotation_text="SRAM of an IPU")
    if ga in table:
        out["bubble_vs_ga"] = _scatter(table, ga, "bubble_fraction", names, links,
                                       "Pipeline bubble against gradient accumulation",
                                       "gradient accumulation", "bubble fraction")
        out["bubble_vs_ga"].update_xaxes(type="log")
    return out


def _table_html(table: pd.DataFrame, links: dict[str, str], front: pd.Index) -> str:
    names = settings_columns(table)
    shown = names + ["ipus", THROUGHPUT, "step(ms)", "latency(ms)", "utilisation",
                     "bubble_fraction", "host_io_share", "sync_wait_share", MEMORY, "fits",
                     "error"]
    head = "".join(f"<th>{html.escape(name)}</th>" for name in ["point"] + shown)
    rows = []
    for index, row in table.iterrows():
        key = row["point_id"]
        point = (f'<a href="{html.escape(links[key])}">{row["point"]}</a>' if key in links
                 else str(row["point"]))
        cells = "".join(f"<td>{html.escape(_format(row[name]))}</td>" for name in shown)
        kind = "pareto" if index in front else "invalid" if isinstance(row["error"], str) else ""
        rows.append(f'<tr class="{kind}" id="{key}"><td>{point}</td>{cells}</tr>')
    return f'<table class="points"><tr>{head}</tr>{"".join(rows)}</table>'


def _format(value) -> str:
    if value is None or value is pd.NA or isinstance(value, float) and value != value:
        return ""
    if isinstance(value, float):
        return f"{value:,.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
    return str(value)


def render_sweep_html(table: pd.DataFrame, links: dict[str, str] | None = None,
                      title: str = "sweep", names: SettingNames | None = None) -> str:
    """The sweep report as one HTML string; ``links`` maps a point id to the
    address of its timeline report, ``names`` which column holds which setting
    (default: each setting's own name)."""
    links = links or {}
    divs = [pio.to_html(figure, include_plotlyjs=False, full_html=False, div_id=name,
                        config=PLOT_CONFIG)
            for name, figure in figures(table, links, names).items()]
    front = pareto_front(table)
    counts = ", ".join(f"{count} {outcome}" for outcome, count in outcomes(table).items())
    summary = f"{len(table)} points: {counts}; {len(front)} on the Pareto front (highlighted)"
    check = json.dumps({"points": len(table), "pareto": len(front), "links": len(links)})
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>ipusim sweep — {html.escape(title)}</title>
<style>{STYLE}{_TABLE_STYLE}</style>
<script type="text/javascript">{get_plotlyjs()}</script>
</head>
<body>
<h1>ipusim sweep — {html.escape(title)}</h1>
<p class="sub">{html.escape(summary)} · simulated timings, not hardware measurements ·
click a marker to open its timeline report, where there is one</p>
<div class="row">{"".join(f'<div class="figure">{div}</div>' for div in divs)}</div>
<h2>Points</h2>
{_table_html(table, links, front)}
<footer>Generated by ipusim with plotly {plotly.__version__} (plotly.js embedded, works
offline).</footer>
<pre id="sweep-check" hidden>{html.escape(check)}</pre>
<script>{_OPEN_ON_CLICK}</script>
</body>
</html>
"""


def write_sweep_html(table: pd.DataFrame, path: str | Path, **kwargs) -> Path:
    """Write :func:`render_sweep_html` to ``path`` (parents created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_sweep_html(table, **kwargs), encoding="utf-8")
    return path
