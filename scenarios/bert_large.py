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
import time

import torch

import poptorch
from scenarios.models import bert_large, synthetic_bert_batch
from scenarios.pod_report import arguments, bow_pod16_options, run_and_report

# Graphcore's published throughput on a Bow Pod16 (performance-results pages):
# held out to judge the simulator by, never fitted to.
PUBLISHED = {"PyTorch, packed sequences, SDK 3.3": 5600, "PopART, before SDK 2.5": 5179,
             "TensorFlow 2, SDK 3.3": 4527}

# (hidden, layers, heads, intermediate, vocab, layout) of each size.
SIZES = {"large": (1024, 24, 16, 4096, 30528, (3, 7, 7, 7)),
         "reduced": (128, 4, 4, 256, 1024, (1, 1, 1, 1))}


def options(replicas: int = 4, gradient_accumulation: int = 2048) -> poptorch.Options:
    """Graphcore's phase-1 options for a Bow Pod16, or the Pod (16 or more
    IPUs) that ``replicas`` four-IPU replicas fill."""
    opts = bow_pod16_options(replicas, gradient_accumulation, max(16, 4 * replicas))
    opts.Training.accumulationAndReplicationReductionType(poptorch.ReductionType.Mean)
    opts.setExecutionStrategy(poptorch.PipelinedExecution(poptorch.AutoStage.AutoIncrement))
    opts._Popart.set("autoRecomputation", int(poptorch.RecomputationType.Pipeline))
    opts.TensorLocations.setOptimizerLocation(
        poptorch.TensorLocationSettings().useOnChipStorage(False)
        .useReplicatedTensorSharding(True))
    return opts


def build(size: str = "large", ipu_layout: tuple[int, ...] | None = None) -> torch.nn.Module:
    """The model in fp16, its layers placed on the IPUs (Graphcore's four by
    default, else ``ipu_layout`` layers on each), a checkpoint after each layer."""
    hidden, layers, heads, intermediate, vocab, layout = SIZES[size]
    return bert_large(vocab_size=vocab, hidden=hidden, layers=layers, heads=heads,
                      intermediate=intermediate, ipu_layout=tuple(ipu_layout or layout),
                      recompute_checkpoint=True).half()


def sweep_case(size: str = "large", ipu_layout: list[int] | None = None,
               micro_batch: int = 8, sequence_length: int = 128):
    """What ``ipusim sweep`` measures: the model, one micro-batch, Graphcore's
    options and LAMB (see ``scenarios/sweeps/bert_large.toml``)."""
    model = build(size, ipu_layout)
    optimizer = poptorch.optim.LAMB(model.parameters(), lr=0.006, weight_decay=0.01)
    batch = synthetic_bert_batch(micro_batch, sequence_length, SIZES[size][4])
    return model, batch, options(), optimizer


def main() -> None:
    parser = arguments(__doc__.splitlines()[0], SIZES, "large", replicas=4,
                       gradient_accumulation=2048, micro_batch=8)
    parser.add_argument("--sequence-length", type=int, default=128)
    args = parser.parse_args()

    start = time.perf_counter()
    model = build(args.size)
    optimizer = poptorch.optim.LAMB(model.parameters(), lr=0.006, weight_decay=0.01)
    training = poptorch.trainingModel(
        model, options(args.replicas, args.gradient_accumulation), optimizer)
    samples = args.micro_batch * args.replicas * args.gradient_accumulation
    batch = synthetic_bert_batch(samples, args.sequence_length, SIZES[args.size][4])
    graphcore = args.size == "large" and (args.replicas, args.micro_batch) == (4, 8)
    run_and_report(
        training, batch, args.steps,
        f"BERT-{args.size} phase 1 (seq {args.sequence_length}), {args.replicas} replicas x 4 "
        f"IPUs, micro-batch {args.micro_batch}, gradient accumulation "
        f"{args.gradient_accumulation}, Bow, timing-only",
        "sequences", PUBLISHED if graphcore else {}, time.perf_counter() - start)

if __name__ == "__main__":
    main()
