"""Stage-by-stage execution against plain torch on the guide's four-block Network.

The staged runner traces the model once, splits it at its Blocks and runs
each micro-batch stage by stage: forward with detached boundary activations,
then backward stage by stage handing the boundary gradients back. This
measures what that costs over plain torch forward + backward of the whole
model on the same batch, in the same process, interleaved, median of several
repeats (goal: <= 1.2x). Times are the process's CPU time, with torch on one
thread by default, so that other work on a shared machine does not skew the
ratio. Prints only; it asserts nothing.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn as nn

from poptorch_shim._staged import StagedModel
from poptorch_shim.blocks import Block
from poptorch_shim.strategies import PipelinedExecution

BLOCKS = ("B1", "B2", "B3", "B4")


class Network(nn.Module):
    """The batching guide's Network (seed 001, listing 4.5)."""

    def __init__(self):
        super().__init__()
        self.layer1 = nn.Linear(784, 784)
        self.layer2 = nn.Linear(784, 784)
        self.layer3 = nn.Linear(784, 128)
        self.layer4 = nn.Linear(128, 10)
        self.softmax = nn.Softmax(1)

    def forward(self, x):
        x = x.view(-1, 784)
        with Block("B1"):
            x = self.layer1(x)
        with Block("B2"):
            x = self.layer2(x)
        with Block("B3"):
            x = self.layer3(x)
        with Block("B4"):
            x = self.layer4(x)
            x = self.softmax(x)
        return x


class TrainingModelWithLoss(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model
        self.loss = nn.CrossEntropyLoss()

    def forward(self, args, loss_inputs=None):
        output = self.model(args)
        if loss_inputs is None:
            return output
        with Block("B4"):
            loss = self.loss(output, loss_inputs)
        return output, loss


def timed(step, model: nn.Module) -> float:
    """CPU seconds of one training pass, starting from no gradients."""
    model.zero_grad(set_to_none=True)
    start = time.process_time()
    step()
    return time.process_time() - start


def compare(batch: int, repeats: int) -> tuple[float, float]:
    """Median CPU seconds of one forward+backward pass: (plain torch, staged)."""
    torch.manual_seed(0)
    x, y = torch.rand(batch, 1, 28, 28), torch.randint(0, 10, (batch,))
    model = TrainingModelWithLoss(Network())
    strategy = PipelinedExecution(*BLOCKS)
    for ipu, block in enumerate(BLOCKS):
        strategy.stage(block).ipu(ipu)
    staged = StagedModel(model, strategy)

    def plain_pass() -> None:
        model(x, y)[1].backward()

    def staged_pass() -> None:
        staged.run((x, y), {}, training=True, loss_scale=1.0)

    for _ in range(3):  # warm up; the first staged pass traces and splits the model
        timed(plain_pass, model), timed(staged_pass, model)
    plain_times, staged_times = [], []
    for repeat in range(repeats):  # interleaved, alternating which goes first
        order = ((plain_times, plain_pass), (staged_times, staged_pass))
        for times, step in order if repeat % 2 else order[::-1]:
            times.append(timed(step, model))
    return statistics.median(plain_times), statistics.median(staged_times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[2, 16, 64, 256],
                        help="micro-batch sizes to compare (2 16 64 256)")
    parser.add_argument("--repeats", type=int, default=200, help="timed passes of each (200)")
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s); CPU time of one "
          f"forward+backward pass, median of {args.repeats}")
    print(f"{'batch':>6} {'plain torch':>12} {'staged':>12} {'ratio':>7}")
    for batch in args.batches:
        plain, staged = compare(batch, args.repeats)
        print(f"{batch:>6} {plain * 1e3:>9.3f} ms {staged * 1e3:>9.3f} ms "
              f"{staged / plain:>6.3f}x")
    print("goal: staged / plain torch <= 1.2")


if __name__ == "__main__":
    main()
