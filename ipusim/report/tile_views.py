"""The HTML report's views of the tiles and of liveness, as PopVision's Graph Analyser
shows them: the memory of each tile of each IPU, by category, against a tile's SRAM,
and the bytes live at each program step over the always-live ones.

Drawing only: the figures are the graph profile's
(:meth:`~ipusim.analysis.timeline.Timeline.graph_profile`).
"""
from __future__ import annotations

import html

import plotly.graph_objects as go
import plotly.io as pio

from ipusim.analysis.graph_profile import GraphProfile
from ipusim.analysis.liveness import liveness_windows
from ipusim.analysis.tile_memory import CODE, EXCHANGE

_NOT_PARTS = ("ipu", "tile", "total", "capacity")


def tile_memory_figure(profile: GraphProfile) -> go.Figure:
    """Each tile's memory, the tiles of every IPU of the replica one after another, by
    category stacked, with a tile's SRAM as a line."""
    table = profile.tiles
    labels = [f"IPU {ipu} tile {tile}" for ipu, tile in zip(table["ipu"], table["tile"])]
    fig = go.Figure()
    parts = [c for c in table.columns if c not in _NOT_PARTS]
    for part in [p for p in parts if p not in (CODE, EXCHANGE)] + [CODE, EXCHANGE]:
        fig.add_trace(go.Bar(name=part, x=list(range(len(table))), y=table[part],
                             customdata=labels,
                             hovertemplate=f"{part}: %{{y:,.0f}} bytes<extra>%{{customdata}}"
                                           "</extra>"))
    capacity = float(table["capacity"].iloc[0])
    fig.add_hline(y=capacity, line={"color": "#d62728", "dash": "dash", "width": 1},
                  annotation_text=f"a tile's SRAM {capacity:,.0f} bytes",
                  annotation_position="top left")
    fullest = table.loc[table["total"].idxmax()]
    fig.update_layout(
        title=(f"Memory by tile<br><sup>fullest: tile {int(fullest['tile'])} of IPU "
               f"{int(fullest['ipu'])}, {fullest['total']:,.0f} bytes "
               f"({fullest['total'] / capacity:.0%} of its SRAM)</sup>"),
        barmode="stack", bargap=0, plot_bgcolor="white", height=380,
        xaxis={"title": "tile (IPU after IPU)"}, yaxis={"title": "bytes"},
        margin={"l": 10, "r": 10, "t": 60, "b": 40})
    return fig


def liveness_figure(profile: GraphProfile) -> go.Figure:
    """The bytes live at each program step (the most in each window of steps) over the
    always-live bytes, the peak marked."""
    windows = liveness_windows(profile.liveness)
    always = sum(v.bytes for v in profile.always_live)
    fig = go.Figure()
    fig.add_trace(go.Scatter(x=windows["first"], y=[always] * len(windows), name="always live",
                             mode="lines", stackgroup="live",
                             hovertemplate="always live: %{y:,.0f} bytes<extra></extra>"))
    fig.add_trace(go.Scatter(x=windows["first"], y=windows["bytes"], name="not always live",
                             mode="lines", stackgroup="live", customdata=windows["last"],
                             hovertemplate="steps %{x}-%{customdata}: %{y:,.0f} bytes"
                                           "<extra>not always live</extra>"))
    peak = profile.peak
    title = "Liveness by program step"
    if peak is not None:
        title += (f"<br><sup>peak at step {peak.step} ({html.escape(peak.name)}): "
                  f"{peak.bytes:,} bytes not always live</sup>")
    fig.update_layout(title=title, plot_bgcolor="white", height=380,
                      xaxis={"title": "program step"}, yaxis={"title": "bytes"},
                      margin={"l": 10, "r": 10, "t": 60, "b": 40})
    return fig


def tile_views_section(profile: GraphProfile, config: dict) -> str:
    """The report's section with both views, and what the peak holds."""
    divs = [pio.to_html(fig, include_plotlyjs=False, full_html=False, div_id=name,
                        config=config)
            for name, fig in (("tile-memory", tile_memory_figure(profile)),
                              ("liveness", liveness_figure(profile)))]
    peak = profile.peak
    held = ("" if peak is None or not peak.variables else
            f"<p class=\"roofline-note\">Live at the peak: "
            f"{html.escape(', '.join(peak.variables[:8]))}"
            f"{' …' if len(peak.variables) > 8 else ''}</p>")
    steps = profile.steps
    listed = ("" if steps.events_listed == steps.events_total else
              f"<p class=\"roofline-note\">The program steps of the first "
              f"{steps.events_listed:,} of the step's {steps.events_total:,} events.</p>")
    return (f"<h2>Tiles and liveness</h2>\n<div class=\"row\"><div class=\"figure\">{divs[0]}"
            f"</div>\n<div class=\"figure\">{divs[1]}</div></div>\n{held}{listed}")
