"""The HTML report's program views, as PopVision's Graph Analyser shows a step: its
program tree (the step's ``Sequence``, its ``Repeat``s, the ``Call`` of each pass and
each pass's programs) and its execution trace, each IPU's program steps end to end,
coloured by their kind.

Drawing only: the tree is the graph profile's
(:func:`~ipusim.analysis.program_steps.program_tree`) and the
trace's boxes :func:`~ipusim.analysis.program_steps.execution_trace`, both of the graph
profile's program steps. The page stays light on a large step: a pass's body is listed
at its first call only, with its first :data:`BODY_SHOWN` programs, and the root's
first :data:`ROOT_SHOWN`.
"""
from __future__ import annotations

import html

import plotly.graph_objects as go
import plotly.io as pio

from ipusim.analysis.graph_profile import GraphProfile
from ipusim.analysis.program_steps import (
    CALL,
    DO_EXCHANGE,
    ON_TILE_EXECUTE,
    REPEAT,
    SEQUENCE,
    STREAM_COPY_BEGIN,
    STREAM_COPY_END,
    STREAM_COPY_MID,
    SYNC,
    ControlProgram,
    execution_trace,
)

#: Each program kind's colour in the trace (PopVision's: compute, exchange, sync, copies).
KIND_COLOURS = {ON_TILE_EXECUTE: "#1f77b4", DO_EXCHANGE: "#ff7f0e", SYNC: "#7f7f7f",
                STREAM_COPY_BEGIN: "#2ca02c", STREAM_COPY_MID: "#2ca02c",
                STREAM_COPY_END: "#2ca02c"}
#: The programs of a pass's body the tree lists, and of the step's root; the rest are counted.
BODY_SHOWN, ROOT_SHOWN = 60, 300


def program_tree_html(profile: GraphProfile) -> str:
    """The step's program tree as nested lists that open on a click: the root open, each
    ``Repeat`` with its count, each ``Call`` with the body it calls (listed at its first
    call), each program step with its kind and name."""
    steps = profile.steps
    tree = profile.tree
    base = len(steps.programs)
    listed: set[int] = set()

    def leaf(index: int) -> str:
        p = steps.programs[index]
        return (f'<li><span class="program-kind">{html.escape(p.kind)}</span> '
                f"{html.escape(p.name)}</li>")

    def node(index: int, open_: bool = False) -> str:
        if index < base:
            return leaf(index)
        program: ControlProgram = tree[index - base]
        label = {REPEAT: f"Repeat ×{program.count:,}", CALL: f"Call {program.name[5:]}",
                 SEQUENCE: f"Sequence {program.name}"}[program.kind]
        if program.kind == SEQUENCE and index in listed:
            return f"<li>{html.escape(label)} <i>(listed above)</i></li>"
        listed.add(index)
        children = program.children
        shown = children[:ROOT_SHOWN if program.name == "step" else BODY_SHOWN] \
            if program.kind == SEQUENCE else children
        more = (f"<li><i>… {len(children) - len(shown):,} more programs</i></li>"
                if len(shown) < len(children) else "")
        items = "".join(node(child) for child in shown)
        return (f'<li><details{" open" if open_ else ""}><summary>'
                f'<span class="program-kind">{html.escape(label)}</span> '
                f"({len(children):,})</summary><ol>{items}{more}</ol></details></li>")

    return f'<ol class="program-tree" id="program-tree">{node(base + len(tree) - 1, True)}</ol>'


def execution_trace_figure(profile: GraphProfile) -> go.Figure:
    """Each IPU's program steps end to end over the step's clock cycles, one colour a
    program kind; hovering a box gives its operator run or program and its cycles."""
    boxes = execution_trace(profile.steps)
    fig = go.Figure()
    for kind, colour in KIND_COLOURS.items():
        rows = boxes[boxes["kind"] == kind]
        if rows.empty:
            continue
        fig.add_trace(go.Bar(
            name=kind, orientation="h", base=rows["start"], x=rows["cycles"],
            y=[f"IPU {ipu}" for ipu in rows["ipu"]], marker={"color": colour},
            customdata=list(zip(rows["name"], rows["steps"])),
            hovertemplate="%{customdata[0]}<br>%{x:,} cycles from cycle %{base:,}"
                          "<br>%{customdata[1]} program step(s)<extra>" + kind + "</extra>"))
    steps = profile.steps
    merged = "" if boxes.empty or int(boxes["steps"].max()) == 1 else \
        " (each box an operator run's steps)"
    fig.update_layout(
        title=f"Execution trace by program step<br><sup>{len(steps):,} program steps"
              f"{merged}</sup>",
        barmode="overlay", plot_bgcolor="white", height=300,
        xaxis={"title": "clock cycles on the IPU"}, yaxis={"autorange": "reversed"},
        margin={"l": 10, "r": 10, "t": 60, "b": 40})
    return fig


def program_views_section(profile: GraphProfile, config: dict) -> str:
    """The report's section with the step's program tree and its execution trace."""
    trace = pio.to_html(execution_trace_figure(profile), include_plotlyjs=False,
                        full_html=False, div_id="execution-trace", config=config)
    return (f'<section id="programs"><h2>Programs of one step</h2>\n'
            f'<p class="sub">The last simulated step of replica 0 as Poplar\'s programs: '
            f"its tree (each pass's body called for every run of it, what ran back to back "
            f"repeated) and its program steps on each IPU.</p>\n"
            f'<div class="row"><div class="program-tree-box">{program_tree_html(profile)}'
            f'</div>\n<div class="figure">{trace}</div></div></section>')
