"""A shim training call against plain torch doing the same work.

The shim runs every micro-batch with real torch compute and then advances
the simulated IPU system; this measures what that costs on top of plain
torch forward + backward + optimizer step over the same micro-batches, in
the same process, interleaved, median of several repeats (goal: <= 1.15x).
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

import poptorch_shim as poptorch


class Mlp(torch.nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Linear(784, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
            torch.nn.ReLU(), torch.nn.Linear(width, 10))
        self.loss = torch.nn.CrossEntropyLoss()

    def forward(self, x, target):
        out = self.body(x)
        return out, self.loss(out, target)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--micro-batch", type=int, default=32)
    parser.add_argument("--device-iterations", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    torch.manual_seed(0)
    n = args.micro_batch * args.device_iterations
    x, y = torch.randn(n, 784), torch.randint(0, 10, (n,))

    shim_model, plain_model = Mlp(args.width), Mlp(args.width)
    opts = poptorch.Options().deviceIterations(args.device_iterations)
    shim = poptorch.trainingModel(shim_model, opts,
                                  torch.optim.SGD(shim_model.parameters(), lr=0.01, momentum=0.9))
    optimizer = torch.optim.SGD(plain_model.parameters(), lr=0.01, momentum=0.9)
    shim.compile(x, y)

    def plain_step() -> None:
        for i in range(0, n, args.micro_batch):
            optimizer.zero_grad()
            _, loss = plain_model(x[i:i + args.micro_batch], y[i:i + args.micro_batch])
            loss.backward()
            optimizer.step()

    shim_times, plain_times = [], []
    for _ in range(args.repeats):
        start = time.perf_counter()
        plain_step()
        plain_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        shim(x, y)
        shim_times.append(time.perf_counter() - start)
    plain, ours = statistics.median(plain_times), statistics.median(shim_times)
    print(f"micro-batches per call: {args.device_iterations} x {args.micro_batch} samples, "
          f"MLP width {args.width}")
    print(f"plain torch step: {plain * 1e3:8.1f} ms (median of {args.repeats})")
    print(f"shim step:        {ours * 1e3:8.1f} ms (real compute + simulated IPU step)")
    print(f"ratio shim / plain torch: {ours / plain:.3f} (goal <= 1.15)")


if __name__ == "__main__":
    main()
