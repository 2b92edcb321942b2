"""Benchmark of poptorch_shim's asynchronous data loading, in items/s and wall seconds.

(a) Cold start: the data-loading tutorial's dataset (10,000 random 1x128x128
    float32 images, batch 16, 50 device iterations: 800 images a step) read
    by ``poptorch.DataLoader`` in ``DataLoaderMode.Async`` (its default
    async options) and by ``torch.utils.data.DataLoader`` with the same
    combined batch, shuffling and number of workers. Both sides are timed
    from constructing the loader (the shim's worker process, which pickles
    the dataset and loads the first item, torch's iterator and its workers)
    to the end of the first epoch, so the asynchronous loader gets no head
    start: no pause before the run, no ring filled before the clock starts.
    Units: wall seconds and items/s of that first epoch.
(b) Steady state: the same loaders go on, with no pause, for epochs 2..N
    after that warm-up epoch; items/s over those epochs. The asynchronous
    loader prefetches across epoch boundaries (``load_indefinitely``), torch's
    loader keeps its workers (``persistent_workers``) but starts each epoch
    when it is asked for. Goal: the asynchronous loader delivers at least
    0.9x torch's items/s.
    For (a) and (b) each run builds a fresh loader and shuts its workers
    down before the other side runs; the two sides alternate which goes
    first, and every figure is median (min-max) over the runs. The loop only
    fetches the batches, as the tutorial measures, or with ``--touch`` reads
    each one, as a model does.
(c) Hiding load behind compute: a dataset that takes ``load`` ms per item
    read through an ``AsynchronousDataAccessor`` by a consumer that spends
    ``compute`` ms per item. The loop is timed from the first ``iter()``,
    after the accessor's construction (worker start-up and the first item,
    which sizes the ring; no early preload), whose wall seconds are printed
    beside it: (a) is where start-up is charged. Loading hides behind
    computing when the loop takes ``steps x max(load, compute)``, not
    ``steps x (load + compute)``. Goal: within 10% of that bound.

Prints its figures; wall times vary with the machine, so nothing is
asserted. Run ``python benchmarks/bench_async_loader.py --help`` for the
sizes; the defaults finish in a few minutes on two cores.
"""
import argparse
import statistics
import time

import torch

from poptorch_shim import AsynchronousDataAccessor, DataLoader
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


def spread(values, fmt: str = ".0f") -> str:
    """``median (min-max)`` of ``values``, each formatted with ``fmt``."""
    return (f"{statistics.median(values):{fmt}} "
            f"({min(values):{fmt}}-{max(values):{fmt}})")


def one_epoch(loader, touch: bool) -> int:
    """Iterate ``loader`` once; with ``touch`` read every batch, as a model
    would. Returns the number of batches."""
    steps = 0
    for data, _ in loader:
        if touch:
            data.sum()
        steps += 1
    return steps


def make_loader(name: str, dataset, args):
    """A fresh loader: ``torch`` (combined batch, persistent workers) or
    ``async`` (the shim's DataLoader in Async mode, default async options)."""
    if name == "torch":
        return torch.utils.data.DataLoader(
            dataset, batch_size=args.batch_size * args.device_iterations, shuffle=True,
            drop_last=True, num_workers=args.num_workers,
            persistent_workers=args.num_workers > 0)
    options = Options().deviceIterations(args.device_iterations)
    return DataLoader(options, dataset, batch_size=args.batch_size, shuffle=True,
                      drop_last=True, num_workers=args.num_workers, mode=DataLoaderMode.Async)


def close_loader(loader) -> None:
    """Stop the workers of ``loader`` so that nothing of it runs during the next measurement."""
    if isinstance(loader, DataLoader):
        loader.terminate()
    iterator = getattr(loader, "_iterator", None)
    if iterator is not None and hasattr(iterator, "_shutdown_workers"):
        iterator._shutdown_workers()  # torch's persistent workers


def cold_and_steady(name: str, dataset, args, combined: int) -> tuple[float, float]:
    """(seconds from constructing the loader to the end of epoch 1, items/s over
    epochs 2..N) of one fresh loader, which is shut down before returning."""
    started = time.perf_counter()
    loader = make_loader(name, dataset, args)
    one_epoch(loader, args.touch)
    cold = time.perf_counter() - started
    started = time.perf_counter()
    steps = sum(one_epoch(loader, args.touch) for _ in range(args.epochs - 1))
    steady = steps * combined / (time.perf_counter() - started)
    close_loader(loader)
    return cold, steady


def throughput(args) -> None:
    """Print (a) the cold first epoch and (b) the steady-state items/s of both loaders."""
    what = ("the loop reads each batch, as a model would" if args.touch
            else "the loop only fetches the batches, as the tutorial measures")
    print(f"{args.samples} x 1x128x128 float32, batch {args.batch_size} x "
          f"{args.device_iterations} device iterations, {args.num_workers} workers; {what}; "
          f"median (min-max) of {args.repeats} runs of each loader, alternating which goes first")
    torch.manual_seed(0)
    features = torch.randn(args.samples, 1, 128, 128)
    labels = torch.randint(0, 10, (args.samples,))
    dataset = torch.utils.data.TensorDataset(features, labels)
    combined = args.batch_size * args.device_iterations
    epoch_items = args.samples // combined * combined
    cold = {"torch": [], "async": []}
    steady = {"torch": [], "async": []}
    for repeat in range(args.repeats):
        for name in (("torch", "async") if repeat % 2 == 0 else ("async", "torch")):
            seconds, rate = cold_and_steady(name, dataset, args, combined)
            cold[name].append(seconds)
            steady[name].append(rate)
    titles = {"torch": "torch.utils.data.DataLoader:     ",
               "async": "poptorch.DataLoader (Async mode):"}
    print(f"(a) cold start: from constructing the loader to the end of epoch 1 "
          f"({epoch_items} items)")
    for name in ("torch", "async"):
        print(f"    {titles[name]} {spread(cold[name], '.2f')} s = "
              f"{spread([epoch_items / s for s in cold[name]])} items/s")
    ratios = [t / a for t, a in zip(cold["torch"], cold["async"])]
    print(f"    ratio async / torch items/s (pairs of the same repeat): {spread(ratios, '.2f')}")
    print(f"(b) steady state: items/s over epochs 2..{args.epochs} after the first")
    for name in ("torch", "async"):
        print(f"    {titles[name]} {spread(steady[name])} items/s")
    ratios = [a / t for t, a in zip(steady["torch"], steady["async"])]
    print(f"    ratio async / torch items/s (pairs of the same repeat): {spread(ratios, '.2f')}"
          "  (goal >= 0.90)")


def overlap(args) -> None:
    """Print (c): wall time of loading behind computing against steps x max(load, compute)."""
    print(f"(c) hiding load behind compute: {args.steps} items; load and compute are the measured "
          "times per item (the sleeps overshoot a little), the bound is "
          "steps x max(load, compute)")
    print("    load ms  compute ms  start-up  sync wall  async wall   bound  async/bound")
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
        started = time.perf_counter()
        accessor = AsynchronousDataAccessor(dataset, buffer_size=args.buffer_size)
        start_s = time.perf_counter() - started  # the worker's start-up, first item loaded
        started = time.perf_counter()
        for _ in accessor:
            time.sleep(compute_ms / 1000.0)
        async_wall = time.perf_counter() - started
        accessor.terminate()
        bound = max(load_s, compute_s)
        print(f"    {load_s / args.steps * 1000:7.2f}  {compute_s / args.steps * 1000:10.2f}"
              f"  {start_s:7.2f}s  {load_s + compute_s:8.2f}s  {async_wall:9.2f}s"
              f"  {bound:5.2f}s  {async_wall / bound:11.2f}")


def parse_case(text: str):
    """``"load,compute"`` in ms as a pair of floats."""
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
    parser.add_argument("--epochs", type=int, default=4,
                        help="epochs of each run: 1 cold (a), the rest steady state (b)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each loader in (a), (b)")
    parser.add_argument("--touch", action="store_true",
                        help="in (a) and (b), read each batch in the loop")
    parser.add_argument("--steps", type=int, default=100, help="items in (c)")
    parser.add_argument("--buffer-size", type=int, default=3, help="ring slots in (c)")
    parser.add_argument("--cases", type=parse_case, nargs="+",
                        default=[(20, 10), (10, 20), (15, 15)],
                        help="load,compute pairs in ms for (c)")
    parser.add_argument("--skip", choices=["throughput", "overlap"],
                        help="leave out (a) and (b) (throughput) or (c) (overlap)")
    args = parser.parse_args()
    if args.skip != "throughput":
        throughput(args)
    if args.skip != "overlap":
        overlap(args)


if __name__ == "__main__":
    main()
