"""The report's operators: where each stage's compute time goes, operator by operator.

What PopVision Graph Analyser's operation views show a user, from the operator
breakdown (:meth:`Timeline.operator_shares`): a table of every operator of every
stage's passes (sortable in the page by a heading's button,
:mod:`ipusim.report.sortable_table`), a treemap IPU → stage → operator sized by the
time it takes in a step with its cycles split into AMP, exchange, sync and vector
work, and the operators that take most of the step called out; each operator with
the modules and lines of the model's code that made it, where the front end recorded
them (PopTorch's debug contexts). A click on a compute
box of the timeline shows that stage's operators (:data:`OPERATORS_SCRIPT`). A pass
priced by the roofline lists no operators; the section says which.
"""
from __future__ import annotations

import html
import json
from pathlib import Path

import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio

from ipusim.analysis.operator_breakdown import precision
from ipusim.analysis.program_steps import Source, operator_sources
from ipusim.analysis.timeline import Timeline
from ipusim.cost.work import KernelKind
from ipusim.engine.event_kinds import COMPUTE_KINDS
from ipusim.report import lanes

TOP_OPERATORS = 5
#: The cycle terms of an operator, as the breakdown's columns, their names and colours.
TERMS = (("amp_cycles", "AMP", "#1f77b4"), ("exchange_cycles", "exchange", "#ff7f0e"),
         ("sync_cycles", "sync", "#7f7f7f"), ("vector_cycles", "vector", "#2ca02c"))
_ROOFLINE_COLOUR = "#d9d9d9"
SORTED = ' aria-sort="descending"'  # the table's first order

# (header, tooltip, numeric): the table's columns, in order.
COLUMNS = (
    ("IPU", "the IPU of the replica the stage runs on", True),
    ("stage", "the model stage (after merging consecutive stages on one IPU)", False),
    ("pass", "forward, backward, recompute or weight update", False),
    ("operator", "its kind (how the IPU runs it: matmul on the AMP, the others on the vector "
                 "unit and the exchange) and shape (a matmul's (m×k)·(k×n), groups first; "
                 "elements otherwise)", False),
    ("source", "the module that made it and the line of the model's code that called it "
               "(PopTorch's debug context; a gradient, its forward operator's; the optimizer's "
               "operators, their weight's module); one per source, where it has several", False),
    ("count", "times the operator runs in one pass", True),
    ("AMP", "cycles of the AMP's passes (all runs in one pass)", True),
    ("exchange", "cycles receiving operands and partial sums", True),
    ("sync", "compute-set syncs and exchange-phase openings", True),
    ("vector", "vector-unit work: element-wise, reductions, casts", True),
    ("glue", "of all its cycles, the compute sets PopLibs adds around its own vertices: "
             "rearrangements, transposes, reductions, casts", True),
    ("µs / micro-batch", "time of all its runs in one pass (the weight update: per update)",
     True),
    ("runs / step", "times its pass runs in one step, counted on the timeline", True),
    ("% of step", "its time in one step ÷ the step's time", True),
    ("% of compute", "its time in one step ÷ the replica's compute time in one step", True),
    ("program steps", "the steps PopLibs builds for it, as PopVision's program tree lists "
                      "them: syncs, exchanges and compute sets, with their cycles", False),
)


def shape_text(row) -> str:
    """An operator's shape: a matmul's (m×k)·(k×n), with its groups; elements otherwise."""
    if row.kind == KernelKind.MATMUL.value:
        groups = f"{row.groups:,} × " if row.groups > 1 else ""
        return f"{groups}({row.m:,}×{row.k:,})·({row.k:,}×{row.n:,}) {precision(row.width)}"
    return f"{row.elements:,} elements {precision(row.width)}"


def operator_name(row) -> str:
    """One operator in words: its pass, kind and shape."""
    return f"{row.pass_.replace('_', ' ')} {row.kind} {shape_text(row)}"


def top_operators(shares: pd.DataFrame, count: int = TOP_OPERATORS) -> pd.DataFrame:
    """The ``count`` operators that take the most of the step, most first."""
    return shares.sort_values("step_share", ascending=False, kind="stable").head(count)


def _rows(shares: pd.DataFrame):
    """The rows as named tuples, ``pass`` renamed ``pass_`` (a Python keyword)."""
    return shares.rename(columns={"pass": "pass_"}).itertuples(index=False)


def steps_html(steps) -> str:
    """An operator's program steps as a list that opens on a click: each step's program,
    name and cycles, as PopVision's program tree names them."""
    items = "".join(f'<li class="step-{html.escape(role)}">{html.escape(program)} '
                    f'<span class="step-name">{html.escape(name)}</span> {cycles:,.0f}</li>'
                    for program, name, role, cycles in steps)
    return f"<details><summary>{len(steps)} steps</summary><ol>{items}</ol></details>"


def source_text(source: Source) -> str:
    """One source in words: its module and the file name and line (``fc1 · model.py:31``)."""
    where = f"{Path(source.file).name}:{source.line}" if source.file else ""
    return " · ".join(part for part in (source.module or "(model)", where) if part)


def sources_html(sources: list[Source], shown: int = 3) -> str:
    """An operator's sources, the first ``shown`` of them, each with its whole path on
    hover, and how many more; a dash for none."""
    if not sources:
        return "—"
    items = [f'<span class="source" title="{html.escape(f"{s.file}:{s.line}")}">'
             f"{html.escape(source_text(s))}</span>" for s in sources[:shown]]
    more = f" +{len(sources) - shown} more" if len(sources) > shown else ""
    return "<br>".join(items) + more


def operator_table_html(shares: pd.DataFrame,
                        sources: dict[object, list[Source]] | None = None) -> str:
    """The sortable table: one row per operator, most of the step first; each cell keeps
    its raw value in ``data-sort`` for the page's sorting. ``sources``: each row's (by the
    shares' index), :func:`ipusim.analysis.program_steps.operator_sources`."""
    sources = sources or {}
    head = "".join(f'<th data-type="{"number" if numeric else "text"}" '
                   f'title="{html.escape(tip)}"{SORTED if name == "% of step" else ""}>'
                   f'<button type="button">{html.escape(name)}</button></th>'
                   for name, tip, numeric in COLUMNS)
    body = []
    ordered = shares.sort_values("step_share", ascending=False, kind="stable")
    for index, row in zip(ordered.index, _rows(ordered)):
        found = sources.get(index, [])
        cells = [(row.ipu, f"{row.ipu}"), (row.stage, html.escape(row.stage)),
                 (row.pass_, row.pass_.replace("_", " ")),
                 (f"{row.kind} {shape_text(row)}", f"{row.kind} {html.escape(shape_text(row))}"),
                 ("; ".join(source_text(s) for s in found), sources_html(found)),
                 (row.count, f"{row.count:,}")]
        cells += [(getattr(row, column), f"{getattr(row, column):,.0f}") for column, *_ in TERMS]
        cells += [(row.glue_cycles, f"{row.glue_cycles:,.0f}"),
                  (row.time_us, f"{row.time_us:,.2f}"),
                  (row.runs_per_step, f"{row.runs_per_step:,.4g}"),
                  (row.step_share, f"{row.step_share:.2%}"),
                  (row.compute_share, f"{row.compute_share:.2%}"),
                  (len(row.steps), steps_html(row.steps))]
        tds = "".join(f'<td data-sort="{html.escape(str(value))}">{text}</td>'
                      for value, text in cells)
        body.append(f'<tr data-stage="{row.stage_index}" data-pass="{row.pass_}">{tds}</tr>')
    return (f'<div class="operator-scroll"><table class="operators sortable" id="operator-table">'
            "<caption>AMP, exchange, sync and vector: clock cycles of one micro-batch on the "
            "busiest tile (all the operator's runs in its pass)</caption>"
            f'<thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table></div>')


def operator_treemap(shares: pd.DataFrame, passes: pd.DataFrame) -> go.Figure:
    """IPU → stage → operator, each sized by its time in a step and coloured by the term
    that takes most of its cycles; a pass priced by the roofline is one grey box."""
    ids, labels, parents, values, colours, hovers, texts = [], [], [], [], [], [], []

    def node(id_, label, parent, value, colour, hover, share):
        ids.append(id_)
        labels.append(label)
        parents.append(parent)
        values.append(value)
        colours.append(colour)
        hovers.append(hover)
        texts.append("" if share is None else f"{share:.1%} of the step")

    per_step = shares.assign(**{column: shares[column] * shares["runs_per_step"]
                                for column, *_ in TERMS})
    roofline = roofline_passes(passes)
    # The root adds up IPUs that work at the same time: its time, not a share of the step.
    node("step", "one replica's step", "", 0, "white",
         _split_hover("one replica's step, every IPU", per_step, share=False), None)
    for ipu in sorted(set(passes["ipu"])):
        mine = per_step[per_step["ipu"] == ipu]
        node(f"ipu{ipu}", f"IPU {ipu}", "step", 0, "#f4f4f4",
             _split_hover(f"IPU {ipu}", mine), float(passes.loc[passes["ipu"] == ipu,
                                                                "step_share"].sum()))
        for index in sorted(set(passes.loc[passes["ipu"] == ipu, "stage_index"])):
            stage = passes[passes["stage_index"] == index]
            name = stage["stage"].iloc[0]
            operators = per_step[per_step["stage_index"] == index].sort_values(
                "us_per_step", ascending=False, kind="stable")
            node(f"s{index}", name, f"ipu{ipu}", 0, "#fafafa",
                 _split_hover(html.escape(name), operators), float(stage["step_share"].sum()))
            for position, row in zip(operators.index, _rows(operators)):
                dominant = max(TERMS, key=lambda term: getattr(row, term[0]))
                node(f"o{position}", operator_name(row), f"s{index}", row.us_per_step,
                     dominant[2], _split_hover(html.escape(operator_name(row)),
                                               operators.loc[[position]]), row.step_share)
            for row in _rows(roofline[roofline["stage_index"] == index]):
                node(f"r{index}{row.pass_}", f"{row.pass_.replace('_', ' ')}: roofline",
                     f"s{index}", row.us_per_step, _ROOFLINE_COLOUR,
                     f"<b>{html.escape(name)} {row.pass_.replace('_', ' ')}</b><br>"
                     f"{row.us_per_step:,.1f} µs per step ({row.step_share:.1%} of the step)"
                     "<br>priced by the roofline (FLOPs, bytes, fixed time):<br>"
                     "it lists no operators", row.step_share)
    return go.Figure(go.Treemap(
        ids=ids, labels=labels, parents=parents, values=values, branchvalues="remainder",
        marker={"colors": colours, "line": {"color": "white", "width": 1}},
        text=texts, texttemplate="<b>%{label}</b><br>%{text}", hovertext=hovers,
        hovertemplate="%{hovertext}<extra></extra>", pathbar={"visible": True},
        sort=False,  # IPUs and stages in order; each stage's operators most first
        tiling={"pad": 2}, maxdepth=4), layout={
        "title": {"text": "Compute time of one step by IPU, stage and operator<br><sup>"
                          "box area: time in a step; colour: the term that takes most of its "
                          "cycles (AMP blue, exchange orange, sync grey, vector green); "
                          "click a box to zoom</sup>"},
        "height": 560, "margin": {"l": 10, "r": 10, "t": 80, "b": 10}})


def _split_hover(title: str, operators: pd.DataFrame, share: bool = True) -> str:
    """A treemap box's hover: its time in a step, its share, and its cycles by term."""
    total = sum(float(operators[column].sum()) for column, *_ in TERMS)
    split = " · ".join(f"{name} {float(operators[column].sum()) / total:.0%}"
                       for column, name, _ in TERMS) if total else "no operators"
    of_step = f" ({float(operators['step_share'].sum()):.1%} of the step)" if share else ""
    return (f"<b>{title}</b><br>{float(operators['us_per_step'].sum()):,.1f} µs of operators "
            f"per step{of_step}<br>{float(total):,.0f} cycles per step: {split}")


def operators_section(timeline: Timeline, plot_config: dict,
                      contexts: dict[str, list[dict]] | None = None) -> str:
    """The report's operators section: the top operators, the treemap, the table, and the
    passes priced by the roofline, or why there is nothing to show. ``contexts``: the
    debug contexts of the operator runs, by name, that name each operator's source."""
    passes = timeline.pass_shares()
    shares = timeline.operator_shares()
    roofline = roofline_passes(passes)
    note = _roofline_note(roofline)
    if shares.empty:
        return (f'<section id="operators"><h2>Operators</h2><div class="operators-none">'
                "No stage of this run lists its operators: every pass was priced by the "
                "roofline (from its FLOPs and bytes, or a fixed time), so there is no "
                "operator to break its time down into. A model run through the PopTorch "
                f"shim lists its operators.{note}</div></section>")
    treemap = pio.to_html(operator_treemap(shares, passes), include_plotlyjs=False,
                          full_html=False, div_id="operator-treemap", config=plot_config)
    mean = f"the mean of {timeline.steps} steps" if timeline.steps > 1 else "one step"
    replicas = (f" (each of the {timeline.run.replicas} replicas runs the same)"
                if timeline.run.replicas > 1 else "")
    top = "".join(
        f'<li><span class="share">{row.step_share:.1%}</span> {html.escape(operator_name(row))}'
        f" <span class=\"where\">— {html.escape(row.stage)} on IPU {row.ipu}, "
        f"{row.compute_share:.1%} of the compute</span></li>"
        for row in _rows(top_operators(shares)))
    per_ipu = shares.groupby("ipu")["step_share"].sum()
    busiest = (f"IPU {per_ipu.idxmax()} spends the most of the step in operators: "
               f"{per_ipu.max():.1%}; the rest of its step is host I/O, copies, syncs, other "
               "compute and idle time (see Utilisation).")
    stages = {int(index): {"name": name, "ipu": int(ipu), "roofline": sorted(
        set(roofline.loc[roofline["stage_index"] == index, "pass"]))}
        for index, name, ipu in passes[["stage_index", "stage", "ipu"]].drop_duplicates()
        .itertuples(index=False)}
    passes_by_label = {lanes.NAMES[kind]: kind for kind in COMPUTE_KINDS}
    data = json.dumps({"stages": stages, "passes": passes_by_label})
    count = min(TOP_OPERATORS, len(shares))
    return f"""<section id="operators"><h2>Operators</h2>
<p class="sub">Each stage's operators for one micro-batch, priced by the operator model
(cycles on the busiest tile, as PopLibs' planner and estimators count them). <b>Share of the
step</b>: the operator's time in one step (its time per micro-batch × the times its pass runs in
a step, counted on the timeline) ÷ the step's simulated time ({mean}),
for one replica{replicas}; the IPUs of a pipeline work at the same time, so shares on
different IPUs overlap. <b>Share of compute</b>: of every compute box of the replica's step.
Click a compute box of the timeline to see its stage's operators; click a header to sort.</p>
<div class="top-operators"><b>The {count} operators that take the most of the step</b>
<ol>{top}</ol><p class="busiest">{busiest}</p></div>
<div class="figure">{treemap}</div>
<div id="operator-filter" class="operator-filter" hidden><span></span>
<button type="button" id="operator-filter-clear">Show every stage</button></div>
{operator_table_html(shares, operator_sources(timeline, contexts or {}))}{note}
<script type="application/json" id="operator-data">{_json_in_html(data)}</script>
</section>"""


def roofline_passes(passes: pd.DataFrame) -> pd.DataFrame:
    """The passes of :meth:`Timeline.pass_shares` that the roofline priced: they take time
    but list no operators. A pass that lists none and takes no time (the weight update of
    a stage without weights, such as one holding only the loss) is neither, and left out."""
    return passes[~passes["operators"] & (passes["us_per_step"] > 0)]


def _roofline_note(roofline: pd.DataFrame) -> str:
    """Which passes the roofline priced: they take time but list no operators."""
    if roofline.empty:
        return ""
    items = "".join(
        f"<li>{html.escape(row.stage)} (IPU {row.ipu}) {row.pass_.replace('_', ' ')}: "
        f"{row.us_per_step:,.1f} µs per step, {row.step_share:.1%} of the step</li>"
        for row in _rows(roofline))
    return ('<div class="roofline-note"><b>Priced by the roofline, so no operators to list</b> '
            "(a hand-written cost: FLOPs and bytes, or a fixed time):"
            f"<ul>{items}</ul></div>")


def _json_in_html(text: str) -> str:
    """JSON safe inside a ``<script>`` element: no ``</`` to end it early."""
    return text.replace("</", "<\\/")


#: Showing a stage's operators when a compute box of the timeline is clicked (the table
#: sorts by :data:`ipusim.report.sortable_table.SCRIPT`).
OPERATORS_SCRIPT = """(function () {
  var table = document.getElementById("operator-table");
  var source = document.getElementById("operator-data");
  if (!table || !source) { return; }
  var data = JSON.parse(source.textContent);
  var body = table.tBodies[0];
  var filter = document.getElementById("operator-filter");
  function show(stage, pass) {
    var info = data.stages[stage];
    var shown = 0;
    Array.prototype.forEach.call(body.rows, function (row) {
      var mine = stage === null || row.getAttribute("data-stage") === String(stage);
      row.hidden = !mine;
      row.classList.toggle("clicked", mine && stage !== null &&
                           row.getAttribute("data-pass") === pass);
      shown += mine ? 1 : 0;
    });
    if (stage === null || !info) { filter.hidden = true; return; }
    var text = "The operators of " + info.name + " (IPU " + info.ipu + ")";
    if (info.roofline.indexOf(pass) >= 0) {
      text += ": its " + pass.replace("_", " ") + " pass was priced by the roofline and " +
              "lists no operators";
    } else if (shown) {
      text += ", its " + pass.replace("_", " ") + " pass highlighted";
    }
    filter.querySelector("span").textContent = text + " (" + shown + " operator rows).";
    filter.hidden = false;
  }
  document.getElementById("operator-filter-clear").addEventListener("click", function () {
    show(null, null);
  });
  window.ipusimShowStageOperators = show;
  window.addEventListener("load", function () {
    // The plots grew the page after the browser went to its #fragment: go there again.
    var target = window.location.hash && document.getElementById(window.location.hash.slice(1));
    if (target) { setTimeout(function () { target.scrollIntoView(); }, 0); }
    var timeline = document.getElementById("timeline");
    if (!timeline || !timeline.on) { return; }
    timeline.on("plotly_click", function (event) {
      var point = event.points && event.points[0];
      var pass = point && data.passes[point.data.name];
      if (!pass || !point.customdata) { return; }
      var stage = Math.round(point.customdata[2]);
      if (!(stage in data.stages)) { return; }
      show(stage, pass);
      document.getElementById("operators").scrollIntoView({behavior: "smooth"});
    });
  });
})();"""
