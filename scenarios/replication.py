"""Replication factor (PopTorch's batching guide, listing 4.3), as a PopTorch user writes it.

Trains the guide's ExampleModelWithLoss with 100 device iterations of batch
size 2 on 4 replicas, then compares 1, 2 and 4 replicas with synthetic and
with real data. Replicas multiply the samples each call processes; with
real data they also share the host link, so they scale less than with
synthetic data (the data-loading tutorial's lesson, "Efficient data loading with PopTorch").
"""
import argparse
import sys

import poptorch

from guide_examples import ExampleDataset, add_loop_arguments, run_guide_loop


def train(dataset, replicas, device_iterations, synthetic, max_steps, verbose):
    """The guide's loop for one replica count; the simulated figures."""
    # Create a poptorch.Options instance to override default options
    opts = poptorch.Options()

    # Run a `device_iterations` loop on the IPU, fetching a new batch each time
    opts.deviceIterations(device_iterations)

    # Duplicate the model over `replicas` replicas.
    opts.replicationFactor(replicas)
    if synthetic:
        opts.enableSyntheticData(True)
    opts.modelName(f"replication_r{replicas}_{'synthetic' if synthetic else 'real'}")

    poptorch_model, training_data, calls, loss = run_guide_loop(opts, dataset, max_steps,
                                                                verbose)

    summary = poptorch_model.timeline.summary()
    print(f"replicationFactor({replicas}), {'synthetic' if synthetic else 'real'} data: "
          f"{calls} calls of {training_data.combinedBatchSize} samples, "
          f"loss per replica {[round(float(x), 4) for x in loss.reshape(-1)]}")
    poptorch_model.destroy()
    summary["call(us)"] = summary["duration(ms)"] * 1e3 / calls
    return summary


def print_table(results, replica_counts):
    print("\nReplication (simulated, batch size 2):")
    print(f"{'replicas':>8}{'data':>11}{'items/s':>12}{'speed-up':>10}{'call (us)':>11}"
          f"{'host I/O':>10}{'sync wait':>11}")
    for (replicas, synthetic), summary in results.items():
        base = results[(replica_counts[0], synthetic)]["throughput(items/s)"]
        rate = summary["throughput(items/s)"]
        print(f"{replicas:>8}{'synthetic' if synthetic else 'real':>11}{rate:>12.0f}"
              f"{rate / base:>9.2f}x{summary['call(us)']:>11.1f}"
              f"{summary['host_io_share']:>10.1%}{summary['sync_wait_share']:>11.1%}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2, 4],
                        help="replication factors to compare (1 2 4)")
    parser.add_argument("--device-iterations", type=int, default=100,
                        help="device iterations (100, as in the guide)")
    add_loop_arguments(parser, samples=100000)
    args = parser.parse_args()
    if not poptorch.ipuHardwareIsAvailable(max(args.replicas)):
        print(f"{max(args.replicas)} IPUs are needed for {max(args.replicas)} replicas")
        sys.exit(0)

    dataset = ExampleDataset(shape=[3, 2], length=args.samples)
    results = {}
    for synthetic in (True, False):
        for replicas in args.replicas:
            summary = train(dataset, replicas, args.device_iterations, synthetic,
                            args.max_steps, args.verbose)
            results[(replicas, synthetic)] = summary
    print_table(results, args.replicas)


if __name__ == "__main__":
    main()
