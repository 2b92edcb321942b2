"""The HTML report in a real browser: headless Chromium draws every box, without errors.

Skipped only when Chromium is absent (see :mod:`support.browser`). The screenshot
is kept as ``reports/browser_test.png`` (ignored by git) for a person to look at.
"""

from support.browser import dump_dom, needs_chromium, screenshot

from ipusim.engine.recorder import COMPUTE_KINDS
from ipusim.report import lanes, write_html
from ipusim.report.page import render_check_json

pytestmark = needs_chromium


def test_report_renders_every_box_without_script_errors(tmp_path, pipeline_timeline):
    page = write_html(pipeline_timeline, tmp_path / "report.html", title="browser test")
    dom = dump_dom(tmp_path, page)
    check = render_check_json(dom)
    assert check["errors"] == []
    drawn = check["figures"]["timeline"]["bars"]
    events = pipeline_timeline.events
    kinds = events["kind"].astype(str)
    compute = kinds.isin(COMPUTE_KINDS)
    assert sum(drawn[lanes.NAMES[k]] for k in COMPUTE_KINDS if lanes.NAMES[k] in drawn) == \
        compute.sum() == 4 * 8 * 2 + 4
    for kind, count in kinds.value_counts().items():
        if count:
            assert drawn[lanes.NAMES[kind]] == count, kind
    assert check["figures"]["utilisation"]["bars"]["compute"] == 4
    assert check["figures"]["memory"]["bars"]["weights"] == 4

    screenshot(tmp_path, page, "browser_test.png")


def test_the_program_views_draw_every_program_step_of_the_step(tmp_path, pipeline_timeline):
    from ipusim.analysis.program_steps import execution_trace

    graph = pipeline_timeline.graph_profile()
    page = write_html(pipeline_timeline, tmp_path / "report.html", title="programs",
                      graph=graph)
    dom = dump_dom(tmp_path, page)
    check = render_check_json(dom)
    assert check["errors"] == []
    boxes = execution_trace(graph.steps)
    drawn = check["figures"]["execution-trace"]["bars"]
    assert drawn == {kind: int(count) for kind, count in boxes["kind"].value_counts().items()}
    assert 'id="program-tree"' in dom and "Sequence step" in dom
    screenshot(tmp_path, page, "browser_programs.png", size="1400,3600")
