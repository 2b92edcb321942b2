"""The text summary: how the engine runs, its program steps grouped, the options
as the script set them."""
import json

import pandas as pd
from support.reports import fresh_report_registry

from ipusim import RunConfig, Work, simulate, system_spec
from ipusim.analysis.headline import grouped_steps, step_cycles
from ipusim.report import text_summary
from ipusim.report.figures import timeline_figure
from ipusim.report.summary import execution_text
from poptorch_shim import commands

from report_timelines import pipeline_run, stages


def test_a_model_on_one_ipu_is_a_single_ipu_not_a_shard(replicated_timeline):
    assert execution_text(replicated_timeline) == "single IPU"
    text = text_summary(replicated_timeline)
    assert "  Execution:                  single IPU\n" in text and "sharded" not in text
    assert "training, single IPU, 4 replica(s)" in timeline_figure(replicated_timeline) \
        .layout.title.text
    two = simulate(Work(stages(2)), RunConfig(device_iterations=2), system_spec("mk2", 2))
    assert execution_text(two) == "sharded, 2 stage(s) on 2 IPU(s) per replica"
    assert execution_text(pipeline_run()) == "pipelined, 4 stage(s) on 4 IPU(s) per replica"


def test_consecutive_steps_of_equal_cycles_share_a_row():
    steps = pd.DataFrame({"step": range(6), "start_cycle": [0, 10, 15, 20, 25, 30],
                          "cycles": [10, 5, 5, 5, 5, 7], "duration(us)": [1.0, .5, .5, .5, .5, .7]})
    grouped = grouped_steps(steps)
    assert grouped.to_dict("list") == {
        "steps": ["0", "1-4", "5"], "count": [1, 4, 1], "start_cycle": [0, 10, 30],
        "cycles": [10, 5, 7], "duration(us)": [1.0, .5, .7]}


def test_the_summary_groups_identical_steps():
    timeline = pipeline_run(micro_batches=8, steps=5)
    cycles = step_cycles(timeline)["cycles"]
    assert cycles.nunique() < len(cycles)  # some steps repeat: they share a row
    text = text_summary(timeline)
    table = text.split("Program steps (consecutive steps of equal cycles on one row):\n")[1]
    rows = table.split("\n\n")[0].splitlines()[1:]
    assert sum(int(row.split()[1]) for row in rows) == 5  # every step counted once
    assert len(rows) == len(grouped_steps(step_cycles(timeline))) < 5


def test_a_report_lists_the_options_as_the_script_set_them(tmp_path, monkeypatch):
    fresh_report_registry(monkeypatch)
    script = tmp_path / "script.py"
    script.write_text(
        "import torch, poptorch\n"
        "opts = poptorch.Options().deviceIterations(2).replicationFactor(2)\n"
        "opts.outputMode(poptorch.OutputMode.All).modelName('named')\n"
        "opts.Training.gradientAccumulation(3)\n"
        "opts.enableProfiling(" + repr(str(tmp_path / "reports")) + ")\n"
        "class Net(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = torch.nn.Linear(4, 2)\n"
        "    def forward(self, x, y):\n"
        "        out = self.fc(x)\n"
        "        return out, torch.nn.functional.mse_loss(out, y)\n"
        "model = poptorch.trainingModel(Net(), opts,\n"
        "                               torch.optim.SGD(Net().parameters(), lr=0.1))\n"
        "model(torch.ones(12, 4), torch.zeros(12, 2))\n")
    assert commands.main(["run", "--no-progress", str(script)]) == 0  # as `ipusim run` does
    profile = json.loads((tmp_path / "reports" / "named" / "profile.json").read_text())
    options = profile["options"]
    assert {key: options[key] for key in ("deviceIterations", "replicationFactor", "outputMode",
                                          "modelName", "Training.gradientAccumulation")} == {
        "deviceIterations": 2, "replicationFactor": 2, "outputMode": "OutputMode.All",
        "modelName": "named", "Training.gradientAccumulation": 3}
    assert options["_Popart.engineOptions"]["autoReport.all"] == "true"
    assert not [key for key in options if "_" in key.split(".")[-1]]  # no internal snake_case
    summary = (tmp_path / "reports" / "named" / "summary.txt").read_text()
    assert "    deviceIterations = 2\n" in summary
    assert "    Training.gradientAccumulation = 3\n" in summary
    assert "device_iterations" not in summary


def test_the_summary_shows_each_ipus_idle_time(pipeline_timeline):
    text = text_summary(pipeline_timeline)
    section = text[text.index("Time per IPU"):text.index("Bottleneck:")].splitlines()
    assert "not computing" in section[1] and "compute" in section[1]
    rows = [line.split() for line in section[3:] if line.strip()]
    utilisation = pipeline_timeline.utilisation()
    assert [int(row[0]) for row in rows] == list(utilisation.index)
    for row, busy in zip(rows, utilisation):
        assert row[1] == f"{1 - busy:.1%}" and row[2] == f"{busy:.1%}"
