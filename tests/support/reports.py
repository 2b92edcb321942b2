"""What the report tests share: a runner's report bookkeeping started afresh, and a
small model that asks for a profile."""
from pathlib import Path

import torch

import poptorch_shim as poptorch
from poptorch_shim._run import model_reports


def fresh_report_registry(monkeypatch) -> None:
    """No pending reports, no report directories given out, no directories locked."""
    monkeypatch.setattr(model_reports, "_pending", [])
    monkeypatch.setattr(model_reports, "_taken", set())
    monkeypatch.setattr(model_reports, "_given", model_reports.weakref.WeakKeyDictionary())
    monkeypatch.setattr(model_reports, "_reported", model_reports.weakref.WeakSet())
    monkeypatch.setattr(model_reports, "_locks", {}, raising=False)


def profiled_inference(root: Path, name: str | None = None):
    """A called inference model that profiles into ``root`` (as ``name``, if given):
    its report is pending until written."""
    opts = poptorch.Options()
    opts.enableProfiling(str(root))
    if name is not None:
        opts.modelName(name)
    model = poptorch.inferenceModel(torch.nn.Linear(4, 2), opts)
    model(torch.ones(2, 4))
    return model
