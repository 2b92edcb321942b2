"""Sync patterns (PopART's performance notes): one pipeline, Full, SinglePipeline, ReplicaAndLadder.

Trains a four-block model pipelined over four IPUs (one stage each) on real
data, once per sync pattern set with ``opts.syncPattern(...)``. Host I/O
syncs the IPUs of a GS1 group: under Full that is every IPU, so each input
copy to IPU 0 stalls the whole pipeline; under SinglePipeline IPU 0 meets the
host on its own while the others compute; under ReplicaAndLadder IPUs 0 and
2 meet it together while 1 and 3 compute. The table shows throughput, the
share of time in host I/O and waiting in syncs, and who waits.

``--strategy parallel-phased`` runs the blocks as four phases alternating
between IPUs 0 and 1 instead (ParallelPhasedExecution, the ping-pong that
ReplicaAndLadder is made for): each IPU streams the next phase's weights in
while the other computes, unless a Full sync makes the computing IPU's host
transfers wait for it.
"""
import argparse

import torch
import torch.nn as nn

import poptorch

PATTERNS = ("Full", "SinglePipeline", "ReplicaAndLadder")


class Network(nn.Module):
    """A 32x32 RGB image classifier in four blocks, one per IPU.

    The first block, which receives the images from the host, is the lightest,
    so the other IPUs have compute to overlap with its host I/O.
    """

    def __init__(self, width):
        super().__init__()
        self.pool = nn.AvgPool2d(2)
        self.layer1 = nn.Linear(3 * 16 * 16, 128)
        self.layer2a = nn.Linear(128, width)
        self.layer2b = nn.Linear(width, width)
        self.layer3 = nn.Linear(width, width)
        self.layer4a = nn.Linear(width, width)
        self.layer4b = nn.Linear(width, 10)
        self.relu = nn.ReLU()
        self.loss = nn.CrossEntropyLoss()

    def forward(self, x, labels=None):
        with poptorch.Block("B1"):
            x = self.relu(self.layer1(self.pool(x).flatten(start_dim=1)))
        with poptorch.Block("B2"):
            x = self.relu(self.layer2b(self.relu(self.layer2a(x))))
        with poptorch.Block("B3"):
            x = self.relu(self.layer3(x))
        with poptorch.Block("B4"):
            x = self.layer4b(self.relu(self.layer4a(x)))
            if labels is None:
                return x
            return x, self.loss(x, labels)


def train(dataset, pattern, args):
    """One training run under ``pattern``; its simulated figures."""
    opts = poptorch.Options()
    opts.deviceIterations(args.device_iterations)
    opts.replicationFactor(args.replicas)
    opts.Training.gradientAccumulation(args.gradient_accumulation)
    if args.strategy == "parallel-phased":
        # Phase n on IPU n % 2, the default placement of parallel phases.
        strategy = poptorch.ParallelPhasedExecution("B1", "B2", "B3", "B4")
        name = f"sync_{pattern}_parallel_phased"
    else:
        strategy = poptorch.PipelinedExecution("B1", "B2", "B3", "B4")
        for ipu, block in enumerate(("B1", "B2", "B3", "B4")):
            strategy.stage(block).ipu(ipu)
        name = f"sync_{pattern}"
    opts.setExecutionStrategy(strategy)
    opts.syncPattern(getattr(poptorch.SyncPattern, pattern))
    opts.modelName(name)

    training_data = poptorch.DataLoader(opts, dataset, batch_size=args.batch_size,
                                        shuffle=True, drop_last=True)
    model = Network(args.width)
    training_model = poptorch.trainingModel(
        model, opts, poptorch.optim.SGD(model.parameters(), lr=0.01))
    for step, (images, labels) in enumerate(training_data):
        _, loss = training_model(images, labels)
        if step + 1 == args.max_steps:
            break

    summary = training_model.timeline.summary()
    per_ipu = training_model.timeline.per_ipu()
    print(f"SyncPattern.{pattern}: {step + 1} calls, loss {float(loss.mean()):.4f}")
    training_model.destroy()
    return summary, per_ipu["sync_wait_share"].tolist()


def print_table(results, strategy):
    full = results["Full"][0]["throughput(items/s)"]
    print(f"\nSync patterns, the same {strategy} training (simulated):")
    print(f"{'pattern':<18}{'items/s':>10}{'vs Full':>9}{'host I/O':>10}{'sync wait':>11}"
          f"{'bubble':>8}  sync wait per IPU")
    for pattern, (summary, waits) in results.items():
        rate = summary["throughput(items/s)"]
        per_ipu = " ".join(f"{w:4.0%}" for w in waits)
        print(f"{pattern:<18}{rate:>10.0f}{rate / full:>8.2f}x{summary['host_io_share']:>10.1%}"
              f"{summary['sync_wait_share']:>11.1%}{summary['bubble_fraction']:>8.1%}  {per_ipu}")
    slowest = min(results, key=lambda p: results[p][0]["throughput(items/s)"])
    print(f"Slowest: {slowest}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--patterns", nargs="+", choices=PATTERNS, default=list(PATTERNS),
                        help="sync patterns to compare (all three)")
    parser.add_argument("--strategy", choices=["pipelined", "parallel-phased"],
                        default="pipelined", help="how the four blocks run (pipelined)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--gradient-accumulation", type=int, default=16,
                        help="micro-batches per weight update (16; at least 7 for 4 stages)")
    parser.add_argument("--device-iterations", type=int, default=1)
    parser.add_argument("--replicas", type=int, default=1,
                        help="replicas of the 4-IPU pipeline (1)")
    parser.add_argument("--width", type=int, default=512, help="hidden layer width (512)")
    parser.add_argument("--samples", type=int, default=2048)
    parser.add_argument("--max-steps", type=int, default=None,
                        help="cap the calls to the model per pattern (default: one epoch)")
    args = parser.parse_args()
    if "Full" not in args.patterns:
        parser.error("--patterns must include Full, the pattern the others are compared with")

    generator = torch.Generator().manual_seed(0)
    images = torch.rand(args.samples, 3, 32, 32, generator=generator)
    labels = torch.randint(0, 10, (args.samples,), generator=generator)
    dataset = torch.utils.data.TensorDataset(images, labels)

    results = {pattern: train(dataset, pattern, args) for pattern in args.patterns}
    print_table(results, args.strategy)


if __name__ == "__main__":
    main()
