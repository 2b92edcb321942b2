"""What the editable install gives a user: the packages importable from any directory."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow]  # imports the installed packages in a fresh interpreter


def test_the_scenarios_import_from_any_directory(tmp_path):
    # `ipusim advise scenarios/resnet50.py` and the sweep specs' factories
    # (`scenarios.bert_large:sweep_case`) import the scenarios as a package,
    # from a console script that puts no working directory on sys.path.
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    done = subprocess.run(
        [sys.executable, "-c", "import ipusim, poptorch_shim, scenarios.models"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_an_editable_install_prints_no_packaging_warning(tmp_path):
    # What scripts/setup_env.sh does, into a folder of its own and with this
    # environment's setuptools: a new user sees pip's lines and nothing from setuptools.
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
         "--no-index", "--target", str(tmp_path / "site"), "-e", str(root)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    said = done.stdout + done.stderr
    assert "warning" not in said.lower(), said
    pth = (tmp_path / "site" / "__editable__.ipusim-0.1.0.pth").read_text()
    assert pth.split() == [str(root)]  # the root on sys.path: ipusim, poptorch_shim, scenarios
