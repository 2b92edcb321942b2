"""The ecosystem lane: unmodified optimum-graphcore and lightning-graphcore code on
the shim, with random weights from configs and no hub access.

Their pins (numpy 1.23.5, transformers 4.29.2, lightning 2.0) conflict with the
main environment, so they get their own: ``.venv-ecosystem`` at the repository
root, built on first use from ``requirements.txt`` (every package pinned,
installed without resolving) and reused while that file is unchanged. Each
script runs under ``python -m poptorch_shim`` there, so ``import poptorch`` and
``import popart`` are the shim's, and writes its reports.
"""
import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
REQUIREMENTS = HERE / "requirements.txt"
VENV = ROOT / ".venv-ecosystem"
STAMP = VENV / "requirements.sha256"  # the requirements it was built from

pytestmark = pytest.mark.slow


def _wanted() -> str:
    return hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()


@pytest.fixture(scope="session")
def python() -> Path:
    """The lane's interpreter, its environment built first if missing or stale."""
    interpreter = VENV / "bin" / "python"
    if not (STAMP.is_file() and STAMP.read_text() == _wanted() and interpreter.exists()):
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
        built = subprocess.run(
            [str(interpreter), "-m", "pip", "install", "--quiet", "--no-deps",
             "--disable-pip-version-check", "-r", str(REQUIREMENTS)],
            capture_output=True, text=True, timeout=1800)
        assert built.returncode == 0, f"building {VENV.name} failed:\n{built.stderr[-4000:]}"
        STAMP.write_text(_wanted())
    return interpreter


def run(python: Path, tmp_path: Path, script: str, *args: str,
        timing_only: bool = False) -> tuple[str, Path]:
    """Run ``scripts/SCRIPT`` on the shim in the lane's environment; its output and
    its reports' folder."""
    reports = tmp_path / "reports"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "IPUSIM_REPORT_DIR": str(reports),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "PYTHONWARNINGS": "ignore"}
    env.pop("IPUSIM_TIMING_ONLY", None)
    if timing_only:
        env["IPUSIM_TIMING_ONLY"] = "1"
    result = subprocess.run(
        [str(python), "-m", "poptorch_shim", str(HERE / "scripts" / script), *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]
    return result.stdout, reports


def summaries(reports: Path) -> dict[str, str]:
    """Each report's summary, by its folder's name."""
    return {path.parent.name: path.read_text() for path in sorted(reports.rglob("summary.txt"))}


@pytest.mark.parametrize("layout, execution, replicas", [
    ("data-parallel", "single IPU", 2), ("pipelined", "on 2 IPU(s) per replica", 1)])
def test_a_lightning_module_fits_validates_tests_and_predicts(python, tmp_path, layout,
                                                              execution, replicas):
    out, reports = run(python, tmp_path, "lightning_fit.py", layout)
    assert "predicted 64 rows" in out
    found = summaries(reports)  # a model per stage: fit, its validation, validate, test, predict
    assert sorted(name.split("-")[0] for name in found) == ["inference"] * 4 + ["training"]
    for summary in found.values():
        assert execution in summary
        assert f"Replicas:                   {replicas}\n" in summary


def test_a_pipelined_bert_pretrains_through_the_ipu_trainer(python, tmp_path):
    out, reports = run(python, tmp_path, "bert_pretraining.py", str(tmp_path / "out"), "small")
    assert "trained 2 steps" in out and "loss nan" not in out
    (summary,) = summaries(reports).values()
    assert "Gradient accumulation:      16" in summary and "on 2 IPU(s)" in summary


def test_bert_large_pretrains_through_the_ipu_trainer_timing_only(python, tmp_path):
    out, reports = run(python, tmp_path, "bert_pretraining.py", str(tmp_path / "out"), "large",
                       timing_only=True)
    assert "trained 2 steps" in out
    (summary,) = summaries(reports).values()
    assert "on 4 IPU(s) per replica" in summary


def test_gpt2_generates_the_tokens_of_transformers_greedy_search(python, tmp_path):
    out, reports = run(python, tmp_path, "gpt2_generate.py")
    assert "generated (2, 12) tokens" in out
    (summary,) = summaries(reports).values()
    assert "Micro-batch size:           2\n" in summary  # the batch, not the step counter
