"""PopART's replicatedCollectivesSettings.mergeAllReduceCollectives, set through
PopTorch's ``opts._Popart.set``, reaches the simulated run, and each parameter
tensor's size reaches the stage whose gradients the replicas all-reduce."""
import torch

import poptorch_shim as poptorch


def test_poptorchs_merge_option_reaches_the_run():
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 2)

        def forward(self, x, y):
            return torch.nn.functional.cross_entropy(self.b(self.a(x)), y)

    for merge in (False, True):
        opts = poptorch.Options()
        opts.replicationFactor(2)
        opts.Simulation.timingOnly(True)
        if merge:
            opts._Popart.set("replicatedCollectivesSettings.mergeAllReduceCollectives", True)
        net = Net()
        model = poptorch.trainingModel(net, opts, poptorch.optim.SGD(net.parameters(), lr=0.1))
        model(torch.randn(8, 8), torch.randint(0, 2, (8,)))
        assert model.device.run.merge_all_reduce is merge
        assert model.device.work.stages[0].parameter_sizes == (256, 32, 64, 8)
        model.destroy()
