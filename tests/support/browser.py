"""A real headless Chromium for the tests that look at a page as a person would.

Needs Debian's ``chromium`` (scripts/test.sh installs it); a test module marks
itself with :data:`needs_chromium` to be skipped only when it is absent.
Screenshots a person should look at are copied to ``reports/`` (ignored by git)
with :func:`keep_screenshot`.
"""
import shutil
import subprocess
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
REPORTS = Path(__file__).resolve().parents[2] / "reports"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--virtual-time-budget=5000"]

#: Marks a module that starts a headless Chromium: slow, and skipped without one.
needs_chromium = [pytest.mark.slow, pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (apt-get install chromium; "
                             "scripts/test.sh does it)")]


def chromium(tmp_path: Path, *args: str) -> str:
    """Run headless Chromium with ``args`` (a profile of its own in ``tmp_path``); its stdout."""
    result = subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def dump_dom(tmp_path: Path, page: Path) -> str:
    """The page's DOM after its scripts ran."""
    return chromium(tmp_path, "--dump-dom", page.as_uri())


def screenshot(tmp_path: Path, page: Path, name: str, size: str = "1400,1000") -> Path:
    """A screenshot of ``page`` as ``tmp_path/name``, also kept as ``reports/name``."""
    shot = tmp_path / name
    chromium(tmp_path, f"--screenshot={shot}", f"--window-size={size}", page.as_uri())
    assert shot.stat().st_size > 10_000
    REPORTS.mkdir(exist_ok=True)
    shutil.copy(shot, REPORTS / name)
    return shot
