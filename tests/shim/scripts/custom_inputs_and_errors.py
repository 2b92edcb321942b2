"""A model whose input is a user type, batched through a registered
poptorch.ICustomArgParser, and PopTorch's error handling example: errors are
caught as poptorch.Error and read by message, type and location."""
import torch

import poptorch


class Features:
    """A user's input type: two tensors and a name."""

    def __init__(self, dense, mask, name):
        self.dense, self.mask, self.name = dense, mask, name


class FeaturesParser(poptorch.ICustomArgParser):
    def yieldTensors(self, struct):
        yield struct.dense
        yield struct.mask

    def reconstruct(self, original_structure, tensor_iterator):
        return Features(next(tensor_iterator), next(tensor_iterator), original_structure.name)


poptorch.registerCustomArgParser(Features, FeaturesParser())


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(6, 2)

    def forward(self, features, labels=None):
        out = self.fc(features.dense) * features.mask
        if poptorch.isRunningOnIpu() and labels is not None:
            return out, torch.nn.functional.cross_entropy(out, labels)
        return out


opts = poptorch.Options().deviceIterations(2).replicationFactor(2)
model = poptorch.trainingModel(Model(), opts)
generator = torch.Generator().manual_seed(0)
for step in range(3):
    features = Features(torch.randn(8, 6, generator=generator), torch.ones(8, 2), "batch")
    out, loss = model(features, torch.randint(0, 2, (8,), generator=generator))
print("custom input output", tuple(out.shape), "loss per replica", tuple(loss.shape))

# error_handling_start
try:
    bad = poptorch.Options()
    bad.Training.gradientAccumulation(2)
    poptorch.inferenceModel(Model(), bad)
except poptorch.RecoverableError as e:
    print("recoverable", e.recovery_action)
except poptorch.UnrecoverableError as e:
    print(f"Unrecoverable error: machine needs to be taken offline: {e}")
except poptorch.Error as e:
    print(f"Received {e.message[:40]}... from component {e.type}, location: '{e.location}'")
# error_handling_end
