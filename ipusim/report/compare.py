"""Two runs side by side, in words and on a page (``ipusim compare A B``).

:func:`load_run` reads a run from its report (as :mod:`ipusim.report.autoreport`
reads one); :func:`ipusim.analysis.comparison.compare` works out the
:class:`~ipusim.analysis.comparison.Comparison` of two, in figures, and this module
puts it into words: the text summary (:func:`comparison_text`) and the page
(:func:`render_comparison_html`, the report's scaffold and style) both draw that
one object, naming its IPUs and its operators' shapes the same way
(:func:`per_ipu_table`, :func:`operator_table`).
"""
from __future__ import annotations

import html
import textwrap
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import plotly
import plotly.graph_objects as go
import plotly.io as pio

from ipusim.analysis.comparison import ComparedRun, Comparison, RunFigures
from ipusim.analysis.operator_breakdown import precision
from ipusim.cost.cost_model import PS_PER_US
from ipusim.report.autoreport import PROFILE, load_report, profile_names, report_folder
from ipusim.report.files import write_atomically
from ipusim.report.page import PLOT_CONFIG, page

#: The page ``ipusim compare`` writes beside B's report unless told otherwise.
COMPARE_HTML = "compare.html"
# Operator rows the text and the page list at most (the largest differences first).
MAX_OPERATOR_ROWS = 12
_B_COLOUR = "#1f77b4"
# The page's own touches on the report's style: numbers in one line, headed on the right.
_STYLE = """<style>
table.compare td.value, table.compare th { white-space: nowrap; }
table.compare th.value { text-align: right; }
table.compare td { overflow-wrap: anywhere; }
.verdict.faster { border-left-color: #2ca02c; }
.verdict.slower { border-left-color: #d62728; }
.verdict.about-as-fast { border-left-color: #999; }
</style>"""


# -- reading the two runs ----------------------------------------------------------------------

def load_run(path: str | Path) -> ComparedRun:
    """The run of an autoReport directory, or of its ``profile.json``.

    Raises FileNotFoundError or ValueError naming the path for anything that is not a
    whole profile with its events (:func:`~ipusim.report.autoreport.report_folder` and
    :func:`~ipusim.report.autoreport.load_report` say which), or whose options or
    setting names are damaged.
    """
    folder = report_folder(path)
    timeline, profile = load_report(folder)
    options = profile.get("options") or {}
    if not isinstance(options, dict):
        raise ValueError(f"{folder / PROFILE} is damaged: its options are "
                         f"{type(options).__name__}, not an object")
    try:
        names = profile_names(profile)
    except ValueError as error:
        raise ValueError(f"{folder}: {error}") from None
    return ComparedRun(folder.resolve().name, timeline, options, names, folder)


# -- the text summary --------------------------------------------------------------------------

def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def ipus_text(figures: RunFigures) -> str:
    """A run's IPUs in words: "8 IPUs (2 replicas × 4, Mk2 GC200)"."""
    return (f"{_count(figures.num_ipus, 'IPU')} ({_count(figures.replicas, 'replica')} × "
            f"{figures.ipus_per_replica}, {figures.ipu})")


def per_ipu_basis(comparison: Comparison) -> str:
    """How the IPUs of the two runs are matched, in a sentence."""
    a, b = comparison.a, comparison.b
    if comparison.per_ipu_match == "ipu":
        return f"IPU by IPU ({a.num_ipus} each)"
    if comparison.per_ipu_match == "place":
        return (f"A has {_count(a.num_ipus, 'IPU')} ({_count(a.replicas, 'replica')}), B has "
                f"{_count(b.num_ipus, 'IPU')} ({_count(b.replicas, 'replica')}): IPUs compared "
                "by their place in a replica, each the mean over its run's replicas")
    return (f"A has {_count(a.ipus_per_replica, 'IPU')} per replica, B has "
            f"{b.ipus_per_replica}: the IPUs do not correspond, so the mean IPU of each run "
            "is compared")


def per_ipu_table(comparison: Comparison) -> pd.DataFrame:
    """:attr:`Comparison.per_ipu` with each IPU named ("IPU 3", "IPU 1 of each replica",
    "each IPU", "mean IPU") and each part by its label, as the text and the page show it."""
    match = comparison.per_ipu_match
    if match == "ipu":
        name = "IPU {}".format
    elif match == "place":
        name = "IPU {} of each replica".format if comparison.a.ipus_per_replica > 1 else \
            "each IPU".format
    else:
        name = "mean IPU".format
    table = comparison.per_ipu.copy()
    table["ipu"] = [name(ipu) for ipu in table["ipu"]]
    table.insert(2, "label", table["part"].map(comparison.parts["label"]))
    return table


def operator_table(comparison: Comparison) -> pd.DataFrame | None:
    """:attr:`Comparison.operators` with each operator's size in words (``shape``: a
    matmul's m × k × n, another's elements, and the precision), as the text and the
    page list them; None when neither run records operators."""
    operators = comparison.operators
    if operators is None:
        return None
    table = operators[["stage", "pass", "kind"]].copy()
    table["shape"] = [_shape(row) for row in operators.itertuples(index=False)]
    return pd.concat([table, operators[["a_count", "b_count", "a_us", "b_us", "delta_us",
                                        "status"]]], axis=1)


def _shape(row) -> str:
    """An operator's size in words: a matmul's m × k × n, another's elements."""
    width = precision(row.width)
    if row.m or row.k or row.n:
        groups = f", {int(row.groups)} groups" if row.groups > 1 else ""
        return f"{int(row.m):,} × {int(row.k):,} × {int(row.n):,}{groups} {width}"
    return f"{int(row.elements):,} elements {width}"


def _time(us: float) -> str:
    """A time in the unit a person reads it in: µs below a millisecond, else ms."""
    if abs(us) >= 1000:
        return f"{us / 1000:,.3f} ms"
    return f"{us:,.1f} µs"


def _signed(us: float) -> str:
    return ("+" if us > 0 else "−" if us < 0 else "±") + _time(abs(us))


def speed(comparison: Comparison) -> str:
    """B against A in a word or three: "faster", "slower" or "about as fast" (within
    half a percent of A's throughput)."""
    ratio = comparison.throughput_ratio
    return "faster" if ratio >= 1.005 else "slower" if ratio <= 0.995 else "about as fast"


def headline(comparison: Comparison) -> str:
    """What got faster, and why, in two sentences."""
    a, b = comparison.a, comparison.b
    ratio = comparison.throughput_ratio
    text = (f"B has {ratio:.2f}× the throughput of A ({speed(comparison)}): "
            f"{b.items_per_s:,.0f} against {a.items_per_s:,.0f} items/s.")
    items = comparison.items_per_step_ratio
    if items != 1:
        text += (f" Each step carries {items:.2f}× the items ({b.items_per_step:,} against "
                 f"{a.items_per_step:,}) and takes {comparison.step_time_ratio:.2f}× as long.")
    else:
        text += f" Each step takes {comparison.step_time_ratio:.2f}× as long."
    largest = comparison.largest_parts()
    if len(largest):
        said = [f"{row.label} {_signed(row.delta_us)}" for row in largest.itertuples()]
        text += (f" Step time {_signed(comparison.step_time_delta_us)}, mostly "
                 + (", ".join(said[:-1]) + " and " if len(said) > 1 else "") + said[-1] + ".")
    return text


def _figure_rows(comparison: Comparison) -> list[tuple[str, str, str, str]]:
    """The headline figures of A and B, and B's ratio to A: (name, A, B, ratio)."""
    a, b = comparison.a, comparison.b
    return [("throughput", f"{a.items_per_s:,.0f}", f"{b.items_per_s:,.0f}",
             f"{comparison.throughput_ratio:.2f}×"),
            ("step time", _time(a.step_time_ps / PS_PER_US), _time(b.step_time_ps / PS_PER_US),
             f"{comparison.step_time_ratio:.2f}×"),
            ("items per step", f"{a.items_per_step:,}", f"{b.items_per_step:,}",
             f"{comparison.items_per_step_ratio:.2f}×"),
            ("steps simulated", str(a.steps), str(b.steps), ""),
            ("IPUs (replicas × per replica)", f"{a.num_ipus} ({a.replicas} × "
             f"{a.ipus_per_replica})", f"{b.num_ipus} ({b.replicas} × {b.ipus_per_replica})",
             ""),
            ("simulated time", _time(a.step_time_ps * a.steps / PS_PER_US),
             _time(b.step_time_ps * b.steps / PS_PER_US), "")]


def comparison_text(comparison: Comparison) -> str:
    """The comparison as text a person reads in a terminal."""
    a, b = comparison.a, comparison.b
    rows = [(name, f"{va} items/s", f"{vb} items/s", r) if name == "throughput"
            else (name, va, vb, r) for name, va, vb, r in _figure_rows(comparison)[:4]]
    sections = [
        "ipusim comparison (simulated timings, not measured on hardware)\n"
        f"  A: {a.name}, {ipus_text(a)}\n  B: {b.name}, {ipus_text(b)}",
        f"  {'':<16}{'A':>18}{'B':>18}{'B vs A':>10}\n"
        + "\n".join(f"  {name:<16}{va:>18}{vb:>18}{r:>10}" for name, va, vb, r in rows),
        _wrap(headline(comparison)),
        _parts_text(comparison),
        _per_ipu_text(comparison),
        _options_text(comparison),
        _operators_text(comparison),
    ]
    return "\n\n".join(sections) + "\n"


def _wrap(text: str) -> str:
    return textwrap.fill(text, width=96)


def _parts_text(comparison: Comparison) -> str:
    lines = ["Step time by part (mean per IPU and step; the differences add up to the total)",
             f"  {'':<50}{'A':>12}{'B':>12}{'B − A':>13}"]
    for row in comparison.parts.itertuples():
        lines.append(f"  {row.label:<50}{_time(row.a_us):>12}{_time(row.b_us):>12}"
                     f"{_signed(row.delta_us):>13}")
    a_us, b_us = comparison.a.step_time_ps / PS_PER_US, comparison.b.step_time_ps / PS_PER_US
    lines.append(f"  {'step time':<50}{_time(a_us):>12}{_time(b_us):>12}"
                 f"{_signed(comparison.step_time_delta_us):>13}")
    return "\n".join(lines)


def _per_ipu_text(comparison: Comparison) -> str:
    per_ipu = per_ipu_table(comparison)
    table = per_ipu.pivot(index="ipu", columns="part", values="delta_us")
    table = table.reindex(index=list(dict.fromkeys(per_ipu["ipu"])),
                          columns=list(comparison.parts.index))
    short = {"pipeline_bubble": "bubble", "host_round_trip": "round trip",
             "host_io": "host I/O", "sync_wait": "sync wait"}
    header = "".join(f"{short.get(part, part):>12}" for part in table.columns)
    lines = [textwrap.fill(f"Per IPU, B − A per step ({per_ipu_basis(comparison)})", width=96,
                           subsequent_indent="  "),
             f"  {'':<22}{header}"]
    for ipu, row in table.iterrows():
        lines.append(f"  {ipu:<22}" + "".join(f"{_signed(v) if v == v else 'n/a':>12}"
                                              for v in row))
    return "\n".join(lines)


def _options_text(comparison: Comparison) -> str:
    if comparison.options.empty:
        return "Settings: the same in both runs"
    lines = ["Settings that differ (A → B)"]
    lines += [f"  {row.setting}: {_value(row.a)} → {_value(row.b)}"
              for row in comparison.options.itertuples()]
    return "\n".join(lines)


def _value(value: object) -> str:
    """A setting's value as a person reads it: large numbers with thousands separators."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.6g}"
    return f"{int(value):,}"


def _operators_text(comparison: Comparison) -> str:
    operators = operator_table(comparison)
    if operators is None:
        return "Operators: neither run records its operators (stages priced as a whole)"
    changed = _changed_operators(operators)
    if changed.empty:
        return (f"Operators: the same in both runs ({len(operators)} kinds and shapes), with the "
                "same cycles per micro-batch")
    lines = [f"Operators that differ, per micro-batch ({len(changed)} of {len(operators)}; "
             "largest first)"]
    for row in changed[:MAX_OPERATOR_ROWS].to_dict("records"):
        lines.append(f"  {row['stage']} {row['pass']} {row['kind']} {row['shape']}: "
                     f"{_maybe_time(row['a_us'])} → {_maybe_time(row['b_us'])} "
                     f"({row['status']})")
    if len(changed) > MAX_OPERATOR_ROWS:
        lines.append(f"  ... {len(changed) - MAX_OPERATOR_ROWS} more in the page")
    return "\n".join(lines)


def _changed_operators(operators: pd.DataFrame) -> pd.DataFrame:
    changed = operators[operators["status"] != "same"]
    return changed.reindex(changed["delta_us"].abs().sort_values(ascending=False).index)


def _maybe_time(us: float) -> str:
    return "—" if us != us else _time(us)


# -- the page ----------------------------------------------------------------------------------

def waterfall_figure(comparison: Comparison) -> go.Figure:
    """A's step time, each part's difference, B's step time: a waterfall that closes.

    When the differences are small beside the step times, the axis starts above zero
    so that they show (its ticks say where it starts)."""
    parts = comparison.parts
    a_us = comparison.a.step_time_ps / PS_PER_US
    b_us = comparison.b.step_time_ps / PS_PER_US
    values = [a_us, *parts["delta_us"], b_us]
    figure = go.Figure(go.Waterfall(
        orientation="v", x=["A: step time", *parts["short"], "B: step time"], y=values,
        measure=["absolute", *["relative"] * len(parts), "total"],
        text=[_time(a_us), *map(_signed, parts["delta_us"]), _time(b_us)],
        customdata=[comparison.a.name, *parts["label"], comparison.b.name],
        textposition="outside", cliponaxis=False,
        increasing={"marker": {"color": "#d62728"}},
        decreasing={"marker": {"color": "#2ca02c"}},
        totals={"marker": {"color": _B_COLOUR}},
        connector={"line": {"color": "#999", "width": 1}},
        hovertemplate="%{customdata}<br>%{text}<extra></extra>"))
    running = a_us + parts["delta_us"].cumsum()
    low, high = min(a_us, b_us, running.min()), max(a_us, b_us, running.max())
    bottom = 0.0
    if 0 < high - low < 0.25 * low:  # the changes would be slivers on an axis from zero
        bottom = max(0.0, low - 1.5 * (high - low))
    top = high + 0.15 * (high - bottom)
    figure.update_layout(
        title="Where the step time changed (mean per IPU and step; red: B slower, "
              "green: B faster)",
        yaxis={"title": "µs per step" + (" (axis from " + _time(bottom) + ")" if bottom else ""),
               "range": [bottom, top], "gridcolor": "#eee"},
        xaxis={"automargin": True, "tickfont": {"size": 12}}, showlegend=False,
        margin={"l": 70, "r": 20, "t": 60, "b": 40}, height=440, plot_bgcolor="white")
    return figure


def per_ipu_figure(comparison: Comparison) -> go.Figure:
    """Each IPU's step time in both runs, stacked by part: A and B side by side."""
    table = per_ipu_table(comparison)
    ipus = list(dict.fromkeys(table["ipu"]))
    x = [[ipu for ipu in ipus for _ in "AB"], ["A", "B"] * len(ipus)]
    figure = go.Figure()
    for part, row in comparison.parts.iterrows():
        mine = table[table["part"] == part].set_index("ipu")
        y = [mine.at[ipu, column] for ipu in ipus for column in ("a_us", "b_us")]
        figure.add_trace(go.Bar(name=row["short"], x=x, y=y, marker={"color": row["colour"]},
                                hovertemplate=f"{html.escape(row['label'])}<br>%{{x}}: "
                                              "%{y:,.1f} µs per step<extra></extra>"))
    figure.update_layout(
        barmode="stack", title="Each IPU's step time, A beside B, by part",
        yaxis={"title": "µs per step", "gridcolor": "#eee"}, height=420,
        plot_bgcolor="white", margin={"l": 70, "r": 20, "t": 60, "b": 40},
        legend={"traceorder": "reversed"})
    return figure


def render_comparison_html(comparison: Comparison) -> str:
    """The comparison as one self-contained page in the report's style."""
    a, b = comparison.a, comparison.b
    plots = {name: pio.to_html(fig, include_plotlyjs=False, full_html=False, div_id=name,
                               config=PLOT_CONFIG)
             for name, fig in (("waterfall", waterfall_figure(comparison)),
                               ("per-ipu", per_ipu_figure(comparison)))}
    kind = speed(comparison).replace(" ", "-")  # the verdict box's colour: its class
    body = f"""\
{_STYLE}
<div class="top">
<section><h2>What changed</h2>
<div class="verdict {kind}"><span class="badge">{comparison.throughput_ratio:.2f}×</span>
{html.escape(headline(comparison))}</div>
<h2>Settings that differ</h2>
{_options_html(comparison)}</section>
<section><h2>Figures</h2>
{_figures_html(comparison)}</section>
</div>
<h2>Step time, A to B</h2>
<div class="figure">{plots["waterfall"]}</div>
{_parts_html(comparison)}
<h2>Per IPU</h2>
<p class="sub">{html.escape(per_ipu_basis(comparison))}</p>
<div class="figure">{plots["per-ipu"]}</div>
<h2>Operators</h2>
{_operators_html(comparison)}
<footer>Generated by ipusim with plotly {plotly.__version__} (plotly.js embedded, works offline).
A: {html.escape(a.name)} · B: {html.escape(b.name)}. Each part is the mean over a run's IPUs of
the time an IPU spends in it per step, so the parts add up to the step time (span ÷ steps).
</footer>
"""
    return page(f"{a.name} → {b.name}",
                 f"A: {a.name}, {ipus_text(a)} · B: {b.name}, {ipus_text(b)} · simulated timings, "
                 "not hardware measurements", body)


def write_comparison_html(comparison: Comparison, path: str | Path) -> Path:
    """Write :func:`render_comparison_html` to ``path`` (atomically); returns the path."""
    return write_atomically(path, render_comparison_html(comparison))


def _table(header: Sequence[str], rows: list[Sequence[str]], numbers: range | None = None,
           css: str = "") -> str:
    """A table in the report's style; the columns ``numbers`` (default: all but the first)
    hold numbers, set right-aligned."""
    numbers = range(1, len(header)) if numbers is None else numbers

    def cell(tag: str, i: int, text: str) -> str:
        kind = ' class="value"' if i in numbers else ""
        return f"<{tag}{kind}>{html.escape(text)}</{tag}>"

    head = "".join(cell("th", i, text) for i, text in enumerate(header))
    body = "".join("<tr>" + "".join(cell("td", i, text) for i, text in enumerate(row))
                   + "</tr>" for row in rows)
    return f'<table class="figures compare {css}"><tr>{head}</tr>{body}</table>'


def _figures_html(comparison: Comparison) -> str:
    rows = [("throughput (items/s)", *rest) if name == "throughput" else (name, *rest)
            for name, *rest in _figure_rows(comparison)]
    return _table(["", "A", "B", "B vs A"], rows)


def _parts_html(comparison: Comparison) -> str:
    rows = [(row.label, _time(row.a_us), _time(row.b_us), _signed(row.delta_us))
            for row in comparison.parts.itertuples()]
    rows.append(("step time", _time(comparison.a.step_time_ps / PS_PER_US),
                 _time(comparison.b.step_time_ps / PS_PER_US),
                 _signed(comparison.step_time_delta_us)))
    return ("<details open><summary>The parts, in numbers (mean per IPU and step)</summary>"
            + _table(["part", "A", "B", "B − A"], rows) + "</details>")


def _options_html(comparison: Comparison) -> str:
    if comparison.options.empty:
        return '<p class="sub">None: both runs were set up the same way.</p>'
    rows = [(row.setting, _value(row.a), _value(row.b))
            for row in comparison.options.itertuples()]
    return _table(["setting", "A", "B"], rows, numbers=range(0))


def _operators_html(comparison: Comparison) -> str:
    operators = operator_table(comparison)
    if operators is None:
        return ('<p class="sub">Neither run records its operators: their stages are priced as '
                "a whole.</p>")
    changed = _changed_operators(operators)
    if changed.empty:
        return (f'<p class="sub">The same operators in both runs ({len(operators)} kinds and '
                "shapes), with the same cycles per micro-batch.</p>")
    shown = changed[:MAX_OPERATOR_ROWS * 2]
    rows = [(row["stage"], row["pass"], row["kind"], row["shape"], _maybe_time(row["a_us"]),
             _maybe_time(row["b_us"]), _signed(row["delta_us"]), row["status"])
            for row in shown.to_dict("records")]
    note = (f"{len(changed)} of {len(operators)} operators differ (per micro-batch, largest "
            "difference first")
    note += f"; the first {len(shown)} shown)." if len(shown) < len(changed) else ")."
    return (f'<p class="sub">{html.escape(note)}</p>'
            + _table(["stage", "pass", "kind", "shape", "A", "B", "B − A", ""], rows,
                     numbers=range(4, 7)))


# -- a run compared with an earlier one --------------------------------------------------------

def baseline_pairs(baseline: Path, written: Sequence[Path]) -> tuple[list[tuple[Path, Path]],
                                                                      list[str]]:
    """Which earlier report each report a run just wrote is compared with.

    ``baseline`` is an earlier report folder (it holds profile.json) or the
    ``--report`` directory of an earlier run (its model folders). A report
    folder goes with the one written report of its name, or with the only one the
    run wrote; a report directory's folders with the written reports of the same
    names. Returns the (baseline, new) pairs and a line for each that has none.
    """
    if (baseline / PROFILE).is_file():
        same = [path for path in written if path.name == baseline.name]
        if same or len(written) == 1:
            return [(baseline, (same or written)[0])], []
        named = ", ".join(path.name for path in written) or "none"
        return [], [f"no report of this run is named {baseline.name} to compare with "
                    f"{baseline} (it wrote: {named}); compare two by hand with "
                    "`ipusim compare A B`"]
    pairs, notes = [], []
    for path in written:
        if (baseline / path.name / PROFILE).is_file():
            pairs.append((baseline / path.name, path))
        else:
            notes.append(f"{baseline} holds no report named {path.name} to compare "
                         f"{path} with")
    if not written:
        notes.append("the run wrote no report to compare with")
    return pairs, notes


def holds_reports(directory: Path) -> bool:
    """Whether ``directory`` is a report folder or holds some (what ``--compare-with`` takes)."""
    return (directory / PROFILE).is_file() or any(directory.glob(f"*/{PROFILE}"))


__all__ = ["COMPARE_HTML", "baseline_pairs", "comparison_text", "headline", "holds_reports",
           "ipus_text", "load_run", "operator_table", "per_ipu_basis", "per_ipu_figure",
           "per_ipu_table", "render_comparison_html", "speed", "waterfall_figure",
           "write_comparison_html"]
