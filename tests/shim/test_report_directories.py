"""Report directories: runs at once on one report directory each get their own
model folder, a model name stays inside the report directory, the closing
lines name what the run wrote, and a full disk ends the run in one line."""
import errno
import fcntl
import json
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from support.reports import fresh_report_registry, profiled_inference

import poptorch_shim as poptorch
from poptorch_shim import commands
from poptorch_shim._run import model_reports
from poptorch_shim.commands import RunSettings, run_script

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def fresh_registry(monkeypatch):
    """Each test starts with no pending reports, no directories given out, no locks."""
    fresh_report_registry(monkeypatch)


def held_by_another_run(directory: Path) -> int:
    """Lock ``directory`` as a concurrent run would (another open file)."""
    directory.mkdir(parents=True)
    descriptor = os.open(directory, os.O_RDONLY)
    fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return descriptor


def test_a_folder_another_run_holds_is_skipped(tmp_path, capsys):
    descriptor = held_by_another_run(tmp_path / "inference")
    try:
        model = profiled_inference(tmp_path)
        (written,) = model_reports.write_pending_reports()
    finally:
        os.close(descriptor)
    assert written == tmp_path / "inference-2" and (written / "profile.json").is_file()
    assert not (tmp_path / "inference" / "profile.json").exists()
    assert "another model or run already writes" in capsys.readouterr().err and model


def test_a_folder_is_free_again_once_its_report_is_written(tmp_path):
    profiled_inference(tmp_path)
    model_reports.write_pending_reports()
    assert model_reports._locks == {}
    descriptor = os.open(tmp_path / "inference", os.O_RDONLY)
    try:  # nobody holds it now: a later run may have it
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        os.close(descriptor)


@pytest.mark.parametrize("name", ["../escape", "a/b", "..", ".", "", "/tmp/abs", "x\0y"])
def test_a_model_name_is_one_folder_inside_the_report_directory(tmp_path, name):
    root = tmp_path / "reports"
    with pytest.raises(ValueError, match=r"Options\.modelName: model_name .* must be one "
                                         r"folder name"):
        profiled_inference(root, name)
    assert model_reports.write_pending_reports() == []
    assert sorted(p.name for p in tmp_path.iterdir()) in ([], ["reports"])
    assert not (tmp_path / "escape").exists()


def test_names_that_look_like_paths_but_are_one_folder_are_kept(tmp_path):
    profiled_inference(tmp_path, "v1..2")
    (written,) = model_reports.write_pending_reports()
    assert written == tmp_path / "v1..2"


SCRIPT = """
import torch, poptorch
model = poptorch.inferenceModel(torch.nn.Linear(4, 2))
model(torch.ones(2, 4))
"""


def test_the_closing_lines_name_only_what_this_run_wrote(tmp_path, capsys):
    (tmp_path / "stale").mkdir()
    (tmp_path / "stale" / "profile.json").write_text("{}")  # an earlier run's
    old = time.time() - 3600
    os.utime(tmp_path / "stale" / "profile.json", (old, old))
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    reports = tmp_path
    assert commands.main(["run", "--report", str(reports), "--no-progress",
                          str(script)]) == 0
    closing = [line for line in capsys.readouterr().err.splitlines()
               if line.startswith("ipusim: profile written to")]
    assert closing == [f"ipusim: profile written to {reports / 'inference'}"]


def test_a_full_disk_ends_the_run_in_one_line_naming_the_file(tmp_path, monkeypatch, capsys):
    import ipusim.report

    def full_disk(directory, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(Path(directory) /
                                                                    "profile.json"))

    monkeypatch.setattr(ipusim.report, "write_autoreport", full_disk)
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    status = run_script(str(script), [], RunSettings(report_dir=str(tmp_path / "r")))
    errors = [line for line in capsys.readouterr().err.splitlines() if "error" in line]
    assert status == 1
    assert errors == [f"ipusim: error: 1 report(s) could not be written (0 were): "
                      f"{tmp_path / 'r' / 'inference' / 'profile.json'}: No space left on "
                      f"device"]


@pytest.mark.slow
def test_two_runs_at_once_on_one_report_directory(tmp_path):
    """Each run gets its own folder and its closing line names it."""
    script = tmp_path / "script.py"
    script.write_text(textwrap.dedent(SCRIPT) + "import time; time.sleep(3)\n")
    reports = tmp_path / "reports"
    runs = [subprocess.Popen([sys.executable, "-m", "poptorch_shim.commands", "run",
                              "--report", str(reports), "--no-progress", str(script)],
                             cwd=ROOT, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    closing = []
    for run in runs:
        _, err = run.communicate(timeout=300)
        assert run.returncode == 0, err
        closing += [line for line in err.splitlines() if "profile written to" in line]
    assert sorted(closing) == [f"ipusim: profile written to {reports / name}"
                               for name in ("inference", "inference-2")]
    assert all((reports / name / "profile.json").is_file()
               for name in ("inference", "inference-2"))


DESTROYED_AND_REUSED = """
import torch, poptorch
model = poptorch.inferenceModel(torch.nn.Linear(4, 2))
for _ in range(5):
    model(torch.ones(2, 4))
model.destroy()
model(torch.ones(2, 4))
"""


def test_a_model_destroyed_then_called_again_keeps_its_first_report(tmp_path, capsys):
    script = tmp_path / "script.py"
    script.write_text(DESTROYED_AND_REUSED)
    reports = tmp_path / "reports"
    assert commands.main(["run", "--report", str(reports), "--no-progress", str(script)]) == 0
    err = capsys.readouterr().err
    steps = {name: json.loads((reports / name / "profile.json").read_text())["steps"]
             for name in ("inference", "inference-2")}
    assert steps == {"inference": 5, "inference-2": 1}
    closing = [line for line in err.splitlines() if line.startswith("ipusim: profile written")]
    assert closing == [f"ipusim: profile written to {reports / name}"
                       for name in ("inference", "inference-2")]
    assert "was destroyed and compiled again" in err


def test_a_name_with_a_slash_is_refused_only_where_its_folder_is_made(tmp_path, capsys):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT.replace("poptorch.inferenceModel(torch.nn.Linear(4, 2))",
                                     "poptorch.inferenceModel(torch.nn.Linear(4, 2), "
                                     "poptorch.Options().modelName('a/b'))"))
    assert commands.main(["run", "--no-progress", str(script)]) == 0  # no report asked for
    assert "  a/b: " in capsys.readouterr().err
    # Asked for a report, the script fails at its model's call, shown as python shows it.
    assert commands.main(["run", "--no-progress", "--report", str(tmp_path / "r"),
                          str(script)]) == 1
    assert re.search(r"\nValueError: Options\.modelName: model_name .* one folder name",
                     capsys.readouterr().err)


def test_a_name_too_long_for_a_folder_is_refused_when_it_is_set():
    with pytest.raises(ValueError, match=r"Options\.modelName: .* at most 255 bytes; got 256"):
        poptorch.Options().modelName("é" * 128)
    assert poptorch.Options().modelName("x" * 255).model_name == "x" * 255


def test_a_second_run_into_the_same_folder_says_it_replaced_the_first(tmp_path, capsys,
                                                                      monkeypatch):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    reports = tmp_path / "reports"
    for run in range(2):
        fresh_report_registry(monkeypatch)
        assert commands.main(["run", "--report", str(reports), "--no-progress",
                              str(script)]) == 0
        closing = [line for line in capsys.readouterr().err.splitlines()
                   if line.startswith("ipusim: profile written to")]
        replaced = " (over the report an earlier run left there)" if run else ""
        assert closing == [f"ipusim: profile written to {reports / 'inference'}{replaced}"]
