"""Settings are checked when they are given: the IPUSIM_* variables when a run
starts, the options when they are set; each error names the setting, the
value and the rule, in PopTorch's style, never a raw error from below."""
import re

import pytest
import torch

import poptorch_shim as poptorch
from poptorch_shim._core import run_settings
from poptorch_shim._core.run_settings import MAX_NUM_IPUS, RunSettings
from poptorch_shim._run import runner
from poptorch_shim.errors import ConfigFileError


@pytest.mark.parametrize("variable, value, message", [
    ("IPUSIM_TRACE_DETAIL", "everything",
     "IPUSIM_TRACE_DETAIL='everything': expected 'full', 'edges', or unset"),
    ("IPUSIM_FOLD_REPLICAS", "false", "IPUSIM_FOLD_REPLICAS='false': expected '0', '1', or unset"),
    ("IPUSIM_NUM_IPUS", "10000000",
     f"IPUSIM_NUM_IPUS must be at most {MAX_NUM_IPUS} (an IPU-POD1024"),
    ("IPUSIM_PROGRESS", "maybe", "IPUSIM_PROGRESS='maybe': expected 1, true, yes or on"),
])
def test_every_variable_is_checked_when_the_run_starts(variable, value, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        RunSettings.from_environment({variable: value})


def test_a_bad_variable_stops_the_run_before_the_script(tmp_path, monkeypatch, capsys):
    marker = tmp_path / "ran"
    script = tmp_path / "script.py"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.setenv("IPUSIM_TRACE_DETAIL", "everything")
    assert runner.main([str(script)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "IPUSIM_TRACE_DETAIL='everything'" in err
    assert not marker.exists()


def test_an_unknown_variable_is_named_once(monkeypatch, capsys):
    monkeypatch.setattr(run_settings, "_named_unknown", set())
    RunSettings.from_environment({"IPUSIM_REPORTDIR": "/tmp/x"})
    RunSettings.from_environment({"IPUSIM_REPORTDIR": "/tmp/x"})
    err = capsys.readouterr().err
    assert err.count("ignoring IPUSIM_REPORTDIR") == 1 and "IPUSIM_REPORT_DIR" in err


@pytest.mark.parametrize("num_ipus", [0, MAX_NUM_IPUS + 1, True])
def test_the_machine_has_at_most_an_ipu_pod1024(num_ipus):
    with pytest.raises(ValueError, match=f"1 to {MAX_NUM_IPUS} IPUs"):
        RunSettings(num_ipus=num_ipus)
    assert RunSettings(num_ipus=MAX_NUM_IPUS).num_ipus == MAX_NUM_IPUS


@pytest.mark.parametrize("call, message", [
    (lambda o: o.Simulation.system(clock_hz="fast"),
     "Options.Simulation.system: IPUSpec.clock_hz must be positive, got 'fast'"),
    (lambda o: o.Simulation.system(tiles=1.5),
     "Options.Simulation.system: IPUSpec.tiles must be a whole number, got 1.5"),
    (lambda o: o.Simulation.system("mk2", MAX_NUM_IPUS + 1),
     f"Options.Simulation.system: num_ipus must be at most {MAX_NUM_IPUS}"),
    (lambda o: o.Simulation.loaderRate(float("nan")),
     "Options.Simulation.loaderRate: loader_rate must be a number, got nan"),
    (lambda o: o.Simulation.loaderRate(float("inf")),
     "Options.Simulation.loaderRate: items_per_second must be a positive finite number"),
    (lambda o: o.randomSeed(2**70), "Options.randomSeed: random_seed must fit in 64 bits"),
    (lambda o: o.deviceIterations(2**64), "Options.deviceIterations: device_iterations must "
                                          "fit in 64 bits"),
])
def test_option_values_are_refused_when_set(call, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        call(poptorch.Options())


@pytest.mark.parametrize("content", [b"\x89PNG\r\n\x1a\n\xff\xfe\x00",
                                     b"deviceIterations(2)\x00\n"])
def test_a_binary_options_file_is_a_config_file_error(tmp_path, content):
    path = tmp_path / "options.bin"
    path.write_bytes(content)
    with pytest.raises(ConfigFileError, match="options.bin"):
        poptorch.Options().loadFromFile(str(path))


def test_a_zero_size_batch_names_the_batch_size():
    model = poptorch.inferenceModel(torch.nn.Linear(4, 2))
    with pytest.raises(ValueError, match=re.escape(
            "Invalid batch size: the batch dimension of the inputs is 0")):
        model(torch.ones(0, 4))
