"""PopTorch basics in half precision, in the style of Graphcore's walkthrough:
a small classifier converted with model.half(), fed half-precision images
through a poptorch.DataLoader, trained, then evaluated with an inference
model. The FashionMNIST download is replaced by generated images."""
import torch
import torch.nn as nn

import poptorch

poptorch.setLogLevel("WARN")


class ClassificationModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 5, 3)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(5, 12, 5)
        self.norm = nn.GroupNorm(3, 12)
        self.fc1 = nn.Linear(12 * 3 * 3, 10)
        self.log_softmax = nn.LogSoftmax(dim=1)
        self.relu = nn.ReLU()
        self.loss = nn.NLLLoss()

    def forward(self, x, labels=None):
        x = self.pool(self.relu(self.conv1(x)))
        x = self.norm(self.relu(self.conv2(x)))
        x = torch.flatten(x, start_dim=1)
        x = self.log_softmax(self.fc1(x))
        if self.training:
            return x, self.loss(x, labels)
        return x


class HalfImages(torch.utils.data.Dataset):
    """Generated 16x16 images in float16, with a label each."""

    def __init__(self, count, seed):
        generator = torch.Generator().manual_seed(seed)
        self.images = torch.rand(count, 1, 16, 16, generator=generator).half()
        self.labels = torch.randint(0, 10, (count,), generator=generator)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        return self.images[index], self.labels[index]


opts = poptorch.Options().deviceIterations(4)
train_dataloader = poptorch.DataLoader(opts, HalfImages(128, 0), batch_size=4, shuffle=True)

model = ClassificationModel()
model.half()
model.train()
optimizer = poptorch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
poptorch_model = poptorch.trainingModel(model, options=opts, optimizer=optimizer)

epochs = 2
for epoch in range(epochs):
    for data, labels in train_dataloader:
        output, loss = poptorch_model(data, labels)
print("training output", output.dtype, "loss", loss.dtype, "finite", bool(torch.isfinite(loss)))
print("weights", next(model.parameters()).dtype)
poptorch_model.detachFromDevice()

model = model.eval()
poptorch_model_inf = poptorch.inferenceModel(model, options=opts)
test_dataloader = poptorch.DataLoader(opts, HalfImages(64, 1), batch_size=4)
predictions, labels = [], []
for data, label in test_dataloader:
    predictions += poptorch_model_inf(data).data.float().max(dim=1).indices
    labels += label
poptorch_model_inf.detachFromDevice()
accuracy = sum(int(p == t) for p, t in zip(predictions, labels)) / len(labels)
print(f"evaluated {len(labels)} images, accuracy {accuracy:.2f}")
