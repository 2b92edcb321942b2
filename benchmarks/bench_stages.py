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
import sys
import time
from pathlib import Path

import torch
import torch.nn as nn

from poptorch_shim._execution.staged import StagedModel
from poptorch_shim.commands import install_aliases
from poptorch_shim.strategies import PipelinedExecution

# The guide's Network as the parallel-execution scenario writes it: a PopTorch
# script's module (it does `import poptorch`), found from the repository root.
install_aliases()
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from scenarios.parallel_execution import Network, TrainingModelWithLoss  # noqa: E402

BLOCKS = ("B1", "B2", "B3", "B4")


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
