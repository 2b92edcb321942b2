"""The HTML report: self-contained, offline, with the verdict, figures and plots."""
import re

import plotly

from ipusim.report import bottleneck, render_html, write_html
from ipusim.report.page import render_check_json


def test_opens_offline_with_plotly_embedded(pipeline_timeline):
    page = render_html(pipeline_timeline)
    assert not re.search(r"<script[^>]*\bsrc\s*=", page, re.IGNORECASE)
    assert not re.search(r"<link[^>]*\bhref\s*=", page, re.IGNORECASE)
    assert "@import" not in page
    assert page.count("<script") == page.count("</script>")
    assert f"plotly.js v{plotly.offline.get_plotlyjs_version()}" in page
    assert page.count('class="plotly-graph-div"') == 3


def test_shows_the_verdict_and_the_figures(pipeline_timeline):
    page = render_html(pipeline_timeline, loader_items_per_s=12345.0, title="my model")
    verdict = bottleneck(pipeline_timeline, loader_items_per_s=12345.0)
    assert "ipusim report — my model" in page
    assert f'<span class="badge">{verdict.kind}</span>' in page
    for name in ("Throughput", "Latency of a micro-batch (mean)", "Utilisation", "Pipeline bubble",
                 "Host I/O share", "Sync wait share", "Simulated duration",
                 "Data loader throughput"):
        assert f"<th>{name}" in page
    # The run's one throughput is the loader's, slower than the IPUs, whose own is beside it.
    assert (f"12,345.0 items/s fed by the data loader (the IPUs alone "
            f"{pipeline_timeline.throughput():,.1f})") in page
    # The header says what the run is.
    run = pipeline_timeline.run
    assert (f"micro-batch size {pipeline_timeline.work.micro_batch_size}, device iterations "
            f"{run.device_iterations}, replicas {run.replicas}, gradient accumulation "
            f"{run.gradient_accumulation}") in page
    assert "timing-only" not in page
    assert "timing-only (no tensors computed" in render_html(pipeline_timeline, timing_only=True)


def test_render_check_waits_for_the_browser(pipeline_timeline, tmp_path):
    path = write_html(pipeline_timeline, tmp_path / "a" / "b" / "report.html")
    page = path.read_text(encoding="utf-8")
    assert '<pre id="render-check" hidden data-status="pending"></pre>' in page
    done = page.replace('data-status="pending"></pre>',
                        'data-status="done">{&quot;errors&quot;: []}</pre>')
    assert render_check_json(done) == {"errors": []}


def test_the_page_says_why_the_highlighted_what_if_is_not_the_fastest(pipeline_timeline):
    verdict = bottleneck(pipeline_timeline)
    assert verdict.what_if[0]["limit"] == "compute" != verdict.kind  # faster, but physical
    page = render_html(pipeline_timeline, verdict=verdict)
    highlighted = re.findall(r'<tr class="limit"><td>([^<]+)</td>', page)
    assert highlighted == [verdict.proof["change"]]
    why = re.search(r'<p class="why-highlighted">(.*?)</p>', page).group(1)
    assert f"({verdict.proof['change']}) proves the verdict, {verdict.kind}" in why


def test_the_page_explains_its_two_latency_figures(pipeline_timeline):
    page = render_html(pipeline_timeline)
    assert "over every micro-batch, from its input to its output; the timeline&#x27;s arrow " \
           "is one micro-batch&#x27;s" in page
