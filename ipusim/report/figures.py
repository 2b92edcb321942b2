"""Plotly figures of a timeline: the pipeline Gantt chart, utilisation, memory.

The Gantt chart follows the batching guide's Fig 4.1: one row per IPU with a
box for the forward and backward pass of each micro-batch, ramp-up, main and
ramp-down phases shaded, and one micro-batch's latency marked. Bars are
horizontal ``go.Bar`` traces (base = start, x = duration) on a numeric µs axis,
one trace per kind of event so that large runs stay responsive.
"""
from __future__ import annotations

import html
from typing import NamedTuple

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from ipusim.analysis.metrics import step_spans
from ipusim.analysis.pipeline_phases import PHASES
from ipusim.analysis.timeline import Timeline
from ipusim.cost.cost_model import PS_PER_US
from ipusim.cost.work import Execution
from ipusim.engine.event_kinds import COMPUTE_KINDS, COMPUTE_LANE, IDLE, KINDS, SYNC_WAIT
from ipusim.plan.memory import MB, MEMORY_PARTS
from ipusim.report import lanes
from ipusim.report.summary import execution_text

MAX_EVENTS_PER_LANE = 20_000
MAX_IPUS = 16
_PHASE_FILL = {"ramp-up": "rgba(214, 39, 40, 0.09)", "main": "rgba(44, 160, 44, 0.08)",
               "ramp-down": "rgba(31, 119, 180, 0.09)"}
_PHASE_LEGEND = {"ramp-up": "rgba(214, 39, 40, 0.3)", "main": "rgba(44, 160, 44, 0.3)",
                 "ramp-down": "rgba(31, 119, 180, 0.3)"}
_PHASE_TEXT = {"ramp-up": "#a02020", "main": "#217a21", "ramp-down": "#1a5a8a"}
MAX_BOXES_PER_ROW = 32  # at most this many boxes in a row of the opening view, and
BOXES_ACROSS = 40  # a box of the median length at least 1/40 of its width: room for "B12"
_MAX_PHASE_LABELS = 24
# How much of the run the opening view shows before a pipeline run's first box.
RUN_MARGIN = 0.05
# A phase is labelled only if it spans at least this share of the view, so that the
# labels, centred on their phases, never print over each other.
MIN_LABELLED_SHARE = 1 / 6
_BAR_WIDTH = {**{kind: 0.8 for kind in COMPUTE_KINDS}, SYNC_WAIT: 0.3}  # of a row
SYNC_OPACITY = 0.5
_MEMORY_COLOURS = ("#1f77b4", "#ff7f0e", "#9467bd", "#2ca02c", "#7f7f7f", "#8c564b")


class Window(NamedTuple):
    """The events a figure draws and a note saying what was left out."""

    events: pd.DataFrame
    note: str


def plotted_window(timeline: Timeline, max_events_per_lane: int = MAX_EVENTS_PER_LANE,
                   max_ipus: int = MAX_IPUS) -> Window:
    """The first IPUs and whole steps whose events fit ``max_events_per_lane`` per lane.

    When even the first step does not fit, the window is its first events.
    """
    events = timeline.events
    notes = []
    if timeline.num_ipus > max_ipus:
        events = events[events["ipu"] < max_ipus]
        notes.append(f"IPUs 0-{max_ipus - 1} of {timeline.num_ipus}")
    lane = events["kind"].astype(str).map(lanes.LANE_OF)
    cutoff = np.inf
    for _, starts in events["start_ps"].groupby([events["ipu"], lane]):
        if len(starts) > max_events_per_lane:
            cutoff = min(cutoff, float(np.sort(starts.to_numpy())[max_events_per_lane]))
    if np.isfinite(cutoff):
        step_ends = step_spans(events)["end_ps"]
        whole = step_ends[step_ends <= cutoff]
        if len(whole):
            events = events[events["step"] <= whole.index.max()]
            notes.append(f"the first {len(whole)} of {timeline.steps} steps")
        else:
            events = events[events["start_ps"] < cutoff]
            notes.append(f"the first {(cutoff - events['start_ps'].min()) / PS_PER_US:,.1f} µs "
                         f"of step {int(events['step'].min())}")
    if not notes:
        return Window(events, "")
    return Window(events, f"showing {' and '.join(notes)} "
                          f"(at most {max_events_per_lane:,} events per lane)")


def initial_view(timeline: Timeline, events: pd.DataFrame,
                 max_boxes_per_row: int = MAX_BOXES_PER_ROW) -> tuple[float, float, str] | None:
    """The time range (µs) the timeline opens on, so that its boxes are wide enough to
    read and label; None when everything drawn is that already.

    A pipelined run opens on its first pipeline run (Fig 4.1's picture: ramp-up,
    main and ramp-down, up to where the next run starts), from shortly before its
    first box (:data:`RUN_MARGIN` of the run), so that a long host round trip before
    it does not shrink the pipeline to a sliver; any other run, or a
    pipeline run cut short by the window, on its first whole steps, else on its
    first microseconds of boxes, holding at most ``max_boxes_per_row`` compute
    boxes on each IPU with a box of the median length at least 1 /
    ``BOXES_ACROSS`` of the view.
    """
    first, last = float(events["start_ps"].min()), float(events["end_ps"].max())
    phases = timeline.pipeline_phases()
    phases = phases[phases["step"].isin(set(events["step"]))]
    if len(phases):
        runs = phases.groupby(["step", "run"]).agg(start=("start_ps", "min"),
                                                   end=("end_ps", "max")).sort_index()
        if runs["end"].iloc[0] <= last:  # the first run is whole
            begin, end = float(runs["start"].iloc[0]), float(runs["end"].iloc[0])
            if len(runs) > 1:
                step = runs.index[0][0]
                end = min(float(events.loc[events["step"] == step, "end_ps"].max()),
                          float(runs["start"].iloc[1]))
            start = max(first, begin - RUN_MARGIN * (end - begin))
            if len(runs) == 1 and end - begin >= (last - first) / 2:
                return None  # the run is most of what there is: all of it is readable
            return start / PS_PER_US, end / PS_PER_US, "the first pipeline run"
    compute = events[events["kind"].isin(COMPUTE_KINDS)].sort_values("start_ps")
    if compute.empty:
        return None
    # A view holds at most ``max_boxes_per_row`` boxes on an IPU (it ends before the
    # next one) and spans at most BOXES_ACROSS boxes of the median length.
    median = float((compute["end_ps"] - compute["start_ps"]).median())
    per_row = compute.groupby("ipu")["start_ps"]
    crowded = (float(per_row.nth(max_boxes_per_row).min())
               if per_row.size().max() > max_boxes_per_row else np.inf)
    step_ends = np.sort(step_spans(events)["end_ps"].to_numpy())
    whole = step_ends[step_ends <= min(first + BOXES_ACROSS * median, crowded)]
    if len(whole):  # whole steps fit
        if whole[-1] >= last:
            return None
        return first / PS_PER_US, float(whole[-1]) / PS_PER_US, f"the first {len(whole)} step(s)"
    # Else from shortly before the first box (after the call's host round trip, say).
    start = max(first, float(compute["start_ps"].iloc[0]) - 2 * median)
    end = max(min(start + BOXES_ACROSS * median, crowded), float(compute["end_ps"].iloc[0]))
    return (start / PS_PER_US, end / PS_PER_US,
            f"{(end - start) / PS_PER_US:,.0f} µs from the first box")


def lane_positions(timeline: Timeline, events: pd.DataFrame) -> tuple[dict, list, list]:
    """Row of each (IPU, lane): the compute lane always, other lanes when used."""
    used = set(events["kind"].astype(str).map(lanes.LANE_OF))
    shown = [lane for lane in lanes.LANES if lane == COMPUTE_LANE or lane in used]
    ipus = sorted(set(events["ipu"])) or [0]
    positions, ticks, names = {}, [], []
    row = 0
    for ipu in ipus:
        replica = timeline.plan.replica_of(ipu)
        for lane in shown:
            positions[(ipu, lane)] = row
            ticks.append(row)
            head = f"IPU {ipu}" + (f" (replica {replica})" if timeline.run.replicas > 1 else "")
            names.append(f"<b>{head}</b>" if lane == COMPUTE_LANE else f"{lane}")
            row += 1
    return positions, ticks, names


# The event table's columns a box carries for its hover (``customdata``), in this order.
HOVER_COLUMNS = ("ipu", "replica", "stage", "micro_batch", "step", "pipeline_cycle", "bytes",
                 "flops")


def _bar_traces(timeline: Timeline, events: pd.DataFrame, kind: str, rows: np.ndarray,
                name: str, **style) -> list[go.Bar]:
    """The boxes of one kind of event: one trace for each set of boxes that share a
    hover template (the stage, and which of micro-batch, pipeline cycle, bytes and
    FLOPs apply), all under the kind's name and one legend entry."""
    # float32 and int16 arrays travel base64-encoded: a third of the size of float64 text.
    start = events["start_ps"].to_numpy() / PS_PER_US
    duration = ((events["end_ps"] - events["start_ps"]).to_numpy() / PS_PER_US).astype(np.float32)
    custom = events[list(HOVER_COLUMNS)].to_numpy(dtype=np.float32)
    compute = kind in COMPUTE_KINDS
    labels = lanes.box_labels(events) if compute else None
    rows = rows.astype(np.int16 if len(rows) and rows.max() < 2**15 else np.int32)
    keys = pd.DataFrame({"stage": events["stage"].to_numpy(),
                         "micro_batch": events["micro_batch"].to_numpy() >= 0,
                         "pipeline_cycle": events["pipeline_cycle"].to_numpy() >= 0,
                         "step": events["step"].to_numpy() >= 0,
                         "bytes": events["bytes"].to_numpy() > 0,
                         "flops": events["flops"].to_numpy() > 0})
    traces = []
    for key, positions in keys.groupby(list(keys.columns), sort=True).indices.items():
        applies = dict(zip(keys.columns, key))
        traces.append(go.Bar(
            name=name, legendgroup=kind, showlegend=not traces, orientation="h",
            y=rows[positions], base=np.round(start[positions], 3), x=duration[positions],
            width=_BAR_WIDTH.get(kind, 0.6), customdata=custom[positions],
            text=labels[positions] if compute else None,
            textposition="inside" if compute else "none", insidetextanchor="middle",
            textangle=0, textfont={"color": "white", "size": 11}, cliponaxis=True,
            hovertemplate=hover_template(timeline, kind, applies), **style))
    return traces


def hover_template(timeline: Timeline, kind: str, applies: dict) -> str:
    """A box's hover: its kind (and Fig 4.1 label), its duration, where it ran, and
    the step, stage, micro-batch, pipeline cycle, bytes and FLOPs that apply to it
    (``applies``: the stage's number, -1 for none, and whether each other field
    applies). Fields of ``HOVER_COLUMNS`` are read from the box's ``customdata``."""
    field = {column: f"%{{customdata[{i}]}}" for i, column in enumerate(HOVER_COLUMNS)}
    head = f"<b>{lanes.NAMES[kind]}</b>" + (" %{text}" if kind in COMPUTE_KINDS else "")
    where = f"IPU {field['ipu']}, replica {field['replica']}"
    when = []
    if applies["step"]:
        when.append(f"step {field['step']}")
    if applies["stage"] >= 0:
        stage = timeline.plan.stages[applies["stage"]].name
        # The name as text: no markup, no template field.
        when.append("stage " + html.escape(stage).replace("%{", "% {"))
    if applies["micro_batch"]:
        when.append(f"micro-batch {field['micro_batch']}")
    if applies["pipeline_cycle"]:
        when.append(f"pipeline cycle {field['pipeline_cycle']}")
    moved = []
    if applies["bytes"]:
        moved.append("%{customdata[6]:,.0f} bytes")
    if applies["flops"]:
        moved.append("%{customdata[7]:,.3s}FLOP")
    lines = [head, "duration %{x:,.3f} µs (from %{base:,.3f} µs)", where]
    lines += [", ".join(part) for part in (when, moved) if part]
    return "<br>".join(lines) + "<extra></extra>"


def timeline_figure(timeline: Timeline, max_events_per_lane: int = MAX_EVENTS_PER_LANE,
                    max_ipus: int = MAX_IPUS) -> go.Figure:
    """The pipeline timeline: rows = IPUs (with their I/O, exchange and sync lanes)."""
    window = plotted_window(timeline, max_events_per_lane, max_ipus)
    events = window.events
    positions, ticks, names = lane_positions(timeline, events)
    lane = events["kind"].astype(str).map(lanes.LANE_OF)
    rows = np.array([positions[key] for key in zip(events["ipu"], lane)], dtype=np.int32)
    traces, shapes, notes = [], [], []
    kinds = events["kind"].astype(str).to_numpy()
    for kind in KINDS:
        chosen = kinds == kind
        if chosen.any():
            # Sync waits are thin and faint: where the IPUs wait, not what they do.
            outline = 0 if kind == SYNC_WAIT else 0.5
            traces += _bar_traces(timeline, events[chosen], kind, rows[chosen],
                                  lanes.NAMES[kind],
                                  marker={"color": lanes.COLOURS[kind],
                                          "line": {"color": "white", "width": outline}},
                                  opacity=SYNC_OPACITY if kind == SYNC_WAIT else 1.0)
    view = initial_view(timeline, events)
    _latency(timeline, events, rows, traces, notes, view)
    _phases(timeline, events, traces, shapes, notes, view)
    shapes += [{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "yref": "y",
                "y0": row - 0.5, "y1": row - 0.5, "line": {"color": "#999", "width": 1}}
               for row in range(1, len(ticks)) if names[row].startswith("<b>")]
    title = f"{timeline_name(timeline)} — {_describe(timeline)}"
    subtitle = [window.note] if window.note else []
    if view:
        subtitle.append(f"opens on {view[2]}: double-click the plot to see the whole run")
    if subtitle:
        title += f"<br><sup>{'; '.join(subtitle)}</sup>"
    return go.Figure(data=traces, layout={
        "title": {"text": title}, "barmode": "overlay", "bargap": 0, "plot_bgcolor": "white",
        "height": max(380, 90 + 28 * len(ticks)), "legend": {"traceorder": "normal"},
        "uniformtext": {"minsize": 8, "mode": "hide"}, "shapes": shapes, "annotations": notes,
        "margin": {"l": 10, "r": 10, "t": 100, "b": 50},
        "xaxis": {"title": {"text": "simulated time (µs)"}, "showgrid": True,
                  "gridcolor": "#eee", "zeroline": False,
                  **({"range": list(view[:2])} if view else {})},
        "yaxis": {"tickvals": ticks, "ticktext": names, "autorange": False,
                  "range": [len(ticks) - 0.5, -1.6], "showgrid": False, "zeroline": False}})


def timeline_name(timeline: Timeline) -> str:
    """What the Gantt chart is called: a pipeline timeline only for pipelined runs."""
    return "Pipeline timeline" if timeline.run.execution is Execution.PIPELINED else "Timeline"


def _describe(timeline: Timeline) -> str:
    run = timeline.run
    return (f"{'training' if run.training else 'inference'}, {execution_text(timeline)}, "
            f"{run.replicas} replica(s), "
            f"gradient accumulation {run.gradient_accumulation}, "
            f"{run.device_iterations} device iteration(s), {timeline.steps} step(s)")


def _phases(timeline: Timeline, events: pd.DataFrame, traces: list, shapes: list,
            notes: list, view: tuple[float, float, str] | None) -> None:
    """Shade ramp-up / main / ramp-down and label those in the opening view above the plot."""
    phases = timeline.pipeline_phases()
    if phases.empty:
        return
    phases = phases[phases["step"].isin(set(events["step"]))
                    & (phases["start_ps"] < events["end_ps"].max())]
    labelled = 0
    shown = (view[0], view[1]) if view else (events["start_ps"].min() / PS_PER_US,
                                               events["end_ps"].max() / PS_PER_US)
    narrowest = MIN_LABELLED_SHARE * (shown[1] - shown[0])
    for row in phases.itertuples():
        x0, x1 = row.start_ps / PS_PER_US, row.end_ps / PS_PER_US
        shapes.append({"type": "rect", "xref": "x", "x0": x0, "x1": x1, "yref": "paper",
                       "y0": 0, "y1": 1, "fillcolor": _PHASE_FILL[row.phase], "line": {"width": 0},
                       "layer": "below"})
        if labelled < _MAX_PHASE_LABELS and (view is None or x1 <= view[1]) and \
                x1 - x0 >= narrowest:
            labelled += 1
            notes.append({"x": (x0 + x1) / 2, "y": 1.0, "xref": "x", "yref": "paper",
                          "yanchor": "bottom", "showarrow": False,
                          "text": (f"{row.phase}<br>pipeline cycles "
                                   f"{row.first_pipeline_cycle}-{row.last_pipeline_cycle}"),
                          "font": {"size": 10, "color": _PHASE_TEXT[row.phase]}})
    for phase in PHASES:  # legend entries for the shading
        traces.append(go.Scatter(x=[None], y=[None], mode="markers", name=f"{phase} phase",
                                 marker={"symbol": "square", "size": 14,
                                         "color": _PHASE_LEGEND[phase]},
                                 hoverinfo="skip"))


def _latency(timeline: Timeline, events: pd.DataFrame, rows: np.ndarray, traces: list,
             notes: list, view: tuple[float, float, str] | None) -> None:
    """Outline one micro-batch's boxes and draw its latency as an arrow above the rows,
    labelled from the arrow's end nearer the middle of the view, so the label stays in it."""
    path = timeline.latency_path(int(events["step"].min()) if len(events) else None)
    if path is None or path.end_ps > events["end_ps"].max():
        return
    mine = ((events["micro_batch"] == path.micro_batch) & (events["step"] == path.step)
            & (events["replica"] == path.replica) & events["kind"].isin(COMPUTE_KINDS)).to_numpy()
    traces.append(go.Bar(
        name=f"micro-batch {path.micro_batch} (latency path)", orientation="h", y=rows[mine],
        base=events["start_ps"].to_numpy()[mine] / PS_PER_US,
        x=(events["end_ps"] - events["start_ps"]).to_numpy()[mine] / PS_PER_US,
        width=0.8, hoverinfo="skip",
        marker={"color": "rgba(0,0,0,0)", "line": {"color": "black", "width": 2.5}}))
    x0, x1 = path.start_ps / PS_PER_US, path.end_ps / PS_PER_US
    notes.append({"x": x1, "y": -1.0, "ax": x0, "ay": -1.0, "xref": "x", "yref": "y",
                  "axref": "x", "ayref": "y", "text": "", "showarrow": True, "arrowhead": 2,
                  "arrowside": "end+start", "arrowwidth": 1.5, "arrowcolor": "black"})
    left, right = (view[0], view[1]) if view else (float(events["start_ps"].min()) / PS_PER_US,
                                                  float(events["end_ps"].max()) / PS_PER_US)
    from_left = (x0 + x1) / 2 <= (left + right) / 2
    notes.append({"x": max(x0, left) if from_left else min(x1, right), "y": -1.0, "xref": "x",
                  "yref": "y", "xanchor": "left" if from_left else "right", "yanchor": "bottom",
                  "showarrow": False, "bgcolor": "rgba(255,255,255,0.8)",
                  "text": f"latency of micro-batch {path.micro_batch}: "
                          f"{path.latency_ps / PS_PER_US:,.1f} µs"})


def utilisation_figure(timeline: Timeline, max_ipus: int = 64) -> go.Figure:
    """Per IPU, the share of the span in compute, host I/O, copies, sync wait and idle."""
    table = timeline.category_times().iloc[:max_ipus]
    labels = [f"IPU {ipu}" for ipu in table.index]
    fig = go.Figure()
    for category in lanes.CATEGORIES:
        share = table[category].to_numpy()
        if category != IDLE.name and not share.any():
            continue
        fig.add_trace(go.Bar(name=category, x=labels, y=share * 100,
                             marker={"color": lanes.CATEGORY_COLOURS[category],
                                     "line": {"color": "#bbb", "width": 0.5}},
                             hovertemplate=f"{category}: %{{y:.1f}}%<extra>%{{x}}</extra>"))
    fig.update_layout(title="Utilisation per IPU (share of the simulated span)", barmode="stack",
                      yaxis={"title": "% of time", "range": [0, 100]}, plot_bgcolor="white",
                      height=380, margin={"l": 10, "r": 10, "t": 60, "b": 40})
    return fig


def memory_figure(timeline: Timeline) -> go.Figure:
    """SRAM needed on each IPU of a replica, by category, against its capacity."""
    return memory_table_figure(timeline.memory_per_ipu())


def memory_table_figure(table: pd.DataFrame) -> go.Figure:
    """A :func:`~ipusim.plan.memory.memory_per_ipu` table as stacked bars against the
    SRAM, each IPU's share of it on top, in red where it is over 100%."""
    labels = [f"IPU {ipu}" for ipu in table.index]
    fig = go.Figure()
    for part, colour in zip(MEMORY_PARTS, _MEMORY_COLOURS):
        fig.add_trace(go.Bar(name=part, x=labels, y=table[part] / MB, marker={"color": colour},
                             hovertemplate=f"{part}: %{{y:,.2f}} MB<extra>%{{x}}</extra>"))
    capacity = float(table["capacity"].iloc[0]) / MB
    top, title = memory_axis_top(float(table["total"].max()) / MB, capacity)
    if top >= capacity:
        fig.add_hline(y=capacity, line={"color": "#d62728", "dash": "dash", "width": 2},
                      annotation_text=f"SRAM capacity {capacity:,.0f} MB",
                      annotation_position="top left")
    shares = table["total"] / table["capacity"]
    fig.add_trace(go.Scatter(
        x=labels, y=table["total"] / MB, mode="text", showlegend=False, hoverinfo="skip",
        text=[f"{share:.0%}" for share in shares], textposition="top center",
        textfont={"color": ["#d62728" if share > 1 else "#444" for share in shares]}))
    fig.update_layout(title=title, barmode="stack", yaxis={"title": "MB", "range": [0, top]},
                      plot_bgcolor="white", height=380, margin={"l": 10, "r": 10, "t": 60, "b": 40})
    return fig


def memory_axis_top(most: float, capacity: float) -> tuple[float, str]:
    """The memory axis's top (MB) and the chart's title: scaled to the fullest IPU, so
    small bars show, with the capacity line once that IPU holds half of it or more."""
    title = "Memory per IPU (each replica holds the same)"
    if most >= capacity / 2:
        return max(most, capacity) * 1.08, title
    return (most * 1.25 or 1.0,
            f"{title}<br><sup>fullest IPU {most / capacity:.1%} of its "
            f"{capacity:,.0f} MB SRAM (the capacity is off this scale)</sup>")
