"""The DataLoader times itself, and a slow one is the bottleneck (the data-loading tutorial)."""
import json
import time

import torch
from support.models import LinearClassifier

import poptorch_shim as poptorch


class SlowDataset(torch.utils.data.Dataset):
    """Every item takes a millisecond to load: ~1,000 items/s, far below the IPU."""

    def __len__(self):
        return 64

    def __getitem__(self, index):
        time.sleep(0.001)
        return torch.full((4,), float(index)), index % 2


def test_a_slow_data_loader_is_the_bottleneck_in_the_report(tmp_path):
    opts = poptorch.Options().deviceIterations(4).enableProfiling(str(tmp_path))
    # A short host round trip per call, so that the loader, not the call, is the slow part.
    opts.Simulation.costModel(engine_run_ps=250 * 10**6)  # a 0.3 ms host call
    loader = poptorch.DataLoader(opts, SlowDataset(), batch_size=2)
    model = poptorch.trainingModel(LinearClassifier(4, 2), opts)
    for x, y in loader:
        model(x, y)
    rate = loader.measured_items_per_s
    assert rate is not None and rate < 1100  # 8 items a step, a millisecond each
    model.destroy()
    profile = json.loads((tmp_path / "training" / "profile.json").read_text())
    assert profile["verdict"]["kind"] == "data_loader"


def test_the_rate_is_unknown_until_two_steps_were_read():
    opts = poptorch.Options()
    loader = poptorch.DataLoader(opts, SlowDataset(), batch_size=4)
    iterator = iter(loader)
    next(iterator)
    assert loader.measured_items_per_s is None
    next(iterator)
    assert loader.measured_items_per_s > 0
