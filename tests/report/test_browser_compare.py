"""The comparison page in a real browser: headless Chromium draws the waterfall and the
per-IPU bars without script errors.

Skipped only when Chromium is absent (see :mod:`support.browser`). The screenshot is
kept as ``reports/compare.png`` (ignored by git) for a person to look at.
"""
from support.browser import dump_dom, needs_chromium, screenshot

from ipusim.analysis.comparison import ComparedRun, compare
from ipusim.plan.setting_names import SettingNames
from ipusim.report.compare import write_comparison_html
from ipusim.report.page import render_check_json

from report_timelines import pipeline_run

pytestmark = needs_chromium

NAMES = SettingNames(columns={"gradient_accumulation": "Training.gradientAccumulation",
                              "replicas": "replicationFactor"})


def test_the_comparison_draws_without_script_errors(tmp_path, pipeline_timeline):
    before = ComparedRun("g8", pipeline_timeline, {"Training.gradientAccumulation": 8}, NAMES)
    after = ComparedRun("g16_r2", pipeline_run(micro_batches=16, replicas=2),
                {"Training.gradientAccumulation": 16, "replicationFactor": 2}, NAMES)
    comparison = compare(before, after)
    page = write_comparison_html(comparison, tmp_path / "compare.html")
    dom = dump_dom(tmp_path, page)
    check = render_check_json(dom)
    assert check["errors"] == []
    assert set(check["figures"]) == {"waterfall", "per-ipu"}
    # Every part a stacked bar for A and for B at each of the 4 places in a replica.
    bars = check["figures"]["per-ipu"]["bars"]
    assert set(bars) == set(comparison.parts["short"])
    assert set(bars.values()) == {2 * 4}
    # The waterfall, one trace (the render check counts bar traces only): a box for A,
    # one for each part's difference, one for B.
    assert check["figures"]["waterfall"] == {"bars": {}, "traces": 1}
    waterfall = dom[dom.index('id="waterfall"'):dom.index('id="per-ipu"')]
    assert waterfall.count('class="point"') == len(comparison.parts) + 2

    screenshot(tmp_path, page, "compare.png", size="1400,2000")
