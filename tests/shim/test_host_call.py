"""The host's side of a call: PopTorch's path and the engine's run, each from its source."""
import torch

import poptorch_shim as poptorch
from ipusim.cost.cost_model import DEFAULT, PS_PER_US
from ipusim.report.summary import figure_rows


class PopxlMnist(torch.nn.Module):
    """The MLP of popxl's tutorial whose session.run was measured (784-512-512-512-10)."""

    def __init__(self):
        super().__init__()
        sizes = (784, 512, 512, 512, 10)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(a, b) for a, b in zip(sizes, sizes[1:]))

    def forward(self, x):
        x = x.reshape(-1, 784)
        for layer in self.layers[:-1]:
            x = torch.nn.functional.gelu(layer(x))
        return self.layers[-1](x)


def run_once(**cost) -> poptorch.PoplarExecutor:
    opts = poptorch.Options()
    opts.Simulation.costModel(**cost)
    model = poptorch.inferenceModel(PopxlMnist().eval(), opts)
    model(torch.randn(80, 28, 28))
    return model


def test_popxls_measured_session_run_is_what_the_engine_run_was_taken_from():
    # graphcore/examples 429857d, popxl tutorial 5, mnist.ipynb:1170: 0.80 ms a run of
    # batch 80, host copies and compute included. popxl has no PopTorch path.
    call_ps = run_once(poptorch_call_ps=0).timeline.duration_ps
    assert abs(call_ps / (800 * PS_PER_US) - 1) < 0.03
    assert 550 * PS_PER_US <= DEFAULT.engine_run_ps <= 800 * PS_PER_US


def test_a_call_is_its_host_side_then_its_copies_and_compute():
    model = run_once()
    events = model.timeline.events
    host = events[events["kind"] == "host_call"]
    assert (host["end_ps"] - host["start_ps"]).tolist() == [DEFAULT.host_call_ps]
    assert DEFAULT.host_call_ps == DEFAULT.poptorch_call_ps + DEFAULT.engine_run_ps
    device = events[events["kind"] != "host_call"]
    assert device["start_ps"].min() >= host["end_ps"].max()
    # PopTorch's getLatency() runs from the input's arrival to the output's: the host's
    # side of the call is not in it.
    latency_ps = model.getLatency()[2] * 1e12
    assert abs(latency_ps + DEFAULT.host_call_ps - model.timeline.duration_ps) < PS_PER_US


def test_without_the_host_side_a_call_is_device_work_alone():
    quick = run_once(poptorch_call_ps=0, engine_run_ps=0).timeline
    full = run_once().timeline
    assert full.duration_ps - quick.duration_ps == DEFAULT.host_call_ps


def test_the_summary_gives_the_host_side_of_a_call_part_by_part():
    rows = dict(figure_rows(run_once().timeline, None))
    assert rows["Host side of a call"] == (
        "750 µs (PopTorch's Python path 50 µs, the engine's run 700 µs)")
