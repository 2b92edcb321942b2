"""Timing-only runs of the real-model scenarios: what measuring and simulating cost.

For ResNet-50 (16 replicas, micro-batch 18, gradient accumulation 57) and
BERT-Large phase 1 (4 replicas x 4-IPU pipeline, micro-batch 8, gradient
accumulation 2048) on a Bow Pod16, with Graphcore's options, it times in wall
seconds, over several repeats from a freshly wrapped model each time:

- measuring: ``compile()`` of a timing-only model, which traces forward and
  backward of one micro-batch on fake tensors (goal: under 30 s for BERT-Large);
- simulating one training step of every micro-batch of every replica
  (goal: under 2 s for BERT-Large), with the rows it records;
- the baseline a full run pays instead: real torch compute of one
  micro-batch's forward and backward on this CPU (fp32, the same model and
  micro-batch), and what a whole step of them would take.

Prints only; it asserts nothing. ``--skip-baseline`` leaves out the real
compute (about a minute for BERT-Large on two cores).
"""
from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import torch

from poptorch_shim.commands import install_aliases

install_aliases()
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import poptorch  # noqa: E402
from scenarios import bert_large, resnet50  # noqa: E402
from scenarios.models import synthetic_bert_batch  # noqa: E402


def case(scenario, optimizer, batch: tuple, micro_batch: int):
    """(wrap, batch, micro-batch): ``wrap()`` gives a fresh timing-only model
    of the scenario, wrapped with Graphcore's options and ``optimizer``."""
    model = scenario.build()

    def wrap():
        copied = copy.deepcopy(model)
        return poptorch.trainingModel(copied, scenario.options(), optimizer(copied.parameters()))
    return wrap, batch, micro_batch


CASES = {
    "resnet50": ("ResNet-50", lambda: case(
        resnet50, lambda params: poptorch.optim.SGD(params, lr=2.0, momentum=0.9,
                                                    loss_scaling=128),
        resnet50.step_batch(18 * 16 * 57), 18)),
    "bert_large": ("BERT-Large", lambda: case(
        bert_large, lambda params: poptorch.optim.LAMB(params, lr=0.006, weight_decay=0.01),
        synthetic_bert_batch(8 * 4 * 2048), 8)),
}


def spread(values: list[float]) -> str:
    return (f"median {statistics.median(values):6.2f} s "
            f"(min {min(values):.2f}, max {max(values):.2f})")


def real_micro_batch_s(wrap, batch, micro_batch: int) -> float:
    """Wall seconds of real fp32 forward + backward of one micro-batch."""
    model = wrap().model.float().train()
    args = [t[:micro_batch] for t in batch]
    if args[0].dtype == torch.uint8:  # the images: a real copy of one micro-batch
        args[0] = args[0].contiguous()
    start = time.perf_counter()
    output = model(*args)
    output[-1].backward()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-baseline", action="store_true")
    parser.add_argument("--models", nargs="*", default=list(CASES), choices=list(CASES))
    args = parser.parse_args()
    for key in args.models:
        name, make = CASES[key]
        wrap, batch, micro_batch = make()
        micro_batches = len(batch[0]) // micro_batch
        measure, simulate, rows = [], [], 0
        for _ in range(args.repeats):
            training = wrap()
            start = time.perf_counter()
            training.compile(*batch)
            measure.append(time.perf_counter() - start)
            start = time.perf_counter()
            training(*batch)
            simulate.append(time.perf_counter() - start)
            rows = len(training.timeline.events)
            rate = training.timeline.throughput()
        print(f"\n{name}: {micro_batches} micro-batches of {micro_batch} per step "
              f"({rate:.0f} items/s simulated)")
        print(f"  measure (fake tensors, one micro-batch): {spread(measure)}")
        print(f"  simulate one step ({rows:,} rows):       {spread(simulate)}")
        if not args.skip_baseline:
            real = real_micro_batch_s(wrap, batch, micro_batch)
            print(f"  baseline, real compute of one micro-batch: {real:6.2f} s; a full run "
                  f"computes {micro_batches:,} of them a step: {real * micro_batches / 3600:.1f} h")


if __name__ == "__main__":
    main()
