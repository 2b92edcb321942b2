"""A script that ends in ``sys.exit(...)`` has finished: ``ipusim run`` prints its
simulated figures and the reports it wrote, compares them, and exits with the
script's own status."""
import json
import signal
import subprocess
import sys

import pytest
from support.reports import fresh_report_registry

from poptorch_shim import commands

SCRIPT = """
import sys
import torch, poptorch

def main():
    model = poptorch.inferenceModel(torch.nn.Linear(4, 2))
    model(torch.ones(2, 4))
    return {status}

if __name__ == "__main__":
    sys.exit(main())
"""


@pytest.fixture(autouse=True)
def fresh_registry(monkeypatch):
    fresh_report_registry(monkeypatch)


def run(tmp_path, status: str, *flags: str) -> int:
    script = tmp_path / "script.py"
    script.write_text(SCRIPT.format(status=status))
    return commands.main(["run", "--no-progress", *flags, str(script)])


@pytest.mark.parametrize("status, code", [("None", 0), ("0", 0), ("3", 3)])
def test_sys_exit_keeps_the_figures_the_reports_and_the_status(tmp_path, capsys, status, code):
    reports = tmp_path / "reports"
    assert run(tmp_path, status, "--report", str(reports)) == code
    err = capsys.readouterr().err
    assert "ipusim: simulated figures" in err and "  inference: " in err
    assert f"ipusim: profile written to {reports / 'inference'}" in err


def test_sys_exit_with_a_message_prints_it_and_exits_1(tmp_path, capsys):
    assert run(tmp_path, "'stopped early'") == 1
    err = capsys.readouterr().err
    assert "stopped early" in err and "  inference: " in err


def test_compare_with_compares_a_script_that_ends_in_sys_exit(tmp_path, capsys):
    first, second = tmp_path / "first", tmp_path / "second"
    assert run(tmp_path, "0", "--report", str(first)) == 0
    assert run(tmp_path, "0", "--report", str(second), "--compare-with", str(first)) == 0
    assert (second / "inference" / "compare.html").is_file()
    assert "Page: " in capsys.readouterr().out


LONG = """
import sys, time
import torch, poptorch
model = poptorch.inferenceModel(torch.nn.Linear(4, 2))
model(torch.ones(2, 4))
print("called", flush=True)
time.sleep(120)
"""


@pytest.mark.slow  # a script in a process of its own, stopped by a signal
def test_sigterm_writes_the_report_so_far_and_exits_143(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(LONG)
    reports = tmp_path / "reports"
    run = subprocess.Popen([sys.executable, "-m", "poptorch_shim.commands", "run",
                            "--no-progress", "--report", str(reports), str(script)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert run.stdout.readline().strip() == "called"
    run.send_signal(signal.SIGTERM)
    _, err = run.communicate(timeout=120)
    assert run.returncode == 128 + signal.SIGTERM, err
    assert json.loads((reports / "inference" / "profile.json").read_text())["steps"] == 1
    assert f"ipusim: profile written to {reports / 'inference'}" in err


def test_a_model_that_never_ran_leaves_no_empty_report_folder(tmp_path, capsys):
    script = tmp_path / "script.py"
    script.write_text("import torch, poptorch\n"
                      "model = poptorch.inferenceModel(torch.nn.Linear(4, 2))\n"
                      "model.compile(torch.ones(2, 4))\n")
    reports = tmp_path / "reports"
    assert commands.main(["run", "--no-progress", "--report", str(reports), str(script)]) == 0
    assert list(reports.iterdir()) == []
