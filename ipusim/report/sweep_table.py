"""The sweep report's tables of points: they sort and filter in the browser.

One table of the points PopTorch would run and one of those it refuses, each
a ``<tbody>`` per point (its row, and a details row with every figure, the
settings and the settings as code) so that sorting moves a point whole and
the page stays a readable width: the table shows the settings that change
over the sweep and a few figures, the details row the rest. A few lines of
plain JavaScript (:data:`SCRIPT`, after :data:`ipusim.report.sortable_table.SCRIPT`
that sorts by a heading) filter by words and open a point; ``window.ipusimSweep``
holds them for a person or a test.
"""
from __future__ import annotations

import html
import json
import re
from collections.abc import Callable

import pandas as pd

THROUGHPUT, MEMORY = "throughput(items/s)", "memory_max(MB)"

STYLE = """
.note { color: #555; font-size: 0.9rem; margin: 0.8rem 0 0; }
.note ul { margin: 0.2rem 0 0; padding-left: 1.4rem; }
.shared { font-size: 0.9rem; color: #333; }
.shared code, tr.details code { font-size: 0.8rem; overflow-wrap: anywhere; }
.filter { margin: 0.3rem 0 0.5rem; font-size: 0.9rem; color: #444; }
.filter input[type=search] { width: 18rem; font: inherit; padding: 0.15rem 0.4rem; }
.filter label, .filter span { margin-left: 1rem; }
table.points { border-collapse: collapse; background: white; font-size: 0.82rem; width: 100%;
               box-shadow: 0 1px 3px rgba(0,0,0,0.12); }
table.points th { position: sticky; top: 0; background: #f1f3f5; vertical-align: bottom;
                  font-weight: 600; padding: 0; text-align: right; }
table.points th.text, table.points td.text { text-align: left; }
table.points td { padding: 0.2rem 0.5rem; border-bottom: 1px solid #eee; text-align: right;
                  font-variant-numeric: tabular-nums; vertical-align: top; }
table.points td.text { max-width: 22rem; }
table.points td.reason { min-width: 24rem; }
table.points td.actions { white-space: nowrap; text-align: left; }
table.points tbody.pareto tr.point { background: #eef6ee; }
table.points tbody.pareto tr.point td:first-child { box-shadow: inset 4px 0 #2ca02c; }
table.points tbody[hidden] { display: none; }
table.points tr.details { display: none; }
table.points tbody.open tr.details { display: table-row; }
table.points tr.details td { text-align: left; background: #fbfbfb; white-space: normal; }
table.points tr.details dl { display: grid; grid-template-columns: max-content 1fr;
                             gap: 0.15rem 1rem; margin: 0.3rem 0; }
table.points tr.details dt { color: #555; }
table.points tr.details dd { margin: 0; }
table.points tr.details pre { margin: 0; white-space: pre-wrap; font-size: 0.8rem; }
button.more { font: inherit; font-size: 0.8rem; padding: 0 0.4rem; cursor: pointer; }
:target tr.point { outline: 2px solid #1f77b4; }
"""


SCRIPT = """(function () {
  function filter(table, text, paretoOnly) {
    var words = text.toLowerCase().split(/\\s+/).filter(Boolean), shown = 0;
    Array.prototype.forEach.call(table.tBodies, function (body) {
      var haystack = body.rows[0].textContent.toLowerCase();
      var keep = words.every(function (word) { return haystack.indexOf(word) >= 0; }) &&
          (!paretoOnly || body.classList.contains("pareto"));
      body.hidden = !keep;
      shown += keep ? 1 : 0;
    });
    var count = document.querySelector('[data-count-of="' + table.id + '"]');
    if (count) { count.textContent = shown + " of " + table.tBodies.length + " shown"; }
    return shown;
  }
  function open(id) {
    var body = document.getElementById("point-" + id);
    if (!body) { return; }
    body.hidden = false;
    body.classList.add("open");
    body.scrollIntoView({block: "center"});
  }
  window.ipusimSweep = {sort: window.ipusimSortTable, filter: filter, open: open};
  document.querySelectorAll("table.points").forEach(function (table) {
    table.addEventListener("click", function (event) {
      var button = event.target.closest("button.more");
      if (!button) { return; }
      var body = button.closest("tbody");
      body.classList.toggle("open");
      button.setAttribute("aria-expanded", body.classList.contains("open"));
    });
  });
  document.querySelectorAll(".filter").forEach(function (form) {
    var table = document.getElementById(form.getAttribute("data-table"));
    var search = form.querySelector("input[type=search]");
    var pareto = form.querySelector("input[type=checkbox]");
    function update() { filter(table, search.value, pareto ? pareto.checked : false); }
    form.addEventListener("input", update);
    form.addEventListener("submit", function (event) { event.preventDefault(); });
  });
})();"""



def settings_columns(table: pd.DataFrame) -> list[str]:
    """The columns that name a point's settings (between its id and its figures)."""
    columns = list(table.columns)
    return columns[columns.index("point_id") + 1:columns.index("ipus")]


def text(value) -> str:
    """A cell as text: empty for a missing value."""
    if value is None or value is pd.NA or isinstance(value, float) and value != value:
        return ""
    return str(value)


def number(value) -> str:
    """A figure as a person reads it: four significant digits, thousands separated."""
    if isinstance(value, float):
        if value != value:
            return ""
        return f"{value:,.4g}" if abs(value) < 1e4 else f"{value:,.0f}"
    return text(value)


def varying_settings(table: pd.DataFrame) -> list[str]:
    """The settings that take more than one value over the sweep: the tables' columns."""
    return [name for name in settings_columns(table) if table[name].map(text).nunique() > 1]


def pipelined(table: pd.DataFrame) -> pd.Series:
    """Which rows ran pipelined: P > 0, or (a table of before that figure) a bubble."""
    bubble = table["bubble_fraction"].fillna(0) > 0
    if "pipeline_stages" not in table:
        return bubble
    stages = pd.to_numeric(table["pipeline_stages"], errors="coerce")
    return (stages > 0).where(stages.notna(), bubble).astype(bool)


def _share(value) -> str:
    return "" if value is None or value != value else f"{value:.1%}"


def _numbers(cell, show=number) -> str:
    """A JSON list of numbers (one per IPU) as a short line."""
    if not isinstance(cell, str):
        return ""
    return ", ".join(show(float(value)) for value in json.loads(cell))


def _shares(cell) -> str:
    return _numbers(cell, _share)


# The figures the table of points shows: (column, heading, format); the rest
# are in each point's details row.
_SHOWN = ((THROUGHPUT, "throughput (items/s)", number),
          ("ipus", "IPUs", number),
          (MEMORY, "memory (MB, fullest IPU)", number),
          ("utilisation", "utilisation", _share))
_BUBBLE = ("bubble_fraction", "pipeline bubble", _share)
_DETAILS = (("step(ms)", "step (ms)", number),
            ("latency(ms)", "latency (ms)", number),
            ("host_io_share", "host I/O share", _share),
            ("sync_wait_share", "sync-wait share", _share),
            ("utilisation_per_ipu", "utilisation per IPU", _shares),
            ("memory_per_ipu(MB)", "memory per IPU (MB)", _numbers),
            ("capacity(MB)", "SRAM of an IPU (MB)", number),
            ("pipeline_stages", "pipeline stages (P)", number))


def _breakable(words: str) -> str:
    """``words`` as HTML that may wrap between the parts of a dotted or camelCase
    name (``Training.<wbr>gradient<wbr>Accumulation``), never inside one."""
    return re.sub(r"(?<=[a-z])(?=[A-Z])|(?<=[.,_/])(?=\w)", "<wbr>", html.escape(words))


def _heading(label: str, kind: str, sorted_by: bool = False) -> str:
    """A column's heading: a button that sorts by it (``sorted_by``: the rows are, descending)."""
    order = ' aria-sort="descending"' if sorted_by else ""
    return (f'<th class="{kind}" data-type="{kind}"{order}><button type="button" '
            f'title="sort by {html.escape(label)}">{_breakable(label)}</button></th>')


def _cell(value, shown: str, kind: str, extra: str = "") -> str:
    """A cell showing ``shown``, sorted by ``value``."""
    key = str(int(value)) if isinstance(value, bool) else text(value)
    return (f'<td class="{kind}{extra}" data-sort="{html.escape(key)}">'
            f"{_breakable(shown) if kind == 'text' else html.escape(shown)}</td>")


def _setting_texts(column: pd.Series) -> pd.Series:
    """A setting's values as the table shows them: a table (JSON object) as ``key =
    value`` pairs, and without the enum's name when every value has the same
    (``SinglePipeline`` for ``SyncPattern.SinglePipeline``)."""
    texts = column.map(text)
    prefixes = texts.str.extract(r"^([A-Z]\w*\.)\w+$")[0]
    if len(texts) and prefixes.notna().all() and prefixes.nunique() == 1:
        return texts.str.slice(len(prefixes.iloc[0]))
    return texts.map(_pairs)


def _pairs(cell: str) -> str:
    if not cell.startswith("{"):
        return cell
    try:
        table = json.loads(cell)
    except ValueError:
        return cell
    return ", ".join(f"{key} = {json.dumps(value)}" for key, value in table.items())


def _details(row: pd.Series, settings: list[str], link: str | None, code: str | None,
             columns: int) -> str:
    """A point's details row: every figure, its settings (as code too), its report."""
    items = [(label, html.escape(show(row.get(column)))) for column, label, show in _DETAILS
             if column in row and show(row.get(column))]
    if isinstance(row.get("error"), str):
        items.insert(0, ("refused by PopTorch", html.escape(row["error"])))
    items.append(("settings", "<br>".join(
        f"<code>{html.escape(name)} = {html.escape(text(row[name]))}</code>"
        for name in settings)))
    if code:
        items.append(("as PopTorch code", f"<pre>{html.escape(code)}</pre>"))
    items.append(("timeline report",
                  f'<a href="{html.escape(link)}">{html.escape(link)}</a>' if link else
                  "none written for this point: <code>--report-points all</code> writes one "
                  "for every point"))
    items.append(("point id", f"<code>{html.escape(str(row['point_id']))}</code>"))
    body = "".join(f"<dt>{label}</dt><dd>{value}</dd>" for label, value in items)
    return f'<tr class="details"><td colspan="{columns}"><dl>{body}</dl></td></tr>'


# A column after the settings: heading, kind ("number" or "text") and the
# (sort value, shown text) of a row.
Column = tuple[str, str, Callable[[int, pd.Series], tuple[object, str]]]


def _figure_column(column: str, label: str, show) -> Column:
    return label, "number", lambda index, row: (row[column], show(row[column]))


def figure_columns(table: pd.DataFrame) -> list[Column]:
    """The figures a table of points that ran shows (the bubble where any is pipelined)."""
    shown = list(_SHOWN) + ([_BUBBLE] if pipelined(table).any() else [])
    return [_figure_column(*figure) for figure in shown]


def refusal_columns(refused: pd.DataFrame) -> list[Column]:
    """Why each refused point is refused (see :func:`ipusim.explore.design_point.refusals`),
    the reason in its first sentence (the details row has it whole)."""
    return [("why", "text", lambda index, row: (refused.at[index, "refusal"],) * 2),
            ("reason", "text", lambda index, row: (refused.at[index, "reason"],
                                                   first_sentence(refused.at[index, "reason"])))]


def first_sentence(message: str) -> str:
    """An error's first sentence, without the exception's name and PopTorch's error kind
    (``InvalidUseError: 'poptorch_cpp_error': ...``)."""
    message = re.sub(r"^\w+: ('\w+': )?", "", message)
    return re.split(r"(?<=[\w)\]])\. (?=[A-Z])", message, maxsplit=1)[0]


def table_html(table_id: str, table: pd.DataFrame, rows: pd.DataFrame, names: list[str],
               columns: list[Column], links: dict[str, str], code: dict[str, str],
               front: pd.Index = pd.Index([]), sorted_by: str | None = None) -> str:
    """A table of ``rows`` (of the sweep's ``table``, in their order): the point's
    number, the settings ``names``, ``columns``, its report and details; the rows
    of ``front`` marked; ``sorted_by``: the heading the rows are sorted by, descending."""
    settings = settings_columns(table)
    kinds = {name: "number" if pd.to_numeric(table[name].dropna(), errors="coerce").notna().all()
             else "text" for name in names}
    texts = {name: _setting_texts(table[name]) for name in names}
    head = (_heading("#", "number") + "".join(_heading(name, kinds[name]) for name in names)
            + "".join(_heading(label, kind, label == sorted_by) for label, kind, _ in columns)
            + '<th class="text"></th>')
    width = 2 + len(names) + len(columns)
    bodies = []
    for index, row in rows.iterrows():
        key, link = row["point_id"], links.get(row["point_id"])
        cells = [_cell(row["point"], text(row["point"]), "number")]
        cells += [_cell(row[name], texts[name][index], kinds[name]) for name in names]
        cells += [_cell(*value(index, row), kind, " reason" if label == "reason" else "")
                  for label, kind, value in columns]
        report = f'<a href="{html.escape(link)}">report</a> ' if link else ""
        actions = (f'<td class="actions">{report}<button type="button" class="more" '
                   'aria-expanded="false">details</button></td>')
        marked = ' class="pareto"' if index in front else ""
        bodies.append(f'<tbody id="point-{html.escape(key)}"{marked}><tr class="point">'
                      f'{"".join(cells)}{actions}</tr>'
                      f'{_details(row, settings, link, code.get(key), width)}</tbody>')
    return (f'<table class="points sortable" data-sort-bodies id="{table_id}">'
            f'<thead><tr>{head}</tr></thead>{"".join(bodies)}</table>')


def filter_html(table_id: str, rows: int, pareto: bool) -> str:
    """The box that filters a table by words (and, ``pareto``, to the Pareto front)."""
    box = '<label><input type="checkbox"> only the Pareto front</label>' if pareto else ""
    return (f'<form class="filter" data-table="{table_id}" role="search">'
            f'<input type="search" placeholder="filter: words in a row" '
            f'aria-label="filter the rows">{box}'
            f'<span data-count-of="{table_id}">{rows} of {rows} shown</span></form>')
