"""What the report tests share: a runner's report bookkeeping started afresh, and a
small model that asks for a profile."""
from pathlib import Path

import torch

import poptorch_shim as poptorch
from poptorch_shim._run import profiling


def fresh_report_registry(monkeypatch) -> None:
    """No pending reports, no report directories given out, no directories locked."""
    monkeypatch.setattr(profiling, "_pending", [])
    monkeypatch.setattr(profiling, "_taken", set())
    monkeypatch.setattr(profiling, "_given", profiling.weakref.WeakKeyDictionary())
    monkeypatch.setattr(profiling, "_reported", profiling.weakref.WeakSet())
    monkeypatch.setattr(profiling, "_locks", {}, raising=False)


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
