"""Small torch models the shim's tests train: a model returns its output and its loss."""
import torch


class LinearClassifier(torch.nn.Module):
    """One linear layer of ``features`` inputs and ``classes`` outputs, with a
    cross-entropy loss: the smallest model PopTorch trains."""

    def __init__(self, features: int, classes: int):
        super().__init__()
        self.fc = torch.nn.Linear(features, classes)
        self.loss = torch.nn.CrossEntropyLoss()

    def forward(self, x, target):
        out = self.fc(x)
        return out, self.loss(out, target)
