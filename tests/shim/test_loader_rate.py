"""The data loader's rate is an input of the run that holds still: its steps' CPU
time on the simulated host (``test_loader_cpu_time.py``), over windows of steps but
the slowest, with their spread, or given with
``opts.Simulation.loaderRate``; the headline, the what-ifs and a run made with a
change all count the run as fed by it, so a what-if gives what that run gets."""
import json
import re
import textwrap

import pytest
from support.reports import fresh_report_registry

from poptorch_shim import commands

SCRIPT = """
import sys
import torch, poptorch

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(16, 4)
        self.loss = torch.nn.CrossEntropyLoss()

    def forward(self, x, y):
        out = self.fc(x)
        return out, self.loss(out, y)

class Data(torch.utils.data.Dataset):
    def __init__(self, items):
        self.items = items

    def __len__(self):
        return self.items

    def __getitem__(self, i):
        return torch.full((16,), float(i % 7)), i % 4

iterations = int(sys.argv[1])
opts = poptorch.Options().deviceIterations(iterations)
opts.Training.gradientAccumulation(8)
{rate}
net = Net()
model = poptorch.trainingModel(net, opts, torch.optim.SGD(net.parameters(), lr=0.01))
for x, y in poptorch.DataLoader(opts, Data(3 * iterations * 8 * 4), batch_size=4):
    model(x, y)
"""


@pytest.fixture(autouse=True)
def fresh_registry(monkeypatch):
    fresh_report_registry(monkeypatch)


def run(tmp_path, name, iterations, rate_line, capsys):
    script = tmp_path / "script.py"
    script.write_text(SCRIPT.format(rate=rate_line))
    reports = tmp_path / name
    assert commands.main(["run", "--no-progress", "--timing-only", "--report", str(reports),
                          str(script), str(iterations)]) == 0
    err = capsys.readouterr().err
    folder = reports / "training"
    summary = (folder / "summary.txt").read_text()
    fed = re.search(r"Throughput:\s+([\d,.]+) items/s", summary)
    return (json.loads((folder / "profile.json").read_text()),
            float(fed.group(1).replace(",", "")), err)


@pytest.mark.slow  # two runs of a script
def test_a_what_if_capped_by_a_given_loader_rate_is_what_the_changed_run_gets(tmp_path, capsys):
    # Between the IPUs' rates at 4 and 16 device iterations (about 127,000 and 286,000).
    given = "opts.Simulation.loaderRate(200000)"
    profile, fed, err = run(tmp_path, "first", 4, given, capsys)
    assert fed < 200000 and "the data loader 200,000 given" in err
    what_if = next(w for w in profile["verdict"]["what_if"] if w["option"] ==
                   "opts.deviceIterations")
    assert what_if["value"] == 16 and what_if["items_per_s"] == pytest.approx(200000)
    changed, fed_changed, _ = run(tmp_path, "second", 16, given, capsys)
    assert changed["figures"]["throughput(items/s)"] > 200000  # the IPUs alone, uncapped
    assert fed_changed == pytest.approx(what_if["items_per_s"], abs=0.05)


def test_a_measured_rate_is_reported_with_its_spread(tmp_path, capsys):
    profile, fed, err = run(tmp_path, "measured", 4, "", capsys)
    low, high = profile["loader_spread"]
    assert low <= profile["loader_items_per_s"] <= high
    assert fed == pytest.approx(min(profile["figures"]["throughput(items/s)"],
                                    profile["loader_items_per_s"]), abs=0.05)
    assert re.search(r"the data loader [\d,]+ measured, windows of steps [\d,]+ to [\d,]+",
                     err), err


def test_the_exit_line_keeps_the_loader_of_a_model_gone_before_the_end(tmp_path, capsys):
    script = tmp_path / "script.py"
    body = SCRIPT.format(rate="opts.Simulation.loaderRate(20000)")
    # Everything inside a function: the model is gone when the runner prints its line.
    script.write_text("def main():\n" + textwrap.indent(body, "    ") + "\nmain()\n")
    assert commands.main(["run", "--no-progress", "--timing-only", str(script), "4"]) == 0
    line = next(line for line in capsys.readouterr().err.splitlines()
                if line.startswith("  training: "))
    assert "the data loader 20,000 given" in line
