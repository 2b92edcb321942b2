"""The index page of a folder of reports in a real browser: every report listed, its
links leading to pages that exist, no script error.

Skipped only when Chromium is absent (see :mod:`support.browser`). The screenshot is
kept as ``reports/index_page.png`` (ignored by git) for a person to look at.
"""
import re
from pathlib import Path
from urllib.parse import unquote, urlparse

from support.browser import dump_dom, needs_chromium, screenshot

from ipusim.report import bottleneck, write_autoreport
from ipusim.report.index_page import write_index

pytestmark = needs_chromium


def test_the_index_page_lists_both_reports_and_links_to_them(
        tmp_path, pipeline_timeline, replicated_timeline):
    reports = tmp_path / "reports"
    write_autoreport(reports / "pipelined_network" / "training", pipeline_timeline)
    write_autoreport(reports / "replication" / "replication_r4", replicated_timeline)
    page = write_index(reports)
    dom = dump_dom(tmp_path, page)
    assert "__ipusimErrors" in dom  # the page's scripts ran (the error hook is its only one)
    links = re.findall(r'<a href="([^"]+)"', dom)
    assert links == ["pipelined_network/training/report.html",
                     "replication/replication_r4/report.html"]
    for link in links:  # as the browser resolves them: beside the index
        target = Path(unquote(urlparse(page.as_uri()).path)).parent / link
        assert target.is_file()
    text = re.sub(r"<[^>]+>", " ", dom)
    for timeline in (pipeline_timeline, replicated_timeline):
        assert f"{timeline.throughput():,.0f}" in text
        # the verdict each report gives (the diagnosis: the change that gains most)
        assert bottleneck(timeline).kind in text
    assert "pipelined_network/" in text and "replication/" in text

    screenshot(tmp_path, page, "index_page.png", size="1400,700")
