"""Fixtures that tests in several folders share: runs too slow to start twice."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: The data-loading tutorial, smaller than the main job's: its four cases (one and four
#: replicas, synthetic and real data), one step of five device iterations each.
TUTORIAL_ARGS = ("scenarios/tutorial_data_loading.py", "--samples", "640", "--max-steps", "1",
                 "--workers", "1", "--device-iterations", "5")


@pytest.fixture(scope="session")
def tutorial_reports(tmp_path_factory) -> Path:
    """The report directory of one timing-only run of the data-loading tutorial
    (``ipusim run --timing-only --report DIR``, as the user guide's commands read it):
    its folders ``tutorial_r{1,4}_{synthetic,real}``. Shared, so a test that writes
    into it copies it first."""
    reports = tmp_path_factory.mktemp("tutorial") / "reports"
    subprocess.run([sys.executable, "-m", "poptorch_shim.commands", "run", "--no-progress",
                    "--timing-only", "--report", str(reports), *TUTORIAL_ARGS],
                   cwd=ROOT, check=True, capture_output=True, timeout=300)
    return reports
