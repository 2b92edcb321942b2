"""TensorFlow 1's pipelining tutorial, step 1: an MLP's mini-batch against its trace.

The tutorial (graphcore/tutorials d6f82ca, ``tutorials/tensorflow1/pipelining/
step1_single_ipu.py``) trains an fp32 784-256-128-64-32-10 MLP with ReLUs and a
softmax cross-entropy, batch 32, gradient descent with 16 batches accumulated, on
one IPU. Its execution traces (``images/step1_single_ipu_execution_trace.png``
and ``..._gradient_descent.png``) show about 49,400 cycles for one mini-batch's
forward and backward (from about 200,900 to 250,300 on the picture's axis) and
about 6,000 for the gradient descent of its 10 tensors (940,200 to 946,200), read
from the pictures to +-3%. The pictures do not name the IPU; the tutorial's
versions of that time ran on Mk2 (IPU-M2000) systems, which this assumes.

ipusim runs the same model through the PopTorch shim, timing-only, on one Mk2 IPU
with the same batch, accumulation and optimizer, and prints its operators' cycles
for one micro-batch (forward, backward with the accumulators' adds) and for the
weight update, each split by what its program steps do. ``--check`` exits 1 unless
the mini-batch is within +-20% of 49,400 cycles. A check, not a target: nothing is
fitted to it.
"""
from __future__ import annotations

import argparse
import sys

import torch
from torch import nn

from poptorch_shim.commands import install_aliases

install_aliases()
import poptorch  # noqa: E402

MINI_BATCH, UPDATE, TOLERANCE = 49_400, 6_000, 0.20
BATCH, ACCUMULATE = 32, 16


class MLP(nn.Module):
    """The tutorial's model, its loss inside as PopTorch wants it."""

    def __init__(self):
        super().__init__()
        widths = (784, 256, 128, 64, 32)
        layers = []
        for width, out in zip(widths, widths[1:]):
            layers += [nn.Linear(width, out), nn.ReLU()]
        self.body = nn.Sequential(*layers, nn.Linear(32, 10))
        self.loss = nn.CrossEntropyLoss()

    def forward(self, x, labels):
        logits = self.body(x)
        return logits, self.loss(logits, labels)


def simulate():
    """The operator table of one call of the tutorial's training step."""
    opts = poptorch.Options()
    opts.Training.gradientAccumulation(ACCUMULATE)
    opts.Simulation.timingOnly(True)
    model = MLP()
    training = poptorch.trainingModel(model, opts,
                                      poptorch.optim.SGD(model.parameters(), lr=0.01))
    items = BATCH * ACCUMULATE
    training(torch.randn(items, 784), torch.randint(0, 10, (items,)))
    table = training.timeline.operator_breakdown()
    training.destroy()
    return table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="exit 1 unless a mini-batch is within +-20%% of 49,400 cycles")
    args = parser.parse_args()
    table = simulate()
    roles = ["vertex_cycles", "glue_cycles", "exchange_cycles", "sync_cycles"]
    by_pass = table.groupby("pass")[roles + ["total_cycles"]].sum()
    print(f"{'pass':<16}" + "".join(f"{role.split('_')[0]:>11}" for role in roles)
          + f"{'total':>11}")
    for name, row in by_pass.iterrows():
        print(f"{name:<16}" + "".join(f"{row[role]:>11,.0f}" for role in roles)
              + f"{row['total_cycles']:>11,.0f}")
    mini_batch = by_pass.loc[["forward", "backward"], "total_cycles"].sum()
    update = by_pass.loc["weight_update", "total_cycles"]
    error = mini_batch / MINI_BATCH - 1
    print(f"\nA mini-batch (forward and backward): {mini_batch:,.0f} cycles simulated, "
          f"about {MINI_BATCH:,} on the trace ({error:+.1%})")
    print(f"The weight update of 10 tensors: {update:,.0f} cycles simulated; the trace's "
          f"gradient descent about {UPDATE:,} ({update / UPDATE - 1:+.1%}). Not the same "
          f"program: TensorFlow's GradientDescent is one scaled add a tensor, PopTorch's SGD "
          f"as PopART decomposes it the learning rate's negation and two operators a tensor, "
          f"and the accumulators' zeroing")
    if args.check and abs(error) > TOLERANCE:
        print(f"Outside +-{TOLERANCE:.0%}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
