"""Tensor liveness in phased execution: with ``setTensorsLiveness`` off chip, a
training phase streams the activations it keeps for the backward out after
its forward pass and back in before its backward, and only one phase's stash
is on chip at a time."""
import pytest
import torch

import poptorch_shim as poptorch

ACCUMULATION = 2


class TwoPhases(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(32, 32)
        self.fc2 = torch.nn.Linear(32, 4)
        self.loss = torch.nn.CrossEntropyLoss()

    def forward(self, x, labels):
        with poptorch.Block("A"):
            x = torch.relu(self.fc1(x))
        with poptorch.Block("B"):
            out = self.fc2(x)
            return out, self.loss(out, labels)


def train(liveness):
    torch.manual_seed(0)
    strategy = poptorch.SerialPhasedExecution("A", "B")
    if liveness is not None:
        strategy.setTensorsLiveness(liveness)
    opts = poptorch.Options().setExecutionStrategy(strategy)
    opts.Training.gradientAccumulation(ACCUMULATION)
    model = poptorch.trainingModel(TwoPhases(), opts)
    model(torch.randn(4 * ACCUMULATION, 32), torch.randint(0, 4, (4 * ACCUMULATION,)))
    return model


def streamed(model, kind):
    events = model.timeline.events
    return events[events["kind"] == kind].groupby("stage", observed=True)["bytes"].sum()


@pytest.fixture(scope="module")
def always_live():
    return train(None)


@pytest.mark.parametrize("liveness", [poptorch.Liveness.OffChipAfterFwd,
                                      poptorch.Liveness.OffChipAfterEachPhase])
def test_off_chip_liveness_streams_each_phase_s_stash(always_live, liveness):
    off_chip = train(liveness)
    stash = {k: stage.stash_bytes for k, stage in enumerate(off_chip.device.work.stages)}
    assert all(stash.values())
    for kind in ("stream_out", "stream_in"):
        extra = streamed(off_chip, kind) - streamed(always_live, kind)
        assert extra.to_dict() == {k: ACCUMULATION * stash[k] for k in stash}, kind
    assert off_chip.device.step_durations[-1] > always_live.device.step_durations[-1]


def test_off_chip_liveness_keeps_one_phase_s_stash_on_chip(always_live):
    off_chip = train(poptorch.Liveness.OffChipAfterFwd)
    stages = off_chip.device.work.stages
    assert always_live.device.memory["stash"][0] == sum(s.stash_bytes for s in stages)
    assert off_chip.device.memory["stash"][0] == max(s.stash_bytes for s in stages)
