"""A script's errors as PopTorch and ``python script.py`` show them: the simulator's
refusals inside a model call are ``poptorch.Error``s, and the runner prints the
traceback from the script's own frame down, without its own and runpy's frames."""
import subprocess
import sys

import pytest
import torch

import poptorch_shim as poptorch

OUT_OF_MEMORY = """
import torch, poptorch

opts = poptorch.Options()
opts.Simulation.system("mk2", sram_per_tile_bytes=4096)  # 5.9 MB an IPU
model = poptorch.inferenceModel(torch.nn.Linear(1000, 1000), opts)

def run():
    return model(torch.zeros(1, 1000))

try:
    run()
except poptorch.Error as error:  # what a PopTorch script catches
    print(f"caught {type(error).__name__} ({error.type}): {error.message[:20]}")
run()
"""


@pytest.mark.slow  # runs the script in fresh interpreters
@pytest.mark.parametrize("command", [["-m", "ipusim", "run", "--report", "{reports}"],
                                     ["-m", "poptorch_shim"]])
def test_out_of_memory_is_a_poptorch_error_shown_from_the_script_down(tmp_path, command):
    script = tmp_path / "oom.py"
    script.write_text(OUT_OF_MEMORY)
    reports = tmp_path / "reports"
    run = subprocess.run([sys.executable] + [c.format(reports=reports) for c in command]
                         + [str(script)], capture_output=True, text=True, timeout=300,
                         cwd=tmp_path)
    assert run.returncode == 1  # as python exits on an uncaught exception
    assert run.stdout == ("caught OutOfMemoryError (poplar_graph_memory_allocation): "
                          "Out of memory on IPU\n")
    lines = run.stderr.splitlines()
    start = lines.index("Traceback (most recent call last):")
    frames = [line for line in lines[start:] if line.startswith("  File ")]
    # The script's frames first, then the model call; nothing of the runner, runpy or
    # the simulator below the call.
    assert [f.split(", in ")[-1] for f in frames] == ["<module>", "run", "__call__"]
    assert all(str(script) in f for f in frames[:2])
    for hidden in ("runpy", "runner.py", "commands.py", "device.py", "memory.py"):
        assert hidden not in run.stderr
    assert lines[-1].startswith("poptorch_shim.errors.OutOfMemoryError: "
                                "'poplar_graph_memory_allocation': Out of memory on IPU 0 "
                                "(model stage model): it needs ")
    assert "debug.allowOutOfMemory" in lines[-1]
    if "--report" in command:  # the memory report is still written, and named
        assert (reports / "inference" / "report.html").exists()
        assert f"its memory report is in {reports / 'inference'}" in run.stderr
    assert "simulated figures" not in run.stderr


@pytest.mark.slow  # runs the script in fresh interpreters
def test_an_error_of_the_script_itself_is_shown_as_python_shows_it(tmp_path):
    script = tmp_path / "fails.py"
    script.write_text("def f():\n    raise KeyError('width')\n\nf()\n")
    run = subprocess.run([sys.executable, "-m", "ipusim", "run", str(script)],
                         capture_output=True, text=True, timeout=120)
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                           timeout=60)
    assert run.returncode == plain.returncode == 1
    assert run.stderr == plain.stderr


def test_the_simulators_refusal_of_a_setting_is_a_poptorch_error_in_its_words():
    opts = poptorch.Options().replicationFactor(32)  # the simulated system has 16 IPUs
    model = poptorch.inferenceModel(torch.nn.Linear(2, 2), opts)
    with pytest.raises(poptorch.Error) as caught:
        model(torch.ones(32, 2))
    assert isinstance(caught.value, ValueError)
    assert caught.value.message.startswith("poptorch.Options().replicationFactor=32 x 1 IPU(s) "
                                           "per replica needs 32 IPUs but the system has ")
