"""Device iterations and batch size (the batching guide, listing 4.2), as a user writes it.

Trains the guide's ExampleModelWithLoss on its ExampleDataset with a model
batch size of 2, once for each device-iteration count asked for. Every call
to the model pays one host round trip; device iterations run that many
batches on the IPU per call, so the round trip is shared by more samples.
The table at the end shows it: simulated time per call, items/s and the
host overhead each item carries. The guide's model, dataset and loop are in
``guide_examples.py``, shared with the other listings.
"""
import argparse
import sys

import poptorch
from ipusim.engine.event_kinds import HOST_CALL

from guide_examples import ExampleDataset, add_loop_arguments, model_batch_size, run_guide_loop


def train(dataset, device_iterations, max_steps, verbose):
    """The guide's loop for one device-iteration count; the simulated figures."""
    # Create a poptorch.Options instance to override default options
    opts = poptorch.Options()

    # Run a loop of `device_iterations` batches on the IPU, fetching a new batch each time
    opts.deviceIterations(device_iterations)
    opts.modelName(f"device_iterations_{device_iterations}")

    poptorch_model, training_data, calls, loss = run_guide_loop(opts, dataset, max_steps,
                                                                verbose)
    summary = poptorch_model.timeline.summary()
    events = poptorch_model.timeline.events
    host_calls = events[(events["kind"] == HOST_CALL) & (events["ipu"] == 0)]
    host_call_us = float((host_calls["end_ps"] - host_calls["start_ps"]).sum()) / 1e6 / calls
    per_call_us = summary["duration(ms)"] * 1e3 / calls
    items_per_call = model_batch_size * device_iterations
    print(f"deviceIterations({device_iterations}): {calls} calls, final loss {float(loss):.4f}")
    poptorch_model.destroy()
    return {
        "device_iterations": device_iterations,
        "items_per_call": items_per_call,
        "call(us)": per_call_us,
        "throughput(items/s)": summary["throughput(items/s)"],
        "host_call(us)": host_call_us,
        "host_call_per_item(us)": host_call_us / items_per_call,
        "host_call_share": host_call_us / per_call_us,
    }


def print_table(rows):
    print("\nHost round trip amortised by device iterations (simulated, batch size "
          f"{model_batch_size}):")
    print(f"{'deviceIterations':>16}{'items/call':>12}{'call (us)':>12}{'items/s':>12}"
          f"{'host call (us)':>16}{'per item (us)':>15}{'host share':>12}")
    for row in rows:
        print(f"{row['device_iterations']:>16}{row['items_per_call']:>12}"
              f"{row['call(us)']:>12.1f}{row['throughput(items/s)']:>12.0f}"
              f"{row['host_call(us)']:>16.1f}{row['host_call_per_item(us)']:>15.2f}"
              f"{row['host_call_share']:>12.1%}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device-iterations", type=int, nargs="+", default=[1, 10, 100],
                        help="device-iteration counts to compare (1 10 100)")
    add_loop_arguments(parser, samples=10000)
    args = parser.parse_args()
    if not poptorch.ipuHardwareIsAvailable():
        print("Replicated top level graphs are not supported on the IPU model")
        sys.exit(0)

    dataset = ExampleDataset(shape=[3, 2], length=args.samples)
    rows = [train(dataset, device_iterations, args.max_steps, args.verbose)
            for device_iterations in args.device_iterations]
    print_table(rows)


if __name__ == "__main__":
    main()
