"""A shim training call against plain torch doing the same work, over MLP widths.

The shim runs every micro-batch with real torch compute and then advances
the simulated IPU system; this measures what that costs on top of plain
torch forward + backward + optimizer step (SGD with momentum) over the same
micro-batches (with ``--gradient-accumulation N`` a weight update every N
micro-batches, their gradients added up as PopTorch's Mean reduction does; a
call holds device iterations x N micro-batches). For each MLP width (64, 256
and 1024 by default) both sides start from the same initial weights (the
plain model loads the shim model's state before wrapping), get one untimed
warm-up call each, then run pairs of calls, one of each side in alternating
order, torch on one thread (``torch.set_num_threads(1)``) so the two sides do
not compete for cores.

Units: milliseconds per call (one call = all the micro-batches of one
step, device iterations x gradient accumulation), of the process's CPU time by default
(``--clock cpu``: other processes on a shared machine barely move it) or of
wall time (``--clock wall``). Each width runs ``--repeats`` pairs, by
default as many as fit ``--seconds`` of plain torch (15 at least). Per
width it prints both sides, the ratio shim / plain torch and the shim's
fixed cost per call (shim ms minus plain ms within a pair), each as median
[interquartile range] over the pairs, and the largest weight difference
between the two models at the end (the same work gives the same weights);
last, the Python function calls (builtins included, as cProfile counts
them) one shim call makes beyond plain torch's: a count the machine's load
does not move.
Goals: a fixed cost below 0.3 ms, a ratio <= 1.10 at width 64 and <= 1.03
at width 1024. Prints only; asserts nothing.
"""
from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import time

import torch

import poptorch_shim as poptorch


class Mlp(torch.nn.Module):
    """784 -> width -> width -> 10 with ReLUs, returning (logits, cross-entropy loss)."""

    def __init__(self, width: int):
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Linear(784, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
            torch.nn.ReLU(), torch.nn.Linear(width, 10))
        self.loss = torch.nn.CrossEntropyLoss()

    def forward(self, x, target):
        out = self.body(x)
        return out, self.loss(out, target)


def spread(values: list[float], fmt: str = ".3f") -> str:
    """``median [first quartile-third quartile]`` of ``values``, each formatted with ``fmt``."""
    q1, median, q3 = statistics.quantiles(values, n=4)
    return f"{median:{fmt}} [{q1:{fmt}}-{q3:{fmt}}]"


CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}


def elapsed(call, clock) -> float:
    """Seconds of one ``call()`` on ``clock``."""
    start = clock()
    call()
    return clock() - start


def python_calls(call, calls: int = 3) -> float:
    """Python function calls (builtins included) per ``call()``, counted by cProfile."""
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(calls):
        call()
    profile.disable()
    return pstats.Stats(profile).total_calls / calls


def max_weight_difference(a: torch.nn.Module, b: torch.nn.Module) -> float:
    """The largest absolute difference between corresponding parameters of ``a`` and ``b``."""
    return max((pa - pb).abs().max().item()
               for pa, pb in zip(a.parameters(), b.parameters()))


def measure_width(width: int, x: torch.Tensor, y: torch.Tensor, micro_batch: int,
                  device_iterations: int, accumulation: int, repeats: int | None,
                  seconds: float, clock) -> dict[str, list[float] | float]:
    """Paired seconds of the shim call and the plain torch step at ``width``:
    ``repeats`` pairs, or as many as fit ``seconds`` of plain torch."""
    torch.manual_seed(width)
    shim_model, plain_model = Mlp(width), Mlp(width)
    plain_model.load_state_dict(shim_model.state_dict())  # the same initial weights
    opts = poptorch.Options().deviceIterations(device_iterations)
    opts.Training.gradientAccumulation(accumulation)
    shim = poptorch.trainingModel(shim_model, opts,
                                  torch.optim.SGD(shim_model.parameters(), lr=0.01, momentum=0.9))
    optimizer = torch.optim.SGD(plain_model.parameters(), lr=0.01, momentum=0.9)
    shim.compile(x, y)
    update = micro_batch * accumulation  # samples per weight update
    scale = 1.0 / accumulation           # PopTorch's Mean reduction over the accumulation

    def plain_step() -> None:
        """Forward and backward on each micro-batch, the gradients of each
        accumulation's micro-batches added up (scaled by the Mean reduction), an
        optimizer step after each: what the shim does."""
        for start in range(0, len(x), update):
            optimizer.zero_grad()
            for i in range(start, start + update, micro_batch):
                _, loss = plain_model(x[i:i + micro_batch], y[i:i + micro_batch])
                loss.backward(None if scale == 1.0 else torch.full_like(loss, scale))
            optimizer.step()

    def shim_step() -> None:
        """One shim training call over the same micro-batches."""
        shim(x, y)

    warm_up = elapsed(plain_step, clock)  # one call each: both models stay in step
    shim_step()
    repeats = repeats or max(15, int(seconds / max(warm_up, 1e-6)))
    plain_times, shim_times = [], []
    for repeat in range(repeats):
        if repeat % 2:  # alternate which side goes first
            shim_times.append(elapsed(shim_step, clock))
            plain_times.append(elapsed(plain_step, clock))
        else:
            plain_times.append(elapsed(plain_step, clock))
            shim_times.append(elapsed(shim_step, clock))
    extra_calls = python_calls(shim_step) - python_calls(plain_step)
    return {"plain": plain_times, "shim": shim_times, "extra_calls": extra_calls,
            "weight_diff": max_weight_difference(shim_model, plain_model)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--micro-batch", type=int, default=32)
    parser.add_argument("--device-iterations", type=int, default=16)
    parser.add_argument("--gradient-accumulation", type=int, default=1,
                        help="micro-batches per weight update (a call holds device "
                             "iterations x this many)")
    parser.add_argument("--repeats", type=int, default=None,
                        help="pairs of calls per width (default: as many as fit --seconds)")
    parser.add_argument("--seconds", type=float, default=8.0,
                        help="plain torch seconds per width when --repeats is not given")
    parser.add_argument("--clock", choices=sorted(CLOCKS), default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    micro_batches = args.device_iterations * args.gradient_accumulation
    n = args.micro_batch * micro_batches
    x, y = torch.randn(n, 784), torch.randint(0, 10, (n,))

    print(f"one call: {micro_batches} micro-batches x {args.micro_batch} samples of an "
          f"MLP 784-W-W-10 ({args.device_iterations} device iterations x gradient "
          f"accumulation {args.gradient_accumulation}), SGD momentum; "
          f"torch threads: {torch.get_num_threads()}; "
          f"{args.clock} time; median [interquartile range] over pairs of calls")
    print(f"{'width':>6}{'pairs':>7}  {'plain torch ms/call':<24}{'shim ms/call':<24}"
          f"{'ratio shim/plain':<22}{'fixed cost ms/call':<24}{'max |dw|':>9}"
          f"{'extra Python calls':>20}")
    for width in args.widths:
        result = measure_width(width, x, y, args.micro_batch, args.device_iterations,
                               args.gradient_accumulation, args.repeats, args.seconds,
                               CLOCKS[args.clock])
        plain, shim = result["plain"], result["shim"]
        print(f"{width:>6}{len(plain):>7}  {spread([1e3 * t for t in plain], '.2f'):<24}"
              f"{spread([1e3 * t for t in shim], '.2f'):<24}"
              f"{spread([s / p for s, p in zip(shim, plain)]):<22}"
              f"{spread([1e3 * (s - p) for s, p in zip(shim, plain)], '.2f'):<24}"
              f"{result['weight_diff']:>9.1e}{result['extra_calls']:>20,.0f}")
    print("goals: fixed cost (shim ms - plain ms per call) < 0.3 ms; ratio <= 1.10 at width 64, "
          "<= 1.03 at width 1024")


if __name__ == "__main__":
    main()
