"""The ecosystem lane's marker and its environment.

Every test here is marked ``ecosystem``: it builds ``.venv-ecosystem`` (over a
hundred pinned packages) on first use. A run that selects by marker runs the
lane only when its expression names it: ``pytest -m "not slow"`` (the fast lane)
and ``pytest -m slow`` leave it out, ``pytest -m ecosystem`` runs it alone, and a
run without ``-m`` (``bash scripts/test.sh``, CI, ``pytest tests/ecosystem``) runs
it with everything else.
"""
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def pytest_collection_modifyitems(config, items):
    """Leave the lane out of a run whose marker expression does not name it."""
    expression = config.getoption("markexpr")
    if not expression or "ecosystem" in expression:
        return
    kept = [item for item in items if item.get_closest_marker("ecosystem") is None]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept


@pytest.fixture(scope="session")
def ipusim() -> Path:
    """The lane's ``ipusim`` command, its environment built first if missing or stale."""
    built = subprocess.run(["bash", str(ROOT / "scripts" / "setup_ecosystem_env.sh")],
                           capture_output=True, text=True, timeout=1800)
    assert built.returncode == 0, f"building .venv-ecosystem failed:\n{built.stderr[-4000:]}"
    return ROOT / ".venv-ecosystem" / "bin" / "ipusim"
