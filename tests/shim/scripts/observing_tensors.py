"""Observing tensors, in the style of Graphcore's PopTorch tutorial: anchor the
gradients of a small linear model, train one epoch, and build a histogram of
their magnitudes. The MNIST download is replaced by generated images."""
import torch
import torch.nn as nn
from tqdm import tqdm

import poptorch


class BasicLinearModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 32)
        self.fc2 = nn.Linear(32, 16)
        self.fc3 = nn.Linear(16, 10)
        self.log_softmax = nn.LogSoftmax(dim=0)
        self.loss = nn.NLLLoss()
        self.relu = nn.ReLU()

    def forward(self, x, labels=None):
        x = torch.flatten(x, start_dim=1)
        x = self.relu(self.fc1(x))
        x = self.relu(self.fc2(x))
        x = self.log_softmax(self.fc3(x))
        if self.training:
            return x, self.loss(x, labels)
        return x


batch_size_train = 16
tensors = [
    "Gradient___fc1.weight",
    "Gradient___fc3.weight",
    "Gradient___fc2.bias",
    "Gradient___fc1.bias",
    "Gradient___fc3.bias",
    "Gradient___fc2.weight",
]

# Initialize the PopTorch options and anchor the tensors of interest
opts = poptorch.Options()
for t in tensors:
    opts.anchorTensor(t, t)
# An activation too, summed over the micro-batches of each step
opts.anchorTensor("hidden", "relu/ReLU:0", poptorch.OutputMode.Sum)

# Generated stand-in for torchvision.datasets.MNIST
generator = torch.Generator().manual_seed(0)
images = torch.rand(64, 1, 28, 28, generator=generator)
labels = torch.randint(0, 10, (64,), generator=generator)
train_data = torch.utils.data.TensorDataset(images, labels)
train_loader = poptorch.DataLoader(opts, train_data, batch_size=batch_size_train, shuffle=True)

model = BasicLinearModel()
model.train()
optimizer = poptorch.optim.SGD(model.parameters(), lr=0.01)
poptorch_model = poptorch.trainingModel(model, options=opts, optimizer=optimizer)

# Compile the model so we can use getTensorNames to print out all the tensor names
poptorch_model.compile(torch.zeros(batch_size_train, 1, 28, 28),
                       torch.zeros(batch_size_train).long())
print("tensor names:", poptorch_model.getTensorNames())

total_loss = 0.0
predictions = []
for data, labels in tqdm(train_loader, desc="batches", leave=False):
    output, loss = poptorch_model(data, labels)
    total_loss += loss
    predictions += output
print(f"Loss: {total_loss.item():.4f}")

gradient = []
for t in tensors:
    gradient += poptorch_model.getAnchoredTensor(t).flatten()
gradient = torch.stack(gradient).abs()
idx = gradient != 0
gradient[idx] = torch.log2(gradient[idx])
gradient[~idx] = torch.min(gradient) - 2
counts = torch.histc(gradient, bins=10)
print("gradients:", gradient.numel(), "histogram total:", int(counts.sum()))
print("hidden:", tuple(poptorch_model.getAnchoredTensor("hidden").shape))
