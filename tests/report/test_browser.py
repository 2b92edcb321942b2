"""The HTML report in a real browser: headless Chromium draws every box, without errors.

Needs Debian's ``chromium`` (scripts/test.sh installs it); skipped only when it
is absent. The screenshot is kept in the test's tmp dir and copied to
``reports/browser_test.png`` (ignored by git) for a person to look at.
"""
import shutil
import subprocess
from pathlib import Path

import pytest

from ipusim.engine.recorder import COMPUTE_KINDS
from ipusim.report import lanes, write_html
from ipusim.report.html import render_check_json

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
REPORTS = Path(__file__).resolve().parents[2] / "reports"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--virtual-time-budget=5000"]

pytestmark = [pytest.mark.slow, pytest.mark.skipif(   # starts a headless Chromium
    CHROMIUM is None, reason="chromium is not installed (apt-get install chromium; "
                             "scripts/test.sh does it)")]


def chromium(tmp_path: Path, *args: str) -> str:
    result = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def test_report_renders_every_box_without_script_errors(tmp_path, pipeline_timeline):
    page = write_html(pipeline_timeline, tmp_path / "report.html", title="browser test")
    dom = chromium(tmp_path, "--dump-dom", page.as_uri())
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

    shot = tmp_path / "browser_test.png"
    chromium(tmp_path, f"--screenshot={shot}", "--window-size=1400,1000", page.as_uri())
    assert shot.stat().st_size > 10_000
    REPORTS.mkdir(exist_ok=True)
    shutil.copy(shot, REPORTS / "browser_test.png")
