"""The real models from a Bow Pod16 to a Bow Pod64, timing-only: simulated throughput.

ResNet-50 (micro-batch 18, fp16) with 16 replicas and gradient accumulation 57 on a
Pod16, 64 replicas and 14 on a Pod64; BERT-Large phase 1 (4-IPU pipelines,
micro-batch 8) with 4 replicas and gradient accumulation 2048 on a Pod16, 16
replicas and 512 on a Pod64: Graphcore's configurations, the same samples a step.
Prints each model's simulated items/s on both Pods and the ratio, beside
Graphcore's published Pod16 to Pod64 ratios (3.29 to 3.66, held out: nothing is
fitted to them). Prints only; asserts nothing.
"""
from __future__ import annotations

import sys
from pathlib import Path

from poptorch_shim.commands import install_aliases

install_aliases()
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import poptorch  # noqa: E402
from scenarios import bert_large, resnet50  # noqa: E402
from scenarios.models import synthetic_bert_batch  # noqa: E402

#: (name, scenario, optimizer, the step's samples' batch, (replicas, accumulation) by Pod).
CASES = (
    ("ResNet-50", resnet50,
     lambda params: poptorch.optim.SGD(params, lr=2.0, momentum=0.9, loss_scaling=128),
     resnet50.step_batch, 18, {16: (16, 57), 64: (64, 14)}),
    ("BERT-Large", bert_large,
     lambda params: poptorch.optim.LAMB(params, lr=0.006, weight_decay=0.01),
     synthetic_bert_batch, 8, {16: (4, 2048), 64: (16, 512)}),
)
PUBLISHED_RATIOS = (3.29, 3.66)


def throughput(scenario, optimizer, batch, micro_batch: int, replicas: int,
               accumulation: int) -> float:
    """Simulated items/s of one timing-only training step."""
    model = scenario.build()
    training = poptorch.trainingModel(model, scenario.options(replicas, accumulation),
                                      optimizer(model.parameters()))
    training(*batch(micro_batch * replicas * accumulation))
    rate = training.timeline.throughput()
    training.destroy()
    return rate


def main() -> None:
    print(f"{'model':<12}{'Pod16 items/s':>15}{'Pod64 items/s':>15}{'ratio':>8}"
          f"   published {PUBLISHED_RATIOS[0]}-{PUBLISHED_RATIOS[1]}x")
    for name, scenario, optimizer, batch, micro_batch, configs in CASES:
        rates = {pod: throughput(scenario, optimizer, batch, micro_batch, *config)
                 for pod, config in configs.items()}
        print(f"{name:<12}{rates[16]:>15,.0f}{rates[64]:>15,.0f}{rates[64] / rates[16]:>7.2f}x")


if __name__ == "__main__":
    main()
