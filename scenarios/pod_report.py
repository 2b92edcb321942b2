"""What the real-model scenarios print: a timing-only run's figures against Graphcore's.

Shared by ``resnet50.py`` and ``bert_large.py``: compile (measure on fake
tensors), run the steps (simulate), then print the simulated throughput and
step time, the published figures they are judged by, the wall time each part
took, and the per-IPU breakdown and memory of one replica.
"""
from __future__ import annotations

import argparse
import time

import torch

import poptorch


def bow_pod16_options(replicas: int, gradient_accumulation: int, num_ipus: int = 16):
    """Timing-only training on a simulated Bow Pod16 (or a Pod of ``num_ipus``:
    64 for Graphcore's Pod64 configurations), one device iteration a step, half
    partials and only the last micro-batch's outputs returned: what both of
    Graphcore's configurations share."""
    opts = poptorch.Options()
    opts.Simulation.system("bow", num_ipus)
    opts.Simulation.timingOnly(True)
    opts.replicationFactor(replicas)
    opts.deviceIterations(1)
    opts.Training.gradientAccumulation(gradient_accumulation)
    opts.Precision.setPartialsType(torch.half)
    opts.outputMode(poptorch.OutputMode.Final)
    return opts


def arguments(description: str, sizes: dict, size: str, replicas: int,
              gradient_accumulation: int, micro_batch: int) -> argparse.ArgumentParser:
    """The command line every real-model scenario takes, with Graphcore's
    configuration as the defaults."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--size", choices=sorted(sizes), default=size,
                        help=f"model size ({size}: the published one)")
    parser.add_argument("--replicas", type=int, default=replicas)
    parser.add_argument("--gradient-accumulation", type=int, default=gradient_accumulation)
    parser.add_argument("--micro-batch", type=int, default=micro_batch)
    parser.add_argument("--steps", type=int, default=1, help="training steps to simulate")
    return parser


def run_and_report(training, batch: tuple, steps: int, title: str, unit: str,
                   published: dict[str, float], build_s: float) -> None:
    """Run ``steps`` calls of ``training`` on ``batch`` and print what they simulated.

    ``published`` maps a source to its items/s (empty when the configuration
    is not the published one); ``build_s`` is the wall time spent building
    the model and its batch.
    """
    start = time.perf_counter()
    training.compile(*batch)
    measured = time.perf_counter()
    for _ in range(steps):
        training(*batch)
    simulated = time.perf_counter()

    timeline = training.timeline
    rate = timeline.throughput()
    print(title)
    print(f"throughput: {rate:.0f} {unit}/s (simulated)")
    print(f"step time: {timeline.duration_ps / steps / 1e9:.1f} ms (simulated)")
    for source, published_rate in published.items():
        print(f"  Graphcore published {published_rate:.0f} {unit}/s ({source}): simulated "
              f"{100 * (rate / published_rate - 1):+.0f}%")
    print(f"wall time: build {build_s:.1f} s, measure {measured - start:.1f} s, "
          f"simulate {simulated - measured:.1f} s for {steps} step(s)")
    ipus_per_replica = timeline.num_ipus // timeline.run.replicas
    print("\nPer IPU (replica 0):")
    print(timeline.per_ipu().head(ipus_per_replica).round(3).to_string())
    print("\nMemory per IPU (MB):")
    print((training.device.memory.drop(columns="capacity") / 1e6).round(1).to_string())
    training.destroy()
