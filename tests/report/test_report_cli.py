"""The ipusim command line: help, summary, report, trace and run.

``ipusim.cli`` holds the commands that read saved profiles; the shim's
``poptorch_shim.commands`` adds ``run`` (and ``sweep``, ``advise``) to them.
"""
import json
import os
import subprocess
import sys

import pytest

from ipusim import RunConfig, Simulation, Work, system_spec
from ipusim.cli import main
from ipusim.report import load_autoreport, text_summary, write_autoreport
from poptorch_shim._core.run_settings import REPORT_DIR_ENV
from poptorch_shim.commands import main as ipusim_main

from report_timelines import stages

pytestmark = [pytest.mark.slow]  # runs the command line in its own processes


@pytest.fixture(scope="module")
def profile_dir(tmp_path_factory, pipeline_timeline):
    return write_autoreport(tmp_path_factory.mktemp("cli") / "training", pipeline_timeline,
                            options={"autoReport.all": "true"}, loader_items_per_s=2e4)


def help_text(capsys, *argv: str) -> str:
    """What ``ipusim ARGV --help`` prints (the ``ipusim`` console script's ``main``)."""
    with pytest.raises(SystemExit) as exit_info:
        ipusim_main([*argv, "--help"])
    assert exit_info.value.code == 0
    return capsys.readouterr().out


def test_help_describes_the_commands_with_examples(capsys):
    text = help_text(capsys)
    for word in ("run", "sweep", "advise", "report", "summary", "trace", "examples:",
                 "ipusim run", "--replicas 4"):
        assert word in text
    run_help = help_text(capsys, "run")
    assert "SCRIPT [SCRIPT_ARGS ...]" in run_help and "--report DIR" in run_help


def test_python_m_ipusim_reads_profiles_without_the_shim(profile_dir):
    # ipusim's own commands import nothing of the shim or torch.
    code = ("import sys; from ipusim.cli import main; main(['summary', sys.argv[1]]); "
            "print(sorted({'torch', 'poptorch_shim'} & set(sys.modules)))")
    result = subprocess.run([sys.executable, "-c", code, str(profile_dir)],
                            capture_output=True, text=True, check=True)
    assert result.stdout.splitlines()[-1] == "[]" and "ipusim profile summary" in result.stdout


def test_without_the_shims_commands_run_says_where_to_find_them(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "train.py"], extensions=())
    assert exit_info.value.code == 2
    assert "python -m poptorch_shim.commands run" in capsys.readouterr().err


def _entry_point(monkeypatch, value):
    """Make ``value`` the one ``ipusim.commands`` entry point installed."""
    from importlib import metadata

    entry = metadata.EntryPoint(name="poptorch", value=value, group="ipusim.commands")
    monkeypatch.setattr(metadata, "entry_points",
                        lambda group: [entry] if group == "ipusim.commands" else [])


def test_python_m_ipusim_finds_the_shims_commands_by_entry_point(monkeypatch, capsys):
    _entry_point(monkeypatch, "poptorch_shim.commands:add_commands")
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "--help"])
    assert exit_info.value.code == 0
    assert "SCRIPT [SCRIPT_ARGS ...]" in capsys.readouterr().out


def test_an_entry_point_that_cannot_be_imported_is_named_and_left_out(monkeypatch, capsys):
    _entry_point(monkeypatch, "no_such_shim.commands:add_commands")
    with pytest.raises(SystemExit) as exit_info:
        main(["run", "train.py"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "comes with the PopTorch shim" in err
    assert "left out the commands of no_such_shim.commands:add_commands" in err


def test_summary_prints_the_text_summary(profile_dir, capsys):
    assert main(["summary", str(profile_dir)]) == 0
    expected = text_summary(load_autoreport(profile_dir), 2e4, {"autoReport.all": "true"})
    assert capsys.readouterr().out == expected


def test_report_re_renders_the_html(profile_dir, tmp_path, capsys):
    output = tmp_path / "out.html"
    assert main(["report", str(profile_dir), "--output", str(output)]) == 0
    assert capsys.readouterr().out.strip() == str(output)
    page = output.read_text(encoding="utf-8")
    assert "<script src" not in page and "ipusim report — training" in page


def test_trace_writes_the_chrome_trace(profile_dir, tmp_path):
    assert main(["trace", str(profile_dir), "-o", str(tmp_path / "t.json")]) == 0
    assert json.loads((tmp_path / "t.json").read_text())["traceEvents"]


def test_a_missing_profile_is_a_clear_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["summary", str(tmp_path)])
    assert exit_info.value.code == 1
    assert "No profile.json in" in capsys.readouterr().err


def test_only_run_takes_script_arguments(profile_dir, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["summary", str(profile_dir), "--", "x"])
    assert exit_info.value.code == 2
    assert "only `ipusim run` passes arguments after --" in capsys.readouterr().err


def test_run_passes_the_arguments_and_the_report_directory(tmp_path, monkeypatch):
    script = tmp_path / "script.py"
    record = tmp_path / "seen.json"
    # The report directory reaches the shim as an argument, not through the environment.
    script.write_text(
        "import json, os, sys\n"
        "from poptorch_shim._core import run_settings\n"
        "json.dump({'argv': sys.argv[1:], 'report': run_settings.current().report_dir,\n"
        f"           'environment': os.environ.get({REPORT_DIR_ENV!r})}}, "
        f"open({str(record)!r}, 'w'))\n")
    monkeypatch.delenv(REPORT_DIR_ENV, raising=False)
    # Everything after the script is the script's, its own --report included;
    # the older `SCRIPT -- ARGS` form still works.
    for argv in (["--replicas", "4", "--report", "x"], ["--", "--replicas", "4", "--report", "x"]):
        assert ipusim_main(["run", "--report", str(tmp_path / "reports"), str(script),
                            *argv]) == 0
        seen = json.loads(record.read_text())
        assert seen == {"argv": ["--replicas", "4", "--report", "x"],
                        "report": str(tmp_path / "reports"), "environment": None}


def test_run_keeps_the_scripts_own_errors(tmp_path, capsys):
    script = tmp_path / "fails.py"
    script.write_text("raise ValueError('the script failed')\n")
    assert ipusim_main(["run", str(script)]) == 1  # as python exits on it
    err = capsys.readouterr().err  # its traceback, from the script's frame down
    assert err == (f'Traceback (most recent call last):\n  File "{script}", line 1, in <module>\n'
                   "    raise ValueError('the script failed')\n"
                   "ValueError: the script failed\n")
    assert ipusim_main(["run", str(tmp_path / "missing.py")]) == 1
    assert "no such script" in capsys.readouterr().err


def test_simulations_can_show_a_progress_bar(capsys):
    def simulation():
        return Simulation(Work(stages(1)), RunConfig(device_iterations=2), system_spec("mk2", 1))

    quiet = simulation().run_steps(3)
    assert capsys.readouterr().err == ""
    shown = simulation().run_steps(3, progress=True)
    err = capsys.readouterr().err  # tqdm writes to stderr
    assert "simulating" in err and "3/3" in err
    assert shown.events.equals(quiet.events)


def test_the_shim_runner_names_a_missing_script_without_a_traceback(tmp_path):
    result = subprocess.run([sys.executable, "-m", "poptorch_shim", str(tmp_path / "missing.py")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip() == \
        f"python -m poptorch_shim: error: no such script: {tmp_path / 'missing.py'}"


def test_the_runner_prints_each_models_simulated_figures_at_exit(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(
        "import torch, poptorch\n"
        "first = poptorch.inferenceModel(torch.nn.Linear(4, 2))\n"
        "first(torch.ones(2, 4))\n"
        "first.destroy()\n"
        "second = poptorch.inferenceModel(torch.nn.Linear(4, 2),\n"
        "                                 poptorch.Options().modelName('kept'))\n"
        "second(torch.ones(2, 4))\n"
        "never_run = poptorch.inferenceModel(torch.nn.Linear(4, 2))\n")
    result = subprocess.run([sys.executable, "-m", "poptorch_shim", str(script)],
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, REPORT_DIR_ENV: str(tmp_path / "reports")})
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    start = lines.index("ipusim: simulated figures (the script's own timings are this host's "
                        "wall clock, not the IPUs'):")
    figures = lines[start + 1:]
    assert [line.split(":")[0].strip() for line in figures] == ["inference", "kept"]
    for line, name in zip(figures, ("inference", "kept")):
        assert "items/s (the IPUs alone; no data loader measured), latency" in line \
            and "bottleneck" in line
        assert line.endswith(f"report {tmp_path / 'reports' / name}")
