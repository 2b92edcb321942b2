"""One verdict everywhere: the exit line, summary.txt, profile.json, the HTML report
and ``ipusim summary`` name the same limit with the same figures; and a run that
computes for long is told once that a timing-only run gives the same timeline."""
import json
import re
import subprocess
import sys

import pytest
from support.reports import fresh_report_registry

from ipusim.cli import main as ipusim_command
from poptorch_shim._core import simulated_clock
from poptorch_shim._core.run_settings import RunSettings
from poptorch_shim._run import model_reports
from poptorch_shim._run.runner import run_script
from poptorch_shim.options import Options

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


def _run_with_reports(tmp_path, source):
    """Run ``source`` as a script through ``ipusim run --report``: its exit lines by model
    name, and the report directory."""
    script = tmp_path / "script.py"
    script.write_text(source)
    reports = tmp_path / "reports"
    run = subprocess.run([sys.executable, "-m", "ipusim", "run", "--report", str(reports),
                          str(script)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    exit_lines = {line.split(":")[0].strip(): line for line in run.stderr.splitlines()
                  if "bottleneck" in line and "items/s" in line}
    return exit_lines, reports


def _check_every_output(line, directory, capsys):
    """The exit line, summary.txt, profile.json, the HTML report and ``ipusim summary``
    give ``directory``'s verdict with the same figures; its profile."""
    profile = json.loads((directory / "profile.json").read_text())
    verdict = profile["verdict"]
    kind = verdict["kind"]
    assert re.search(rf"bottleneck {kind}\b", line)
    summary_txt = (directory / "summary.txt").read_text()
    assert f"Bottleneck: {kind}\n" in summary_txt
    html = (directory / "report.html").read_text()
    assert f'class="verdict {kind}"' in html or f"verdict {kind}" in html
    capsys.readouterr()
    assert ipusim_command(["summary", str(directory)]) == 0
    assert capsys.readouterr().out == summary_txt
    # The what-ifs are in the profile, fastest first, and the headline quotes the proof.
    speedups = [w["speedup"] for w in verdict["what_if"]]
    assert speedups == sorted(speedups, reverse=True) and speedups
    proof = next(w for w in verdict["what_if"] if w["limit"] == kind)
    if proof["speedup"] > 1:
        assert f"{proof['speedup']:.2f}x" in verdict["headline"]
        assert f"{proof['change']}: {proof['speedup']:.2f}x" in line
    return profile


@pytest.mark.slow  # runs a script in a fresh interpreter, then the summary command
def test_the_exit_line_and_every_report_give_one_verdict(tmp_path, capsys):
    exit_lines, reports = _run_with_reports(tmp_path, SCRIPT)
    assert set(exit_lines) == {"training", "inference"}
    for name, line in exit_lines.items():
        profile = _check_every_output(line, reports / name, capsys)
        kind = profile["verdict"]["kind"]
        if name == "training":  # its loader's rate is its own, and the IPUs wait for it
            assert 0 < profile["loader_items_per_s"] < profile["verdict"]["device_items_per_s"]
            assert kind == "data_loader"
        else:  # the same options, but no loader fed it
            assert profile["loader_items_per_s"] is None and kind != "data_loader"


PIPELINED_FED_SLOWLY = """
import time
import torch, poptorch

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(16, 16)
        self.b = torch.nn.Linear(16, 4)

    def forward(self, x):
        with poptorch.Block("one", ipu_id=0):
            x = self.a(x)
        with poptorch.Block("two", ipu_id=1):
            return self.b(x)

class Slow(torch.utils.data.Dataset):  # about 2,000 items/s
    def __len__(self):
        return 768

    def __getitem__(self, index):
        time.sleep(0.0004)
        return torch.full((16,), float(index))

def main():  # the model is gone when the script ends: its exit line must not need it
    opts = poptorch.Options().deviceIterations(16)
    model = poptorch.inferenceModel(Net(), opts)
    for x in poptorch.DataLoader(opts, Slow(), batch_size=16):
        model(x)

main()
"""


@pytest.mark.slow  # runs a script in a fresh interpreter, then the summary command
def test_a_pipeline_fed_by_a_slow_loader_has_one_verdict_after_its_model_is_gone(tmp_path,
                                                                                 capsys):
    exit_lines, reports = _run_with_reports(tmp_path, PIPELINED_FED_SLOWLY)
    profile = _check_every_output(exit_lines["inference"], reports / "inference", capsys)
    verdict = profile["verdict"]
    assert verdict["kind"] == "data_loader"
    assert f"the data loader {profile['loader_items_per_s']:,.0f} measured" in \
        exit_lines["inference"]


DOES_NOT_FIT = """
import torch, poptorch

opts = poptorch.Options()
opts.Simulation.system("mk2", sram_per_tile_bytes=4096)  # 5.9 MB an IPU
opts._Popart.set("engineOptions", {"debug.allowOutOfMemory": "true"})
model = poptorch.inferenceModel(torch.nn.Linear(1000, 1000), opts)
model(torch.zeros(1, 1000))
"""


@pytest.mark.slow  # runs a script in a fresh interpreter, then the summary command
def test_every_headline_of_a_model_that_does_not_fit_says_so_first(tmp_path, capsys):
    exit_lines, reports = _run_with_reports(tmp_path, DOES_NOT_FIT)
    line = exit_lines["inference"]
    profile = _check_every_output(line, reports / "inference", capsys)
    said = profile["verdict"]["does_not_fit"]
    assert said.startswith("Does not fit: IPU 0 needs ")
    assert line.startswith(f"  inference: {said} Simulated as if it fitted: ")
    assert profile["verdict"]["headline"].startswith(said)
    directory = reports / "inference"
    assert (directory / "summary.txt").read_text().replace("\n  ", " ").count(said) >= 1
    assert said in (directory / "report.html").read_text()


def _entry(line):
    return model_reports._Figures("model", None, None, Options(), line)


@pytest.mark.parametrize("computed_s, hinted", [(31.0, True), (29.0, False)])
def test_a_run_that_computes_for_long_is_told_about_timing_only_runs(
        monkeypatch, capsys, computed_s, hinted):
    entry = _entry("  model: 1 items/s, latency 1 µs per micro-batch, bottleneck compute")
    monkeypatch.setattr(model_reports, "_compiled", [entry])
    monkeypatch.setattr(model_reports, "host_calls_s", lambda: computed_s)
    model_reports.print_simulated_figures()
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
