"""Graphcore's libpva walkthrough, done as it teaches it, on a simulated profile.

The tutorial (graphcore/tutorials, ``tutorials/popvision/libpva/walkthrough.py``)
runs a PopTorch training script with ``POPLAR_ENGINE_OPTIONS`` asking for
autoReport, then in a separate Python: opens the newest ``training/*.pop``, prints
the compute sets, tiles and Poplar version, sums ``step.ipus[0].cycles`` over the
execution steps, lists the ``OnTileExecute`` programs with several vertices with a
``ProgramVisitor``, and plots each tile's memory with matplotlib. Here the script
runs under the shim and the reading code runs under a plain interpreter that finds
``pva`` where every alias mechanism puts it.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from poptorch_shim._core import aliases

pytestmark = [pytest.mark.slow]  # two processes

ROOT = Path(__file__).resolve().parent.parent.parent

TRAINING = """
import torch
import poptorch

class Classifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3)
        self.fc = torch.nn.Linear(4 * 6 * 6, 10)
        self.loss = torch.nn.CrossEntropyLoss()

    def forward(self, images, labels):
        x = torch.relu(self.conv(images))
        out = self.fc(x.flatten(1))
        return out, self.loss(out, labels)

net = Classifier()
model = poptorch.trainingModel(net, poptorch.Options(),
                               optimizer=poptorch.optim.SGD(net.parameters(), lr=0.1))
for _ in range(3):
    model(torch.randn(8, 1, 8, 8), torch.randint(0, 10, (8,)))
"""

# The walkthrough's steps, in the tutorial's own API calls.
READING = """
import json
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import pva

candidates = [f for f in Path(".").glob("./mydirectory/training/*.pop") if f.is_file()]
candidates.sort(reverse=True, key=lambda a: a.stat().st_mtime)
report = pva.openReport(str(candidates[0]))

print("Number of compute sets: ", report.compilation.graph.numComputeSets)
print("Number of tiles on target: ", report.compilation.target.numTiles)
print("Version of Poplar used: ", report.poplarVersion.string)
total = sum(step.ipus[0].cycles for step in report.execution.steps)

listed = []

class MultiVertex(pva.ProgramVisitor):
    def visitOnTileExecute(self, onTileExecute):
        if len(onTileExecute.computeset.vertices) > 1:
            listed.append(onTileExecute.name)

visitor = MultiVertex()
for s in report.execution.steps:
    s.program.accept(visitor)

matplotlib.use("Agg")
plotted = [tile.memory.total.includingGaps for tile in report.compilation.tiles]
plt.plot(plotted)
plt.xlabel("Tiles")
plt.ylabel("Bytes")
plt.savefig("MemoryByTilePlot.png")
print(json.dumps({"cycles": total, "multi_vertex": listed, "tiles": len(plotted),
                  "fullest": max(plotted), "steps": len(report.execution.steps)}))
"""


def test_the_libpva_walkthrough_runs_as_written_on_a_simulated_training_profile(tmp_path):
    (tmp_path / "train.py").write_text(TRAINING)
    engine = '{"autoReport.all":"true", "autoReport.directory":"mydirectory"}'
    env = {**os.environ, "POPLAR_ENGINE_OPTIONS": engine}
    run = subprocess.run([sys.executable, "-m", "poptorch_shim", "train.py"], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "mydirectory" / "training" / "profile.pop").is_file()
    (tmp_path / "reading.py").write_text(READING)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(aliases.ALIASES), str(ROOT)))}
    read = subprocess.run([sys.executable, "reading.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert read.returncode == 0, read.stderr
    lines = read.stdout.splitlines()
    assert lines[1] == "Number of tiles on target:  1472"
    assert lines[2].startswith("Version of Poplar used:  ipusim")
    found = json.loads(lines[-1])
    compute_sets = int(lines[0].rsplit(" ", 1)[1])
    assert 0 < compute_sets < found["steps"]
    assert found["cycles"] > 0 and found["multi_vertex"] == []  # one kind of work a set
    assert found["tiles"] == 1472 and 0 < found["fullest"] <= 624 * 1024
    assert (tmp_path / "MemoryByTilePlot.png").stat().st_size > 0
