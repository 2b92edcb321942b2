"""One verdict everywhere: the exit line, summary.txt, profile.json, the HTML report
and ``ipusim summary`` name the same limit with the same figures; and a run that
computes for long is told once that a timing-only run gives the same timeline."""
import json
import os
import re
import subprocess
import sys
import weakref

import pytest
from support.reports import fresh_report_registry

from poptorch_shim._core import simulated_clock
from poptorch_shim._core.run_settings import REPORT_DIR_ENV, RunSettings
from poptorch_shim._run import profiling
from poptorch_shim._run.runner import run_script

SCRIPT = """
import time
import torch, poptorch

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)
        self.loss = torch.nn.CrossEntropyLoss()

    def forward(self, x, y=None):
        out = self.fc(x)
        return out if y is None else (out, self.loss(out, y))

class Slow(torch.utils.data.Dataset):  # a host-side transform: about 2,000 items/s
    def __len__(self):
        return 256

    def __getitem__(self, index):
        time.sleep(0.0005)
        return torch.full((8,), float(index)), index % 4

def make_loader(opts):  # built inside a function: nothing keeps it but the loop
    return poptorch.DataLoader(opts, Slow(), batch_size=8)

opts = poptorch.Options().deviceIterations(4)
net = Net()
training = poptorch.trainingModel(net, opts, torch.optim.SGD(net.parameters(), lr=0.1))
for x, y in make_loader(opts):
    training(x, y)
inference = poptorch.inferenceModel(net, opts)  # the same options, fed by no loader
for _ in range(3):
    inference(torch.randn(32, 8))
"""


@pytest.mark.slow  # runs a script in a fresh interpreter, then the summary command
def test_the_exit_line_and_every_report_give_one_verdict(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    reports = tmp_path / "reports"
    run = subprocess.run([sys.executable, "-m", "poptorch_shim", str(script)],
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, REPORT_DIR_ENV: str(reports)})
    assert run.returncode == 0, run.stderr
    exit_lines = {line.split(":")[0].strip(): line for line in run.stderr.splitlines()
                  if "bottleneck" in line and "items/s" in line}
    assert set(exit_lines) == {"training", "inference"}
    for name, line in exit_lines.items():
        directory = reports / name
        profile = json.loads((directory / "profile.json").read_text())
        verdict = profile["verdict"]
        kind = verdict["kind"]
        if name == "training":  # its loader's rate is its own, and the IPUs wait for it
            assert 0 < profile["loader_items_per_s"] < verdict["device_items_per_s"]
            assert kind == "data_loader"
        else:  # the same options, but no loader fed it
            assert profile["loader_items_per_s"] is None and kind != "data_loader"
        assert re.search(rf"bottleneck {kind}\b", line)
        assert f"Bottleneck: {kind}\n" in (directory / "summary.txt").read_text()
        html = (directory / "report.html").read_text()
        assert f'class="verdict {kind}"' in html or f"verdict {kind}" in html
        summary = subprocess.run([sys.executable, "-m", "ipusim", "summary", str(directory)],
                                 capture_output=True, text=True, timeout=120)
        assert summary.returncode == 0, summary.stderr
        assert summary.stdout == (directory / "summary.txt").read_text()
        # The what-ifs are in the profile, fastest first, and the headline quotes the proof.
        speedups = [w["speedup"] for w in verdict["what_if"]]
        assert speedups == sorted(speedups, reverse=True) and speedups
        proof = next(w for w in verdict["what_if"] if w["limit"] == kind)
        if proof["speedup"] > 1:
            assert f"{proof['speedup']:.2f}x" in verdict["headline"]
            assert f"{proof['speedup']:.2f}x" in line


def _entry(line):
    class Executor:
        pass

    executor = Executor()
    return executor, profiling._Figures("model", None, None, weakref.ref(executor), line)


@pytest.mark.parametrize("computed_s, hinted", [(31.0, True), (29.0, False)])
def test_a_run_that_computes_for_long_is_told_about_timing_only_runs(
        monkeypatch, capsys, computed_s, hinted):
    keep, entry = _entry("  model: 1 items/s, latency 1 µs per micro-batch, bottleneck compute")
    monkeypatch.setattr(profiling, "_compiled", [entry])
    monkeypatch.setattr(profiling, "host_calls_s", lambda: computed_s)
    profiling.print_simulated_figures()
    err = capsys.readouterr().err
    assert err.count("--timing-only (opts.Simulation.timingOnly(True))") == int(hinted)
    if hinted:
        assert "computing the models took 31 s on this CPU" in err



def test_a_script_is_told_only_of_its_own_compute(tmp_path, monkeypatch, capsys):
    # The main job runs script after script in one process: a quick script after a
    # slow one is not told the slow one's compute time.
    fresh_report_registry(monkeypatch)
    monkeypatch.setattr(simulated_clock, "_host_calls_ns", 500 * 10**9)  # an earlier script's
    script = tmp_path / "quick.py"
    script.write_text("import torch\nimport poptorch\n"
                      "model = poptorch.inferenceModel(torch.nn.Linear(2, 2))\n"
                      "model(torch.ones(1, 2))\n")
    assert run_script(str(script), [], RunSettings()) == 0
    err = capsys.readouterr().err
    assert "ipusim: simulated figures" in err
    assert "computing the models took" not in err
