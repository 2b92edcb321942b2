"""A LightningModule fitted, validated, tested and used to predict through
Lightning's IPU strategy (lightning-graphcore), unmodified."""
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


def loader():
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    return DataLoader(data, batch_size=8)  # a multiple of the micro-batches of every call


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
    else:  # the strategy's options: a replica per device
        strategy = IPUStrategy(precision_plugin=precision)
    devices = 1 if pipelined else 2
    trainer = pl.Trainer(accelerator=IPUAccelerator(), devices=devices, strategy=strategy,
                         max_epochs=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False)
    before = model.first.weight.detach().clone()
    trainer.fit(model, loader(), loader())
    assert not torch.equal(model.first.weight, before), "fit changed no weight"
    trainer.validate(model, loader())
    trainer.test(model, loader())
    predictions = trainer.predict(model, loader())
    print("predicted", sum(p.shape[0] for p in predictions), "rows")


if __name__ == "__main__":
    main(sys.argv[1])
