"""ResNet-50 training on a Bow Pod16, as Graphcore ran it, timing-only.

The configuration is ``resnet50`` of graphcore/examples
(vision/cnns/pytorch/train/configs.yml): 16 replicas of one IPU each,
micro-batch 18, gradient accumulation 57, fp16 weights and activations with
fp16 partials, SGD with momentum, 8-bit images normalised on the IPU, and
recomputation checkpoints at the residual additions. Run it with ``python -m
poptorch_shim scenarios/resnet50.py`` (``--size reduced`` for a small model).

It runs timing-only (``opts.Simulation.timingOnly``): the model is measured
once on fake tensors and every micro-batch is simulated, so a step takes
seconds where computing it on a CPU would take an hour.
"""
import time

import torch
from torch import nn

import poptorch
from scenarios.models import Bottleneck, resnet50
from scenarios.pod_report import arguments, bow_pod16_options, run_and_report

# Graphcore's published throughput on a Bow Pod16 (performance-results pages):
# held out to judge the simulator by, never fitted to.
PUBLISHED = {"TensorFlow 1, batch 1920, before SDK 2.5": 42029}

# (width, layers, image size) of each size.
SIZES = {"50": (64, (3, 4, 6, 3), 224), "reduced": (8, (1, 1, 1, 1), 32)}


class NormalisedResNet(nn.Module):
    """Takes 8-bit images, as Graphcore's input pipeline sends them, and
    normalises them on the IPU in the model's dtype."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model
        self.register_buffer("mean", torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1) * 255)
        self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1) * 255)

    def forward(self, images, labels=None):
        images = ((images.to(self.mean.dtype) - self.mean) / self.std)
        return self.model(images, labels)


def checkpoint_residuals(model: nn.Module) -> None:
    """Keep each bottleneck's output (after its residual addition) for the
    backward and recompute the rest, as Graphcore's manual recomputation does."""
    for module in model.modules():
        if isinstance(module, Bottleneck):
            module.register_forward_hook(
                lambda module, inputs, output: poptorch.recomputationCheckpoint(output))


def options(replicas: int = 16, gradient_accumulation: int = 57) -> poptorch.Options:
    """Graphcore's ResNet-50 training options for a Bow Pod16, or the Pod
    (16 or more IPUs) that ``replicas`` one-IPU replicas fill."""
    opts = bow_pod16_options(replicas, gradient_accumulation, max(16, replicas))
    opts._Popart.set("autoRecomputation", int(poptorch.RecomputationType.RecomputeAll))
    return opts


def build(size: str = "50") -> nn.Module:
    """The model in fp16, taking 8-bit images, checkpointed at its residuals."""
    width, layers, _ = SIZES[size]
    model = NormalisedResNet(resnet50(width=width, layers=layers)).half()
    checkpoint_residuals(model)
    return model


def step_batch(samples: int, size: str = "50") -> tuple[torch.Tensor, torch.Tensor]:
    """One step's batch: a timing-only run reads only its shape and dtype, so
    one image stands for all (a stride-0 view, no memory for the rest)."""
    image_size = SIZES[size][2]
    images = torch.randint(0, 256, (1, 3, image_size, image_size), dtype=torch.uint8)
    return images.expand(samples, -1, -1, -1), torch.randint(0, 1000, (samples,))


def sweep_case(size: str = "50", micro_batch: int = 18):
    """What ``ipusim sweep`` measures: the model, one micro-batch, Graphcore's
    options and SGD (see ``scenarios/sweeps/resnet50.toml``)."""
    model = build(size)
    optimizer = poptorch.optim.SGD(model.parameters(), lr=2.0, momentum=0.9, loss_scaling=128)
    return model, step_batch(micro_batch, size), options(), optimizer


def main() -> None:
    args = arguments(__doc__.splitlines()[0], SIZES, "50", replicas=16,
                     gradient_accumulation=57, micro_batch=18).parse_args()

    start = time.perf_counter()
    model = build(args.size)
    optimizer = poptorch.optim.SGD(model.parameters(), lr=2.0, momentum=0.9, loss_scaling=128)
    training = poptorch.trainingModel(
        model, options(args.replicas, args.gradient_accumulation), optimizer)
    batch = step_batch(args.micro_batch * args.replicas * args.gradient_accumulation, args.size)
    graphcore = args.size == "50" and (args.replicas, args.micro_batch) == (16, 18)
    run_and_report(
        training, batch, args.steps,
        f"ResNet-{args.size} training, {args.replicas} replicas, micro-batch {args.micro_batch}, "
        f"gradient accumulation {args.gradient_accumulation}, image {SIZES[args.size][2]}, Bow, "
        "timing-only",
        "images", PUBLISHED if graphcore else {}, time.perf_counter() - start)

if __name__ == "__main__":
    main()
