"""BERT-Large phase-1 pretraining on a Bow Pod16, as Graphcore ran it, timing-only.

The configuration is ``pretrain_large_128`` of graphcore/examples
(nlp/bert/pytorch/configs_pretraining.yml): sequence length 128, 4 replicas of
a 4-IPU pipeline with the embedding and the heads on IPU 0 and 3, 7, 7, 7
encoder layers on IPUs 0-3, micro-batch 8, gradient accumulation 2048, a
recomputation checkpoint after every layer, LAMB with its state off chip and
sharded across replicas, fp16 with fp16 partials. Run it with ``python -m
poptorch_shim scenarios/bert_large.py`` (``--reduced`` for a small model).

It runs timing-only (``opts.Simulation.timingOnly``): the model is measured
once on fake tensors and every micro-batch is simulated, so a step takes
seconds where computing it on a CPU would take days.
"""
import argparse
import time

import torch

import poptorch
from scenarios.models import bert_large, synthetic_bert_batch

# Graphcore's published throughput on a Bow Pod16 (performance-results pages):
# held out to judge the simulator by, never fitted to.
PUBLISHED = {"PyTorch, packed sequences, SDK 3.3": 5600, "PopART, before SDK 2.5": 5179,
             "TensorFlow 2, SDK 3.3": 4527}

# (hidden, layers, heads, intermediate, vocab, layout) of each size.
SIZES = {"large": (1024, 24, 16, 4096, 30528, (3, 7, 7, 7)),
         "reduced": (128, 4, 4, 256, 1024, (1, 1, 1, 1))}


def options(replicas: int = 4, gradient_accumulation: int = 2048) -> poptorch.Options:
    """Graphcore's phase-1 options for a Bow Pod16."""
    opts = poptorch.Options()
    opts.Simulation.system("bow", 16)
    opts.Simulation.timingOnly(True)
    opts.replicationFactor(replicas)
    opts.deviceIterations(1)
    opts.Training.gradientAccumulation(gradient_accumulation)
    opts.Training.accumulationAndReplicationReductionType(poptorch.ReductionType.Mean)
    opts.setExecutionStrategy(poptorch.PipelinedExecution(poptorch.AutoStage.AutoIncrement))
    opts._Popart.set("autoRecomputation", int(poptorch.RecomputationType.Pipeline))
    opts.Precision.setPartialsType(torch.half)
    opts.TensorLocations.setOptimizerLocation(
        poptorch.TensorLocationSettings().useOnChipStorage(False)
        .useReplicatedTensorSharding(True))
    opts.outputMode(poptorch.OutputMode.Final)
    return opts


def build(size: str = "large") -> torch.nn.Module:
    """The model in fp16, its layers placed on four IPUs, a checkpoint after each layer."""
    hidden, layers, heads, intermediate, vocab, layout = SIZES[size]
    return bert_large(vocab_size=vocab, hidden=hidden, layers=layers, heads=heads,
                      intermediate=intermediate, ipu_layout=layout,
                      recompute_checkpoint=True).half()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="large")
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--gradient-accumulation", type=int, default=2048)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--sequence-length", type=int, default=128)
    parser.add_argument("--steps", type=int, default=1)
    args = parser.parse_args()

    start = time.perf_counter()
    model = build(args.size)
    optimizer = poptorch.optim.LAMB(model.parameters(), lr=0.006, weight_decay=0.01)
    training = poptorch.trainingModel(
        model, options(args.replicas, args.gradient_accumulation), optimizer)
    samples = args.micro_batch * args.replicas * args.gradient_accumulation
    batch = synthetic_bert_batch(samples, args.sequence_length, SIZES[args.size][4])
    built = time.perf_counter()
    training.compile(*batch)
    measured = time.perf_counter()
    for _ in range(args.steps):
        training(*batch)
    simulated = time.perf_counter()

    timeline = training.timeline
    step_ms = timeline.duration_ps / args.steps / 1e9
    print(f"BERT-{args.size} phase 1 (seq {args.sequence_length}), {args.replicas} replicas x "
          f"{timeline.num_ipus // args.replicas} IPUs, micro-batch {args.micro_batch}, "
          f"gradient accumulation {args.gradient_accumulation}, Bow, timing-only")
    print(f"throughput: {timeline.throughput():.0f} sequences/s (simulated)")
    print(f"step time: {step_ms:.1f} ms (simulated)")
    if args.size == "large" and (args.replicas, args.micro_batch) == (4, 8):
        for source, rate in PUBLISHED.items():
            print(f"  Graphcore published {rate} sequences/s ({source}): simulated "
                  f"{100 * (timeline.throughput() / rate - 1):+.0f}%")
    print(f"wall time: build {built - start:.1f} s, measure {measured - built:.1f} s, "
          f"simulate {simulated - measured:.1f} s for {args.steps} step(s)")
    print("\nPer IPU (replica 0):")
    table = timeline.per_ipu().head(timeline.num_ipus // args.replicas)
    print(table.round(3).to_string())
    training.destroy()


if __name__ == "__main__":
    main()
