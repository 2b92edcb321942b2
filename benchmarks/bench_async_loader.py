"""Benchmark of poptorch_shim's asynchronous data loading.

(a) Throughput: the data-loading tutorial's dataset (10,000 random 1x128x128
    float32 images, batch 16, 50 device iterations: 800 images a step) read
    by ``poptorch.DataLoader`` in ``DataLoaderMode.Async`` and by
    ``torch.utils.data.DataLoader`` with the same batch and number of workers,
    in alternating runs (so both see the same machine load), median of the
    runs. The loop only fetches the batches, as the tutorial measures, or
    with ``--touch`` reads each one, as a model does. Runs span several
    epochs: the asynchronous loader prefetches across epoch boundaries
    (``load_indefinitely``), torch's loader starts each epoch afresh.
    Goal: the asynchronous loader delivers at least 0.9x torch's items/s.
(b) Overlap: a dataset that takes ``load`` ms per item read through an
    ``AsynchronousDataAccessor`` by a consumer that spends ``compute`` ms per
    item. Loading hides behind computing when the loop takes
    ``steps x max(load, compute)``, not ``steps x (load + compute)``.
    Goal: within 10% of that bound.

Prints its figures; wall times vary with the machine, so nothing is
asserted. Run ``python benchmarks/bench_async_loader.py --help`` for the
sizes; the defaults finish in about two minutes on two cores.
"""
import argparse
import statistics
import time

import torch

from poptorch_shim.async_data_accessor import AsynchronousDataAccessor
from poptorch_shim.data_loader import DataLoader
from poptorch_shim.enums import DataLoaderMode
from poptorch_shim.options import Options


class TimedDataset(torch.utils.data.Dataset):
    """Items that each take ``load_ms`` to produce (a sleep, as for I/O)."""

    def __init__(self, length: int, load_ms: float):
        self.length = length
        self.load_ms = load_ms

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(self.load_ms / 1000.0)
        return torch.full((256,), float(index))


def run_rate(loader, epochs: int, combined_batch: int, touch: bool) -> float:
    """Items/s over ``epochs`` passes; with ``touch`` the loop reads every
    batch once, as a model would."""
    steps = 0
    started = time.perf_counter()
    for _ in range(epochs):
        for data, _ in loader:
            if touch:
                data.sum()
            steps += 1
    return steps * combined_batch / (time.perf_counter() - started)


def throughput(args) -> None:
    what = ("the loop reads each batch, as a model would" if args.touch
            else "the loop only fetches the batches, as the tutorial measures")
    print(f"(a) throughput: {args.samples} x 1x128x128 float32, batch "
          f"{args.batch_size} x {args.device_iterations} device iterations, "
          f"{args.num_workers} workers; {what}; median of {args.repeats} "
          f"alternating runs of {args.epochs} epochs")
    torch.manual_seed(0)
    features = torch.randn(args.samples, 1, 128, 128)
    labels = torch.randint(0, 10, (args.samples,))
    dataset = torch.utils.data.TensorDataset(features, labels)
    options = Options().deviceIterations(args.device_iterations)
    combined = args.batch_size * args.device_iterations

    loaders = {
        "torch": torch.utils.data.DataLoader(
            dataset, batch_size=combined, shuffle=True, drop_last=True,
            num_workers=args.num_workers,
            persistent_workers=args.num_workers > 0),
        "async": DataLoader(options, dataset, batch_size=args.batch_size,
                            shuffle=True, drop_last=True,
                            num_workers=args.num_workers,
                            mode=DataLoaderMode.Async,
                            async_options={"early_preload": True}),
    }
    rates = {name: [] for name in loaders}
    for name, loader in loaders.items():
        run_rate(loader, 1, combined, args.touch)  # start the workers
    for _ in range(args.repeats):
        for name, loader in loaders.items():
            # Let the other loader finish prefetching, so that it does not
            # take CPU time from this run.
            time.sleep(args.settle)
            rates[name].append(run_rate(loader, args.epochs, combined, args.touch))
    loaders["async"].terminate()
    torch_rate = statistics.median(rates["torch"])
    async_rate = statistics.median(rates["async"])
    print(f"    torch.utils.data.DataLoader:       {torch_rate:10.0f} items/s")
    print(f"    poptorch.DataLoader (Async mode):  {async_rate:10.0f} items/s")
    print(f"    ratio async / torch: {async_rate / torch_rate:.2f}  (goal >= 0.90)")


def overlap(args) -> None:
    print(f"(b) overlap: {args.steps} items; load and compute are the measured "
          "times per item (the sleeps overshoot a little), the bound is "
          "steps x max(load, compute)")
    print("    load ms  compute ms  sync wall  async wall   bound  async/bound")
    for load_ms, compute_ms in args.cases:
        dataset = TimedDataset(args.steps, load_ms)
        load_s = compute_s = 0.0
        for _ in range(args.steps):
            started = time.perf_counter()
            dataset[0]
            load_s += time.perf_counter() - started
            started = time.perf_counter()
            time.sleep(compute_ms / 1000.0)
            compute_s += time.perf_counter() - started
        accessor = AsynchronousDataAccessor(dataset, buffer_size=args.buffer_size)
        started = time.perf_counter()
        for _ in accessor:
            time.sleep(compute_ms / 1000.0)
        async_wall = time.perf_counter() - started
        accessor.terminate()
        bound = max(load_s, compute_s)
        print(f"    {load_s / args.steps * 1000:7.2f}  {compute_s / args.steps * 1000:10.2f}"
              f"  {load_s + compute_s:8.2f}s  {async_wall:9.2f}s  {bound:5.2f}s"
              f"  {async_wall / bound:11.2f}")


def parse_case(text: str):
    load, compute = text.split(",")
    return float(load), float(compute)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=10000,
                        help="images in the throughput dataset (tutorial: 10000)")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--device-iterations", type=int, default=50)
    parser.add_argument("--num-workers", type=int, default=2,
                        help="DataLoader workers for both loaders (tutorial: 8)")
    parser.add_argument("--epochs", type=int, default=3, help="epochs of each run in (a)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each loader in (a)")
    parser.add_argument("--settle", type=float, default=1.0,
                        help="seconds of pause before each run in (a)")
    parser.add_argument("--touch", action="store_true",
                        help="in (a), read each batch in the loop")
    parser.add_argument("--steps", type=int, default=100, help="items in (b)")
    parser.add_argument("--buffer-size", type=int, default=3, help="ring slots in (b)")
    parser.add_argument("--cases", type=parse_case, nargs="+",
                        default=[(20, 10), (10, 20), (15, 15)],
                        help="load,compute pairs in ms for (b)")
    parser.add_argument("--skip", choices=["throughput", "overlap"],
                        help="leave one part out")
    args = parser.parse_args()
    if args.skip != "throughput":
        throughput(args)
    if args.skip != "overlap":
        overlap(args)


if __name__ == "__main__":
    main()
