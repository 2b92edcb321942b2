"""Device iterations and batch size (seed 001, listing 4.2), as a PopTorch user writes it.

Trains the guide's ExampleModelWithLoss on its ExampleDataset with a model
batch size of 2, once for each device-iteration count asked for. Every call
to the model pays one host round trip; device iterations run that many
batches on the IPU per call, so the round trip is shared by more samples.
The table at the end shows it: simulated time per call, items/s and the
host overhead each item carries. The replication, gradient-accumulation and
asynchronous-accessor scenarios reuse this file's model and dataset, as the
guide's listings share them.
"""
import argparse
import sys
from functools import reduce
from operator import mul

import torch

import poptorch


class ExampleModelWithLoss(torch.nn.Module):
    def __init__(self, data_shape, num_classes):
        super().__init__()

        self.fc = torch.nn.Linear(reduce(mul, data_shape), num_classes)
        self.loss = torch.nn.CrossEntropyLoss()

    def forward(self, x, target=None):
        reshaped = x.reshape([x.shape[0], -1])
        fc = self.fc(reshaped)

        if target is not None:
            return fc, self.loss(fc, target)
        return fc


class ExampleDataset(torch.utils.data.Dataset):
    def __init__(self, shape, length):
        self._shape = shape
        self._length = length

        self._all_data = []
        self._all_labels = []

        torch.manual_seed(0)
        for _ in range(length):
            label = 1 if torch.rand(()) > 0.5 else 0
            data = torch.rand(self._shape) + label
            data[0] = -data[0]
            self._all_data.append(data)
            self._all_labels.append(label)

    def __len__(self):
        return self._length

    def __getitem__(self, index):
        return self._all_data[index], self._all_labels[index]


# Set the batch size in the conventional sense of being the size that
# runs through an operation in the model at any given time
model_batch_size = 2


def add_loop_arguments(parser, samples):
    """The options of :func:`run_guide_loop` that the guide's listings share:
    the dataset length (``samples`` by default), a cap on the calls and the
    guide's per-call print."""
    parser.add_argument("--samples", type=int, default=samples,
                        help=f"ExampleDataset length ({samples:,}, as in the guide)")
    parser.add_argument("--max-steps", type=int, default=None,
                        help="cap the calls to the model per case (default: one epoch)")
    parser.add_argument("--verbose", action="store_true",
                        help="print the guide's per-call line (label, output, loss)")


def run_guide_loop(opts, dataset, max_steps, verbose):
    """The guide's training loop, shared by its listings 4.2-4.4.

    Returns the model, the DataLoader, the number of calls made and the
    last loss.
    """
    # Set up the DataLoader to load that much data at each iteration
    training_data = poptorch.DataLoader(opts,
                                        dataset=dataset,
                                        batch_size=model_batch_size,
                                        shuffle=True,
                                        drop_last=True)

    model = ExampleModelWithLoss(data_shape=[3, 2], num_classes=2)
    # Wrap the model in a PopTorch training wrapper
    poptorch_model = poptorch.trainingModel(model, options=opts)

    calls = 0
    for batch_number, (data, labels) in enumerate(training_data):
        # "output" and "loss" are those of the final batch of each replica
        # (the default output mode).
        output, loss = poptorch_model(data, labels)
        calls += 1
        if verbose:
            print(f"{labels[-1]}, {output}, {loss}")
        if calls == max_steps:
            break
    return poptorch_model, training_data, calls, loss


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
    host_calls = events[(events["kind"] == "host_call") & (events["ipu"] == 0)]
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
