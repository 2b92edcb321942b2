"""Gradient accumulation (PopTorch's batching guide, listing 4.4), as a PopTorch user writes it.

Trains the guide's ExampleModelWithLoss with batch size 2, 400 device
iterations and the gradients of 8 micro-batches accumulated before each
weight update, and compares it with other accumulation counts. Each call
runs deviceIterations x gradientAccumulation micro-batches but only
deviceIterations weight updates, so a larger accumulation means a larger
effective batch per update and a smaller share of the compute time spent
in weight updates ("update/compute" in the table).
"""
import argparse

import poptorch
from ipusim.engine.event_kinds import BACKWARD, FORWARD, WEIGHT_UPDATE

from guide_examples import ExampleDataset, add_loop_arguments, model_batch_size, run_guide_loop


def train(dataset, device_iterations, accumulation, max_steps, verbose):
    """The guide's loop for one accumulation count; the simulated figures."""
    # Create a poptorch.Options instance to override default options
    opts = poptorch.Options()

    # Run a `device_iterations` loop on the IPU, fetching a new batch each time
    opts.deviceIterations(device_iterations)

    # Accumulate the gradient `accumulation` times before applying it.
    opts.Training.gradientAccumulation(accumulation)
    opts.modelName(f"gradient_accumulation_{accumulation}")

    poptorch_model, training_data, calls, loss = run_guide_loop(opts, dataset, max_steps,
                                                                verbose)

    summary = poptorch_model.timeline.summary()
    events = poptorch_model.timeline.events
    updates = events[events["kind"] == WEIGHT_UPDATE]
    compute = events[events["kind"].isin([FORWARD, BACKWARD, WEIGHT_UPDATE])]
    update_share = float((updates["end_ps"] - updates["start_ps"]).sum()
                         / (compute["end_ps"] - compute["start_ps"]).sum())
    print(f"gradientAccumulation({accumulation}): {calls} calls of "
          f"{training_data.combinedBatchSize} samples, final loss {float(loss):.4f}")
    poptorch_model.destroy()
    return {
        "accumulation": accumulation,
        "micro_batches": device_iterations * accumulation,
        "updates": device_iterations,
        "update_batch": model_batch_size * accumulation,
        "call(ms)": summary["duration(ms)"] / calls,
        "throughput(items/s)": summary["throughput(items/s)"],
        "update_share": update_share,
    }


def print_table(rows, device_iterations):
    print(f"\nGradient accumulation (simulated, batch size {model_batch_size}, "
          f"{device_iterations} device iterations):")
    print(f"{'accumulation':>12}{'micro-batches/call':>20}{'updates/call':>14}"
          f"{'samples/update':>16}{'call (ms)':>11}{'items/s':>11}{'update/compute':>16}")
    for row in rows:
        print(f"{row['accumulation']:>12}{row['micro_batches']:>20}{row['updates']:>14}"
              f"{row['update_batch']:>16}{row['call(ms)']:>11.2f}"
              f"{row['throughput(items/s)']:>11.0f}{row['update_share']:>16.1%}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gradient-accumulation", type=int, nargs="+", default=[1, 8],
                        help="accumulation counts to compare (1 8; the guide uses 8)")
    parser.add_argument("--device-iterations", type=int, default=400,
                        help="device iterations (400, as in the guide)")
    add_loop_arguments(parser, samples=100000)
    args = parser.parse_args()

    dataset = ExampleDataset(shape=[3, 2], length=args.samples)
    rows = [train(dataset, args.device_iterations, accumulation, args.max_steps, args.verbose)
            for accumulation in args.gradient_accumulation]
    print_table(rows, args.device_iterations)


if __name__ == "__main__":
    main()
