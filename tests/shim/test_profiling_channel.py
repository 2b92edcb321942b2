"""``poptorch.profiling.Channel``: tracepoints recorded with their host and simulated time,
and written as a Chrome trace beside a run's reports."""
import json

import pytest
import torch

import poptorch_shim as poptorch
from poptorch_shim import profiling
from poptorch_shim.commands import RunSettings, run_script


def test_tracepoints_nest_and_are_named_after_their_channel():
    channel = poptorch.profiling.Channel("MyApp")
    first = profiling.count()
    with channel.tracepoint("outer"):
        with channel.tracepoint("inner"):
            pass
    inner, outer = profiling.recorded(first)
    assert (inner.name, outer.name) == ("MyApp.inner", "MyApp.outer")
    assert inner.channel == outer.channel == "MyApp"
    assert outer.start_ns <= inner.start_ns <= inner.end_ns <= outer.end_ns
    assert inner.simulated_ps == outer.simulated_ps == 0  # no model call inside


def test_a_tracepoint_holds_the_simulated_time_of_the_model_calls_inside_it():
    model = poptorch.inferenceModel(torch.nn.Linear(4, 2), poptorch.Options().deviceIterations(2))
    channel = poptorch.profiling.Channel("Loop")
    first = profiling.count()
    with channel.tracepoint("two calls"):
        model(torch.ones(2, 4))
        model(torch.ones(2, 4))
    (loop,) = profiling.recorded(first)
    assert loop.simulated_ps == sum(model.device.step_durations[-2:]) > 0


def test_instrument_wraps_the_named_methods_and_keeps_what_they_return():
    class Loader:
        def batch(self, n):
            return list(range(n))

    loader = profiling.Channel("Data").instrument(Loader(), "batch")
    first = profiling.count()
    assert loader.batch(3) == [0, 1, 2]
    assert [tp.name for tp in profiling.recorded(first)] == ["Data.batch"]
    with pytest.raises(AttributeError, match="has no method 'fetch'"):
        profiling.Channel("Data").instrument(Loader(), "fetch")
    with pytest.raises(TypeError, match="name must be a non-empty string"):
        profiling.Channel(3)


def test_the_chrome_trace_has_a_row_per_channel_and_times_from_the_first_tracepoint():
    points = [profiling.Tracepoint("A", "A.x", 5_000, 9_000, 2_000_000),
              profiling.Tracepoint("B", "B.y", 6_000, 7_000, 0)]
    trace = profiling.chrome_trace(points)["traceEvents"]
    rows = {e["args"]["name"]: e["tid"] for e in trace if e["name"] == "thread_name"}
    spans = {e["name"]: e for e in trace if e["ph"] == "X"}
    assert rows == {"A": 0, "B": 1}
    assert (spans["A.x"]["ts"], spans["A.x"]["dur"], spans["A.x"]["tid"]) == (0.0, 4.0, 0)
    assert (spans["B.y"]["ts"], spans["B.y"]["dur"], spans["B.y"]["tid"]) == (1.0, 1.0, 1)
    assert spans["A.x"]["args"] == {"simulated model calls (us)": 2.0}


def test_a_run_with_reports_writes_the_scripts_tracepoints_beside_them(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(
        "import torch, poptorch\n"
        "channel = poptorch.profiling.Channel('Train')\n"
        "model = poptorch.inferenceModel(torch.nn.Linear(4, 2))\n"
        "for step in range(3):\n"
        "    with channel.tracepoint('step'):\n"
        "        model(torch.ones(1, 4))\n")
    reports = tmp_path / "reports"
    run_script(str(script), [], RunSettings(report_dir=str(reports)))
    trace = json.loads((reports / profiling.TRACE_FILE).read_text())["traceEvents"]
    steps = [e for e in trace if e["ph"] == "X"]
    assert [e["name"] for e in steps] == ["Train.step"] * 3
    assert all(e["args"]["simulated model calls (us)"] > 0 for e in steps)
    assert steps[0]["ts"] == 0 and steps[0]["ts"] + steps[0]["dur"] <= steps[1]["ts"]
    # Without reports, nothing is written.
    run_script(str(script), [], RunSettings(report_dir=None))
    assert not (tmp_path / profiling.TRACE_FILE).exists()


def test_tracepoints_that_cannot_be_written_do_not_hide_the_scripts_own_error(tmp_path, capsys):
    script = tmp_path / "fails.py"
    script.write_text("import poptorch\n"
                      "with poptorch.profiling.Channel('App').tracepoint('start'):\n"
                      "    pass\n"
                      "raise ValueError('the script failed')\n")
    not_a_directory = tmp_path / "reports"
    not_a_directory.write_text("a file where the report directory should be")
    with pytest.raises(ValueError, match="the script failed"):
        run_script(str(script), [], RunSettings(report_dir=str(not_a_directory)))
    assert "ipusim:" in capsys.readouterr().err


def _inference_trace(script, reports):
    """Run ``script`` with reports in ``reports``: its inference model's Chrome trace."""
    assert run_script(str(script), [], RunSettings(report_dir=str(reports))) == 0
    return json.loads((reports / "inference" / "trace.json").read_text())


def test_a_runs_tracepoints_join_each_models_trace_in_its_simulated_time(tmp_path):
    """A tracepoint around a call spans that call's step on the model's timeline; one
    around the loop spans them all; one between calls takes no simulated time; one
    wholly before the first call (the first 'load' too) is left out."""
    script = tmp_path / "script.py"
    script.write_text(
        "import torch, poptorch\n"
        "train, data = poptorch.profiling.Channel('Train'), poptorch.profiling.Channel('Data')\n"
        "with data.tracepoint('before'):\n"
        "    x = torch.ones(1, 4)\n"
        "model = poptorch.inferenceModel(torch.nn.Linear(4, 2))\n"
        "with train.tracepoint('loop'):\n"
        "    for step in range(3):\n"
        "        with data.tracepoint('load'):\n"
        "            x = torch.ones(1, 4)\n"
        "        with train.tracepoint('step'):\n"
        "            model(x)\n")
    reports = tmp_path / "reports"
    trace = _inference_trace(script, reports)
    events = trace["traceEvents"]
    threads = {e["tid"]: e["args"]["name"] for e in events
               if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == 1}
    added = [e for e in events if e.get("cat") == "host"]
    assert trace["otherData"]["host_slices"] == len(added) == 6
    assert {threads[e["tid"]] for e in added} == {"tracepoints: Train", "tracepoints: Data"}
    steps = sorted((e for e in events if e.get("cat") == "step"), key=lambda e: e["ts"])
    calls = sorted((e for e in added if e["name"] == "Train.step"), key=lambda e: e["ts"])
    assert len(steps) == len(calls) == 3
    for step, call in zip(steps, calls):
        assert call["ts"] == pytest.approx(step["ts"], abs=1e-6)
        assert call["dur"] == pytest.approx(step["dur"], abs=1e-6)
        assert call["args"]["simulated model calls (us)"] == pytest.approx(step["dur"],
                                                                          abs=1e-3)
    (loop,) = (e for e in added if e["name"] == "Train.loop")
    assert loop["ts"] == pytest.approx(steps[0]["ts"], abs=1e-6)
    assert loop["ts"] + loop["dur"] == pytest.approx(steps[-1]["ts"] + steps[-1]["dur"],
                                                     abs=1e-6)
    loads = [e for e in added if e["name"] == "Data.load"]  # between calls: no simulated time
    assert len(loads) == 2 and all(e["dur"] == 0 for e in loads)
    assert [e["ts"] for e in loads] == pytest.approx([s["ts"] + s["dur"] for s in steps[:2]])
    assert (reports / profiling.TRACE_FILE).exists()  # still written on its own too


def test_a_tracepoint_inside_a_calls_compute_lies_inside_that_calls_step(tmp_path):
    """A call's host time starts where the call does, before its micro-batches are
    computed: a tracepoint in the model's forward maps into its own call's step, with
    a length, not onto the previous call's end (nor is the first one left out)."""
    script = tmp_path / "script.py"
    script.write_text(
        "import torch, poptorch\n"
        "inner = poptorch.profiling.Channel('Model')\n"
        "class Model(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.linear = torch.nn.Linear(4, 2)\n"
        "    def forward(self, x):\n"
        "        with inner.tracepoint('forward'):\n"
        "            return self.linear(x)\n"
        "model = poptorch.inferenceModel(Model())\n"
        "for step in range(3):\n"
        "    model(torch.ones(1, 4))\n")
    events = _inference_trace(script, tmp_path / "reports")["traceEvents"]
    steps = sorted((e for e in events if e.get("cat") == "step"), key=lambda e: e["ts"])
    forwards = [e for e in events if e.get("cat") == "host" and e["name"] == "Model.forward"]
    assert len(steps) == 3 and forwards
    within = {index for e in forwards for index, step in enumerate(steps)
              if step["ts"] - 1e-6 <= e["ts"] and
              e["ts"] + e["dur"] <= step["ts"] + step["dur"] + 1e-6}
    assert within == {0, 1, 2}
    assert all(e["dur"] > 0 for e in forwards)
