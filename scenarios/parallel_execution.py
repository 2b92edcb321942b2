"""The batching guide's four-block Network (PopTorch's batching guide, listings 4.5 and 4.6).

Trains the Network with the pipelined, sharded or serial phased execution
strategy, optionally with tensors offloaded to streaming memory and with
an autoReport profile, exactly as the guide's example does; MNIST is
replaced by random 28x28 images so the scenario needs no download.
"""
import argparse

import torch
import torch.nn as nn

import poptorch
import poptorch.optim as optim


class Network(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer1 = nn.Linear(784, 784)
        self.layer2 = nn.Linear(784, 784)
        self.layer3 = nn.Linear(784, 128)
        self.layer4 = nn.Linear(128, 10)
        self.softmax = nn.Softmax(1)

    def forward(self, x):
        x = x.view(-1, 784)
        with poptorch.Block("B1"):
            x = self.layer1(x)
        with poptorch.Block("B2"):
            x = self.layer2(x)
        with poptorch.Block("B3"):
            x = self.layer3(x)
        with poptorch.Block("B4"):
            x = self.layer4(x)
            x = self.softmax(x)
        return x


class TrainingModelWithLoss(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model
        self.loss = torch.nn.CrossEntropyLoss()

    def forward(self, args, loss_inputs=None):
        output = self.model(args)
        if loss_inputs is None:
            return output
        with poptorch.Block("B4"):
            loss = self.loss(output, loss_inputs)
        return output, loss


def get_mnist_data(opts):
    """Random images in MNIST's shape, batched by poptorch.DataLoader."""
    generator = torch.Generator().manual_seed(0)
    images = torch.rand(opts.samples, 1, 28, 28, generator=generator)
    labels = torch.randint(0, 10, (opts.samples,), generator=generator)
    dataset = torch.utils.data.TensorDataset(images, labels)
    return dataset


def train(training_model, training_data, opts):
    for epoch in range(opts.epochs):
        for step, (data, labels) in enumerate(training_data):
            _, loss = training_model(data, labels)
        print(f"epoch {epoch}: loss {float(loss.mean()):.4f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategy", choices=["pipelined", "sharded", "phased"],
                        default="pipelined")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--batches-per-step", type=int, default=16,
                        help="gradient accumulation of the pipelined strategy (16)")
    parser.add_argument("--samples", type=int, default=1024)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--lr", type=float, default=0.001)
    parser.add_argument("--offload-opt", action="store_true",
                        help="keep the optimizer state in streaming memory")
    parser.add_argument("--profile", default=None, help="autoReport directory")
    opts = parser.parse_args()

    dataset = get_mnist_data(opts)
    model = Network()
    model_with_loss = TrainingModelWithLoss(model)
    model_opts = poptorch.Options().deviceIterations(1)
    if opts.strategy == "phased":
        strategy = poptorch.SerialPhasedExecution("B1", "B2", "B3", "B4")
        strategy.stage("B1").ipu(0)
        strategy.stage("B2").ipu(0)
        strategy.stage("B3").ipu(0)
        strategy.stage("B4").ipu(0)
        model_opts.setExecutionStrategy(strategy)
    elif opts.strategy == "pipelined":
        strategy = poptorch.PipelinedExecution("B1", "B2", "B3", "B4")
        strategy.stage("B1").ipu(0)
        strategy.stage("B2").ipu(1)
        strategy.stage("B3").ipu(2)
        strategy.stage("B4").ipu(3)
        model_opts.setExecutionStrategy(strategy)
        model_opts.Training.gradientAccumulation(opts.batches_per_step)
    else:
        strategy = poptorch.ShardedExecution("B1", "B2", "B3", "B4")
        strategy.stage("B1").ipu(0)
        strategy.stage("B2").ipu(0)
        strategy.stage("B3").ipu(0)
        strategy.stage("B4").ipu(0)
        model_opts.setExecutionStrategy(strategy)

    if opts.offload_opt:
        model_opts.TensorLocations.setActivationLocation(
            poptorch.TensorLocationSettings().useOnChipStorage(True))
        model_opts.TensorLocations.setWeightLocation(
            poptorch.TensorLocationSettings().useOnChipStorage(True))
        model_opts.TensorLocations.setAccumulatorLocation(
            poptorch.TensorLocationSettings().useOnChipStorage(True))
        model_opts.TensorLocations.setOptimizerLocation(
            poptorch.TensorLocationSettings().useOnChipStorage(False))

    if opts.profile:
        model_opts.Popart.set("engineOptions", {
            "autoReport.all": "true",
            "autoReport.directory": opts.profile
        })
    model_opts.modelName(f"network_{opts.strategy}{'_offload' if opts.offload_opt else ''}")
    training_data = poptorch.DataLoader(model_opts, dataset, batch_size=opts.batch_size,
                                        shuffle=True, drop_last=True)

    training_model = poptorch.trainingModel(
        model_with_loss,
        model_opts,
        optimizer=optim.AdamW(model.parameters(), lr=opts.lr))

    # run training, on IPU
    train(training_model, training_data, opts)

    summary = training_model.timeline.summary()
    memory = training_model.device.memory
    print(f"strategy {opts.strategy}: {summary['throughput(items/s)']:.0f} items/s simulated, "
          f"bubble {summary['bubble_fraction']:.1%}, utilisation {summary['utilisation']:.1%}, "
          f"latency {summary['latency(us)']:.1f} us")
    for ipu, row in memory.iterrows():
        print(f"  IPU {ipu}: {row['total'] / 1e6:.1f} MB of {row['capacity'] / 1e6:.0f} MB SRAM")


if __name__ == "__main__":
    main()
