"""Each measured kernel keeps the aten operator it came from, for the trace's operator
slices; the name takes no part in its price."""
from dataclasses import replace

import torch
import torch.nn as nn

import poptorch_shim as poptorch
from ipusim import CALIBRATED_MK2, MK2_GC200, Cost
from ipusim.report import chrome_trace
from poptorch_shim._execution.cost_probe import measure


def test_measured_kernels_are_named_for_their_aten_operator():
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    with measure() as measured:
        model(torch.randn(8, 16)).sum().backward()
    ops = {kernel.op for kernel, _ in measured.cost.kernels}
    assert {"aten::addmm", "aten::relu", "aten::mm", "aten::threshold_backward"} <= ops
    assert all(op.startswith("aten::") for op in ops)
    unnamed = Cost(kernels=tuple((replace(kernel, op=""), count)
                                 for kernel, count in measured.cost.kernels))
    assert CALIBRATED_MK2.compute_ps(measured.cost, MK2_GC200) == CALIBRATED_MK2.compute_ps(
        unnamed, MK2_GC200)


def test_the_trace_shows_a_models_aten_operators_inside_its_forward():
    model = poptorch.inferenceModel(nn.Sequential(nn.Linear(16, 32), nn.ReLU()))
    model(torch.randn(4, 16))
    events = chrome_trace(model.timeline)["traceEvents"]
    forward = next(e for e in events if e["ph"] == "X" and e["cat"] == "forward")
    inside = [e["name"] for e in events if e.get("cat") == "operator"
              and (e["pid"], e["tid"]) == (forward["pid"], forward["tid"])
              and forward["ts"] <= e["ts"] < forward["ts"] + forward["dur"] - 1e-6]
    assert inside == ["aten::addmm", "aten::relu"]
