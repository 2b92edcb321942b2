"""Reports are not lost: an unwritable directory is refused before the script
runs, one failing report does not stop the others, and two models of one
name each get their own directory."""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.reports import fresh_report_registry, profiled_inference

from poptorch_shim._run import model_reports

pytestmark = [pytest.mark.slow]  # runs scripts in their own processes


ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def fresh_registry(monkeypatch):
    """Each test starts with no pending reports, no directories given out, no locks."""
    fresh_report_registry(monkeypatch)


def test_two_models_of_one_name_write_two_directories(tmp_path, capsys):
    first, second = profiled_inference(tmp_path), profiled_inference(tmp_path)
    written = model_reports.write_pending_reports()
    assert sorted(p.name for p in written) == ["inference", "inference-2"]
    assert all((p / "profile.json").is_file() for p in written)
    assert "this one writes to" in capsys.readouterr().err and first is not second


def test_a_report_that_fails_does_not_stop_the_others(tmp_path):
    (tmp_path / "broken").write_text("a file where the report's directory should go")
    profiled_inference(tmp_path, "broken"), profiled_inference(tmp_path, "fine")
    with pytest.raises(model_reports.ReportsNotWritten, match=r"1 report\(s\).*\(1 were\).*broken"):
        model_reports.write_pending_reports()
    assert (tmp_path / "fine" / "profile.json").is_file()
    assert model_reports._pending == []


def test_run_refuses_an_unwritable_report_directory_before_the_script(tmp_path):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    marker = tmp_path / "ran"
    script = tmp_path / "script.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    result = subprocess.run([sys.executable, "-m", "poptorch_shim.commands", "run", "--report",
                             str(blocker / "reports"), str(script)],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0
    assert "--report" in result.stderr and "cannot write reports" in result.stderr
    assert not marker.exists()


def test_a_failing_report_fails_the_run_after_the_script(tmp_path):
    (tmp_path / "training").write_text("")
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent("""
        import torch, poptorch
        options = poptorch.Options().modelName("training")
        model = poptorch.inferenceModel(torch.nn.Linear(4, 2), options)
        model(torch.ones(2, 4))
        print("script done")
    """))
    result = subprocess.run([sys.executable, "-m", "poptorch_shim", str(script)], cwd=ROOT,
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, "IPUSIM_REPORT_DIR": str(tmp_path)})
    assert "script done" in result.stdout
    assert result.returncode != 0 and "could not be written" in result.stderr
    assert "Traceback" not in result.stderr  # one line naming the file, not a traceback
