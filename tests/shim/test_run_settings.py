"""A run's settings: handed to the runner as an argument, read from the
environment in one place (for plain ``python -m poptorch_shim`` and poprun's
instances)."""
import pytest

import poptorch_shim as poptorch
from ipusim.cli import build_parser
from poptorch_shim._core import run_settings
from poptorch_shim._core.run_settings import RunSettings
from poptorch_shim.commands import add_commands, run_settings_of


def test_the_environment_gives_every_setting():
    settings = RunSettings.from_environment({
        "IPUSIM_REPORT_DIR": "/tmp/reports", "IPUSIM_PROGRESS": "1",
        "IPUSIM_TIMING_ONLY": "1", "IPUSIM_SIMULATED_CLOCK": "yes", "IPUSIM_NUM_IPUS": "64",
        "IPUSIM_JOB_ID": "abc"})
    assert settings == RunSettings(report_dir="/tmp/reports", progress=True, timing_only=True,
                                   simulated_clock=True, num_ipus=64, job_id="abc")
    # Unset, empty and "0" are off; an empty report directory is none.
    assert RunSettings.from_environment({}) == RunSettings()
    assert RunSettings.from_environment({"IPUSIM_TIMING_ONLY": "0", "IPUSIM_PROGRESS": "",
                                         "IPUSIM_REPORT_DIR": ""}) == RunSettings()


@pytest.mark.parametrize("value", ["0", "-4", "eight", ""])
def test_a_bad_machine_size_names_the_variable(value):
    with pytest.raises(ValueError, match=f"IPUSIM_NUM_IPUS must be a positive integer, "
                                         f"got '{value}'"):
        RunSettings.from_environment({"IPUSIM_NUM_IPUS": value})


def test_settings_given_to_the_runner_win_over_the_environment(monkeypatch):
    monkeypatch.setenv("IPUSIM_TIMING_ONLY", "1")
    monkeypatch.setenv("IPUSIM_NUM_IPUS", "8")
    assert poptorch.Options().Simulation.runs_timing_only and run_settings.current().num_ipus == 8
    with run_settings.given(RunSettings(num_ipus=32)):
        assert not poptorch.Options().Simulation.runs_timing_only
        assert not poptorch.ipuHardwareIsAvailable(64) and poptorch.ipuHardwareIsAvailable(32)
    after = run_settings.current()  # the environment's again
    assert after.timing_only and after.num_ipus == 8


def test_ipusim_run_flags_go_over_the_environment(monkeypatch, tmp_path):
    parser = build_parser([add_commands])
    monkeypatch.setenv("IPUSIM_REPORT_DIR", str(tmp_path / "from-env"))
    monkeypatch.setenv("IPUSIM_SIMULATED_CLOCK", "1")
    monkeypatch.delenv("IPUSIM_TIMING_ONLY", raising=False)
    plain = run_settings_of(parser.parse_args(["run", "script.py"]))
    assert plain == RunSettings(report_dir=str(tmp_path / "from-env"), progress=True,
                                simulated_clock=True)
    flagged = run_settings_of(parser.parse_args(
        ["run", "--report", str(tmp_path / "r"), "--timing-only", "--no-progress",
         "script.py", "--timing-only"]))
    assert flagged == RunSettings(report_dir=str(tmp_path / "r"), timing_only=True,
                                  simulated_clock=True)


@pytest.mark.parametrize("value, on", [("1", True), ("true", True), ("ON", True), ("yes", True),
                                       ("0", False), ("false", False), ("off", False),
                                       ("No", False), ("", False)])
def test_switches_read_the_words_people_write(value, on):
    settings = RunSettings.from_environment({"IPUSIM_TIMING_ONLY": value,
                                             "IPUSIM_SIMULATED_CLOCK": value})
    assert settings.timing_only is on and settings.simulated_clock is on


def test_a_switch_set_to_something_else_names_the_variable():
    with pytest.raises(ValueError, match="IPUSIM_TIMING_ONLY='maybe': expected 1, true"):
        RunSettings.from_environment({"IPUSIM_TIMING_ONLY": "maybe"})
