"""The operators of the HTML report in a real browser: they draw without script errors, the
table sorts on a click of its header, and a click on a compute box of the timeline shows
that stage's operators.

Skipped only when Chromium is absent (see :mod:`support.browser`). The screenshot is kept
as ``reports/operators.png`` (ignored by git) for a person to look at.
"""
import json

from support.browser import dump_dom, needs_chromium, screenshot

from ipusim.report import write_html
from ipusim.report.page import render_check_json

from report_timelines import operator_pipeline_run

pytestmark = needs_chromium

# Run once the page has drawn: sort by the first header (IPU, ascending after descending),
# then click layer2's backward box as plotly reports a click, and write what the table shows.
ACTIONS = """<script>
window.addEventListener("load", function () { setTimeout(function () {
  var result = {};
  var header = document.querySelector("#operator-table th");
  header.click(); header.click();  // descending, then ascending
  var rows = Array.prototype.slice.call(document.querySelectorAll("#operator-table tbody tr"));
  result.ipus = rows.map(function (row) { return row.cells[0].getAttribute("data-sort"); });
  var timeline = document.getElementById("timeline");
  var box = timeline.data.filter(function (trace) { return trace.name === "backward"; })[2];
  timeline.emit("plotly_click", {points: [{data: box, customdata: [2, 0, 2, 3, 0, 9, 0, 0]}]});
  result.shown = rows.filter(function (row) { return !row.hidden; }).map(function (row) {
    return [row.getAttribute("data-stage"), row.getAttribute("data-pass"),
            row.classList.contains("clicked")]; });
  result.filter = document.getElementById("operator-filter").textContent;
  var out = document.getElementById("operator-check");
  out.textContent = JSON.stringify(result);
}, 100); });
</script><pre id="operator-check" hidden></pre>"""


def test_the_operators_render_sort_and_follow_a_click_on_the_timeline(tmp_path):
    timeline = operator_pipeline_run(roofline=(1,))
    page = write_html(timeline, tmp_path / "report.html", title="operators")
    check = render_check_json(dump_dom(tmp_path, page))
    assert check["errors"] == []
    assert check["figures"]["operator-treemap"]["traces"] == 1

    acted = tmp_path / "acted.html"
    acted.write_text(page.read_text(encoding="utf-8").replace("</body>", ACTIONS + "</body>"),
                     encoding="utf-8")
    dom = dump_dom(tmp_path, acted)
    assert render_check_json(dom)["errors"] == []
    start = dom.index('id="operator-check"')
    result = json.loads(dom[dom.index(">", start) + 1:dom.index("</pre>", start)]
                        .replace("&quot;", '"'))
    assert result["ipus"] == sorted(result["ipus"], key=float)
    assert len(result["ipus"]) == len(timeline.operator_breakdown())
    stage2 = timeline.operator_breakdown().query("stage_index == 2")
    assert sorted(s for s, _, _ in result["shown"]) == ["2"] * len(stage2)
    assert {p for _, p, clicked in result["shown"] if clicked} == {"backward"}
    assert "The operators of layer2 (IPU 2), its backward pass highlighted" in result["filter"]

    # Tall enough for the operators under the timeline, utilisation and memory.
    screenshot(tmp_path, page, "operators.png", size="1400,3400")
