"""A verdict is the cause its own figures show: an inference pipeline that spends
nearly all its time in the host round trip is limited by it, not by its small
bubble, though more device iterations lift both; every output says so."""
import json

from support.reports import fresh_report_registry

from ipusim import cli
from poptorch_shim import commands

SCRIPT = """
import torch, poptorch
model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
poptorch.BeginBlock(model[0], "a", ipu_id=0)
poptorch.BeginBlock(model[2], "b", ipu_id=1)
opts = poptorch.Options().deviceIterations(16)
opts.setExecutionStrategy(poptorch.PipelinedExecution())
m = poptorch.inferenceModel(model, opts)
for _ in range(3):
    m(torch.randn(32, 16))
"""


def run_script(tmp_path, monkeypatch):
    """The script above through ``ipusim run --report``: its model's report folder."""
    fresh_report_registry(monkeypatch)
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    reports = tmp_path / "reports"
    assert commands.main(["run", "--no-progress", "--report", str(reports), str(script)]) == 0
    return reports / "inference"


def test_a_round_trip_bound_inference_pipeline_is_called_host_round_trip(tmp_path, capsys,
                                                                        monkeypatch):
    folder = run_script(tmp_path, monkeypatch)
    exit_line = capsys.readouterr().err
    profile = json.loads((folder / "profile.json").read_text())
    assert profile["verdict"]["host_call_share"] > 0.8
    assert profile["figures"]["bubble_fraction"] < 0.1
    assert profile["verdict"]["kind"] == "host_round_trip"
    assert "bottleneck host_round_trip (four times the device iterations" in exit_line
    assert "Bottleneck: host_round_trip" in (folder / "summary.txt").read_text()
    assert cli.main(["summary", str(folder)]) == 0
    assert "Bottleneck: host_round_trip" in capsys.readouterr().out
    assert "host_round_trip" in (folder / "report.html").read_text()


def test_its_report_opens_on_the_pipeline_not_the_host_round_trip(tmp_path, monkeypatch):
    from ipusim.report import load_autoreport
    from ipusim.report.figures import initial_view

    timeline = load_autoreport(run_script(tmp_path, monkeypatch))
    x0, x1, note = initial_view(timeline, timeline.events)
    run = timeline.pipeline_phases().groupby(["step", "run"]).agg(
        start=("start_ps", "min"), end=("end_ps", "max")).iloc[0] / 10**6
    assert note == "the first pipeline run"
    assert x0 <= run["start"] and x1 >= run["end"]
    assert (run["end"] - run["start"]) / (x1 - x0) > 0.9  # the pipeline fills the view
