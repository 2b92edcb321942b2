"""The PopTorch user guide's example model, dataset and training loop (PopTorch's batching guide).

Listings 4.1-4.4 share them: the device-iterations, replication,
gradient-accumulation and asynchronous-accessor scenarios import them from
here, as the guide's listings share them, each keeping only what it varies.
"""
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
