"""The sweep report in a real browser: it draws without errors, its tables sort and filter, and
it fits the window.

Headless Chromium loads the page a real sweep writes (see :mod:`support.browser`); a copy of
it with a few lines of script added clicks the headings, types in the filters and opens a
point's details as a person would, and writes what it saw into the page, which ``--dump-dom``
returns. The screenshot is kept as ``reports/sweep.png`` for a person to look at.
"""
import html
import json
import re
import sys
from pathlib import Path

import pytest
from support.browser import chromium, needs_chromium, screenshot

from ipusim.explore.design_point import pareto_front, refusals
from ipusim.report.page import render_check_json
from poptorch_shim.sweep import InProcess, Measurements, ModelSource, SweepSpec, sweep
from poptorch_shim.sweep.report import write_sweep_report

pytestmark = needs_chromium

WIDTH = 1400
# 48 points of the pipelined test model: options PopTorch refuses (GA 2), models that do not fit
# (micro-batch 256), long settings (a tensor location table, a sync pattern).
SPEC = SweepSpec(
    model=ModelSource(factory="sweep_models:pipelined",
                      kwargs={"width": 128, "sram_per_tile_bytes": 25_550}),
    space={"replicationFactor": [1, 2], "Training.gradientAccumulation": [2, 8, 32],
           "micro_batch": [4, 256],
           "syncPattern": ["SyncPattern.Full", "SyncPattern.SinglePipeline"],
           "TensorLocations.setOptimizerLocation": [
               {"useOnChipStorage": False, "useReplicatedTensorSharding": True},
               {"useOnChipStorage": True}]})

# Run once the page has loaded and plotly has drawn: what a person would do, and what they see.
_ACT = """<script>
window.addEventListener("load", function () { setTimeout(function () {
  var points = document.getElementById("points"), out = {};
  var heads = Array.prototype.slice.call(points.tHead.rows[0].cells);
  function column(label) {
    return heads.findIndex(function (th) { return th.textContent === label; });
  }
  function shown(table, label) {
    var at = column(label);
    return Array.prototype.filter.call(table.tBodies, function (b) { return !b.hidden; })
      .map(function (b) { return b.rows[0].cells[at].getAttribute("data-sort"); });
  }
  out.width = {page: document.documentElement.scrollWidth, window: window.innerWidth};
  out.sortFunction = typeof window.ipusimSweep.sort;
  out.initial = shown(points, "throughput (items/s)");
  heads[column("throughput (items/s)")].querySelector("button").click();
  out.throughputClicked = shown(points, "throughput (items/s)");
  out.throughputOrder = heads[column("throughput (items/s)")].getAttribute("aria-sort");
  heads[column("#")].querySelector("button").click();
  out.numberClicked = shown(points, "#");
  heads[column("syncPattern")].querySelector("button").click();
  out.syncClicked = shown(points, "syncPattern");
  var form = document.querySelector('.filter[data-table="points"]');
  form.querySelector("input[type=search]").value = "singlepipeline usereplicated";
  form.dispatchEvent(new Event("input", {bubbles: true}));
  out.filtered = shown(points, "#");
  out.filteredCount = document.querySelector('[data-count-of="points"]').textContent;
  form.querySelector("input[type=search]").value = "";
  form.querySelector("input[type=checkbox]").checked = true;
  form.dispatchEvent(new Event("input", {bubbles: true}));
  out.pareto = shown(points, "#");
  var first = points.tBodies[0];
  first.querySelector("button.more").click();
  out.details = getComputedStyle(first.rows[1]).display;
  out.widthWithDetails = document.documentElement.scrollWidth;
  var refused = document.getElementById("refused");
  out.refusedWhy = Array.prototype.map.call(refused.tBodies, function (b) {
    return b.rows[0].cells[b.rows[0].cells.length - 3].textContent; });
  document.getElementById("test-result").textContent = JSON.stringify(out);
}, 300); });
</script><pre id="test-result"></pre>"""


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """The sweep's results and its report directory (the Pareto points with their reports)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(Path(__file__).parents[1] / "sweep"))
        measurements = Measurements(SPEC.model)
        table = sweep(SPEC, backend=InProcess(), measurements=measurements)
        directory = tmp_path_factory.mktemp("sweep_report")
        write_sweep_report(SPEC, table, directory, measurements=measurements)
    sys.modules.pop("sweep_models", None)
    return table, directory


def _dom(tmp_path: Path, page: Path) -> str:
    return chromium(tmp_path, f"--window-size={WIDTH},1000", "--dump-dom", page.as_uri())


def test_the_sweep_page_draws_its_figures_without_script_errors(tmp_path, report):
    table, directory = report
    page = directory / "sweep.html"
    text = page.read_text()
    assert not re.search(r'<(script|link|img|iframe)\b[^>]*\b(src|href)="(https?:)?//', text)
    dom = _dom(tmp_path, page)
    check = render_check_json(dom)
    assert check["errors"] == []
    sweep_check = json.loads(html.unescape(dom.split('id="sweep-check" hidden="">')[1]
                                           .split("</pre>")[0]))
    assert sweep_check["figures"] == ["pareto", "throughput_vs_ipus", "bubble_vs_ga"]
    assert sorted(check["figures"]) == sorted(sweep_check["figures"])  # each one drawn
    # Memory: the points that fit, those that do not, the front; the others only what runs.
    assert {name: figure["traces"] for name, figure in check["figures"].items()} == {
        "pareto": 3, "throughput_vs_ipus": 1, "bubble_vs_ga": 1}
    screenshot(tmp_path, page, "sweep.png", size=f"{WIDTH},2600")


def test_the_tables_sort_filter_and_open_a_point_in_the_browser_and_fit_the_window(
        tmp_path, report):
    table, directory = report
    acted = directory / "acted.html"
    acted.write_text((directory / "sweep.html").read_text().replace("</body>", _ACT + "</body>"))
    dom = _dom(tmp_path, acted)
    assert render_check_json(dom)["errors"] == []
    out = json.loads(html.unescape(dom.split('<pre id="test-result">')[1].split("</pre>")[0]))
    assert out["sortFunction"] == "function"
    # No wider than the window, a point's details open included.
    assert out["width"]["page"] <= out["width"]["window"] == WIDTH
    assert out["widthWithDetails"] <= WIDTH and out["details"] == "table-row"
    runs = table[table["error"].isna() & table["fits"].fillna(False).astype(bool)]
    throughput = sorted(runs["throughput(items/s)"])
    assert [float(v) for v in out["initial"]] == pytest.approx(throughput[::-1])
    assert [float(v) for v in out["throughputClicked"]] == pytest.approx(throughput)
    assert out["throughputOrder"] == "ascending"
    assert [int(v) for v in out["numberClicked"]] == sorted(runs["point"], reverse=True)
    assert out["syncClicked"] == sorted(runs["syncPattern"])  # text: A to Z first
    chosen = runs[(runs["syncPattern"] == "SyncPattern.SinglePipeline")
                  & runs["TensorLocations.setOptimizerLocation"].str.contains("Replicated")]
    assert sorted(int(v) for v in out["filtered"]) == sorted(chosen["point"]) and len(chosen)
    assert out["filteredCount"] == f"{len(chosen)} of {len(runs)} shown"
    assert sorted(int(v) for v in out["pareto"]) == sorted(table.loc[pareto_front(table),
                                                                     "point"])
    assert sorted(out["refusedWhy"]) == sorted(refusals(table)["refusal"])
