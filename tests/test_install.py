"""What the editable install gives a user: the packages importable from any directory."""
import os
import subprocess
import sys

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
