"""Fixtures that tests in several folders share: runs too slow to start twice."""
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

#: The data-loading tutorial, smaller than the main job's: its four cases (one and four
#: replicas, synthetic and real data), one step of five device iterations each.
TUTORIAL_ARGS = ("--samples", "640", "--max-steps", "1", "--workers", "1",
                 "--device-iterations", "5")


@dataclass(frozen=True)
class TutorialRun:
    """What one run of the tutorial printed, and its report directory (its folders
    ``tutorial_r{1,4}_{synthetic,real}``)."""

    output: str
    reports: Path


@pytest.fixture(scope="session")
def tutorial_run(tmp_path_factory) -> TutorialRun:
    """One run of the data-loading tutorial as a user runs it (``python -m poptorch_shim
    scenarios/tutorial_data_loading.py ...`` with ``IPUSIM_REPORT_DIR``, every tensor
    computed), shared by the scenario test that reads what it prints, the comparison
    of its reports and the user guide's ``ipusim compare``: a test that writes into its
    reports copies them first."""
    reports = tmp_path_factory.mktemp("tutorial") / "reports"
    env = dict(os.environ, OMP_NUM_THREADS="1",  # tiny models: threads only contend
               IPUSIM_REPORT_DIR=str(reports))
    done = subprocess.run([sys.executable, "-m", "poptorch_shim",
                           "scenarios/tutorial_data_loading.py", *TUTORIAL_ARGS],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"the tutorial failed:\n{done.stdout}\n{done.stderr}"
    return TutorialRun(done.stdout, reports)
