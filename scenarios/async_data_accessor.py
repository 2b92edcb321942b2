"""AsynchronousDataAccessor (the batching guide, listing 4.1): is the loader the bottleneck?

Feeds the guide's ExampleModelWithLoss, as an inference model, from a
poptorch.DataLoader wrapped in an AsynchronousDataAccessor, for a few batch
sizes and device-iteration counts. The loader really runs, so its items/s
is measured on the wall clock (from the first item on, so the worker's
start-up is not counted); the IPU's items/s comes from the simulated
timeline. Whichever is lower sets the pace: when the loader is slower the
IPUs would wait for data ("Efficient data loading with PopTorch").
"""
import argparse
import time

import poptorch

from guide_examples import ExampleDataset, ExampleModelWithLoss


def loader_throughput(loader, combined_batch_size):
    """Items/s the accessor delivers over one epoch, timed from its first item."""
    steps, start = 0, None
    for _ in loader:
        if start is None:
            start = time.perf_counter()
        steps += 1
    if steps < 2:
        raise ValueError(f"--samples: the dataset holds {steps} step(s) of data, but timing the "
                         "loader needs at least 2; raise --samples or lower --batch-size / "
                         "--device-iterations")
    return (steps - 1) * combined_batch_size / (time.perf_counter() - start)


def run(dataset, batch_size, device_iterations, replication_factor, num_workers, max_steps):
    """Listing 4.1 for one configuration: the loader's and the IPU's items/s."""
    opts = poptorch.Options()
    opts.deviceIterations(device_iterations)
    opts.replicationFactor(replication_factor)
    name = f"async_bs{batch_size}_di{device_iterations}_r{replication_factor}"
    opts.modelName(name)

    data = poptorch.DataLoader(opts,
                               dataset,
                               batch_size=batch_size,
                               num_workers=num_workers)

    loader = poptorch.AsynchronousDataAccessor(data)
    loader_rate = loader_throughput(loader, data.combinedBatchSize)

    # ipusim extension: tell the profile what the real loader delivers, so
    # the report's bottleneck verdict weighs it against the simulated IPUs.
    model_opts = opts.clone()
    model_opts.Simulation.loaderRate(loader_rate)
    model = ExampleModelWithLoss(data_shape=[3, 2], num_classes=2)
    poptorch_model = poptorch.inferenceModel(model, model_opts)

    for it, (data, _) in enumerate(loader):
        out = poptorch_model(data)
        if it + 1 == max_steps:
            break
    loader.terminate()

    ipu_rate = poptorch_model.timeline.summary()["throughput(items/s)"]
    bottleneck = "loader" if loader_rate < ipu_rate else "IPU"
    print(f"{name}: loader {loader_rate:.0f} items/s (measured), IPU {ipu_rate:.0f} items/s "
          f"(simulated), output {tuple(out.shape)}: the {bottleneck} sets the pace")
    poptorch_model.destroy()
    return {"batch_size": batch_size, "device_iterations": device_iterations,
            "loader": loader_rate, "ipu": ipu_rate, "bottleneck": bottleneck}


def print_table(rows, replication_factor):
    print(f"\nData loader against the simulated IPUs ({replication_factor} replica(s)):")
    print(f"{'batch size':>10}{'deviceIterations':>18}{'loader items/s':>16}"
          f"{'IPU items/s':>13}{'bottleneck':>12}{'IPU idle':>10}")
    for row in rows:
        idle = max(0.0, 1 - row["loader"] / row["ipu"])
        print(f"{row['batch_size']:>10}{row['device_iterations']:>18}{row['loader']:>16.0f}"
              f"{row['ipu']:>13.0f}{row['bottleneck']:>12}{idle:>10.0%}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, nargs="+", default=[1, 16],
                        help="batch sizes to compare (1 16)")
    parser.add_argument("--device-iterations", type=int, nargs="+", default=[1, 100],
                        help="device-iteration counts to compare (1 100)")
    parser.add_argument("--replicas", type=int, default=1, help="replication factor (1)")
    parser.add_argument("--workers", type=int, default=0,
                        help="DataLoader worker processes (0, as in the guide)")
    parser.add_argument("--samples", type=int, default=20000, help="ExampleDataset length (20,000)")
    parser.add_argument("--max-steps", type=int, default=None,
                        help="cap the calls to the model per case (default: one epoch)")
    args = parser.parse_args()

    dataset = ExampleDataset(shape=[3, 2], length=args.samples)
    rows = [run(dataset, batch_size, device_iterations, args.replicas, args.workers,
                args.max_steps)
            for batch_size in args.batch_size for device_iterations in args.device_iterations]
    print_table(rows, args.replicas)


if __name__ == "__main__":
    main()
