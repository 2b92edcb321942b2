"""The weight update a training model's optimizer costs: the operators PopART's
decomposition of that optimizer runs, in its state's types."""
from __future__ import annotations

import pytest
import torch

import poptorch_shim as poptorch

UPDATE = "weight_update"


def trained(make_optimizer):
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Linear(256, 10))

    class WithLoss(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, x, y):
            out = self.model(x)
            return out, torch.nn.functional.cross_entropy(out, y)

    wrapped = WithLoss()
    opts = poptorch.Options()
    opts.Simulation.timingOnly(True)
    training = poptorch.trainingModel(wrapped, opts, make_optimizer(wrapped.parameters()))
    training(torch.zeros(16, 256), torch.zeros(16, dtype=torch.long))
    return training


def update_us(training) -> float:
    events = training.timeline.events
    update = events[events["kind"] == UPDATE]
    return float((update["end_ps"] - update["start_ps"]).sum()) / 1e6


@pytest.mark.parametrize("make,name,first_op", [
    (lambda p: poptorch.optim.SGD(p, lr=0.1), "SGD", "SGD0 weight decay scale"),
    (lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9), "SGD", "SGD2 velocity momentum"),
    (lambda p: poptorch.optim.SGD(p, lr=0.1, momentum=0.9, use_combined_accum=True),
     "SGD (combined)", "SGD1 dampened gradient into velocity"),
    (lambda p: poptorch.optim.Adam(p, lr=0.1), "Adam", "Adam L2 into gradient"),
    (lambda p: poptorch.optim.AdamW(p, lr=0.1), "AdamW", "first moment"),
    (lambda p: poptorch.optim.LAMB(p, lr=0.1), "LAMB", "first moment"),
    (lambda p: poptorch.optim.RMSprop(p, lr=0.1), "RMSprop", "RMSprop L2 into gradient"),
])
def test_the_update_runs_the_optimizers_own_operators(make, name, first_op):
    program = trained(make).device.run.optimizer
    assert program.name == name
    assert program.ops[0].name == first_op


def test_state_types_set_the_width_each_operator_moves():
    program = trained(lambda p: poptorch.optim.AdamW(
        p, lr=0.1, first_order_momentum_accum_type=torch.float16,
        second_order_momentum_accum_type=torch.float32)).device.run.optimizer
    widths = {op.name: op.width for op in program.ops}
    assert widths["first moment"] == 2 and widths["second moment"] == 4


def test_lamb_takes_longer_than_sgd_on_the_same_model():
    assert update_us(trained(lambda p: poptorch.optim.LAMB(p, lr=0.1))) \
        > update_us(trained(lambda p: poptorch.optim.SGD(p, lr=0.1)))
