"""A LightningModule fitted, validated, tested and used to predict through
Lightning's IPU strategy (lightning-graphcore), unmodified: pipelined over two
IPUs, data-parallel over two replicas, or data-parallel with the strategy's
device iterations (8). Lightning 2.0, which lightning-graphcore 0.1.0 was made
for, converts a DataLoader into a poptorch.DataLoader only for its own built-in
IPU accelerator: lightning-graphcore's gets the loader's batches as they are,
each a whole call's batch."""
import sys

import lightning.pytorch as pl
import torch
from lightning_graphcore import IPUAccelerator, IPUPrecision, IPUStrategy
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import poptorch


class Classifier(pl.LightningModule):
    def __init__(self, pipelined: bool):
        super().__init__()
        self.first, self.second = nn.Linear(8, 16), nn.Linear(16, 2)
        if pipelined:
            self.second = poptorch.BeginBlock(self.second, ipu_id=1)

    def forward(self, x):
        return self.second(torch.relu(self.first(x)))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self(x), y)

    def test_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self(x), y)

    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        return self(batch[0])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def loader(rows: int = 64, batch: int = 8):
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(rows, 8), torch.randint(0, 2, (rows,)))
    return DataLoader(data, batch_size=batch)  # a multiple of the micro-batches of every call


def main(mode: str):
    pipelined = mode == "pipelined"
    torch.manual_seed(1)
    model = Classifier(pipelined)
    precision = IPUPrecision("32-true")
    if pipelined:  # the script's own options: 2 IPUs of Blocks, one replica
        opts = poptorch.Options().deviceIterations(2)
        opts.Training.gradientAccumulation(4)
        strategy = IPUStrategy(training_opts=opts,
                               inference_opts=poptorch.Options().deviceIterations(2),
                               precision_plugin=precision)
    elif mode == "device-iterations":  # 8 device iterations a call on each of 2 replicas
        strategy = IPUStrategy(device_iterations=8, precision_plugin=precision)
    else:  # the strategy's options: a replica per device
        strategy = IPUStrategy(precision_plugin=precision)
    devices = 1 if pipelined else 2
    # Batches of 16, each call 16 x 8 x 2 samples: two calls an epoch.
    rows, batch = (512, 16) if mode == "device-iterations" else (64, 8)
    trainer = pl.Trainer(accelerator=IPUAccelerator(), devices=devices, strategy=strategy,
                         max_epochs=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False)
    before = model.first.weight.detach().clone()
    trainer.fit(model, loader(rows, batch), loader(rows, batch))
    assert not torch.equal(model.first.weight, before), "fit changed no weight"
    trainer.validate(model, loader(rows, batch))
    trainer.test(model, loader(rows, batch))
    predictions = trainer.predict(model, loader(rows, batch))
    print("predicted", sum(p.shape[0] for p in predictions), "rows")


if __name__ == "__main__":
    main(sys.argv[1])
