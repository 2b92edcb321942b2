"""The user guide's verdict example: a four-stage pipeline whose third stage is heavy.

Four model stages on four IPUs, pipelined; the third holds six 2048x2048 layers,
the others one each. Trained with ``deviceIterations(64)``,
``gradientAccumulation(16)`` and micro-batches of 16, timing-only on a Mk2
Pod16: the verdict is ``imbalance``, and its what-if table shows what every
other change gains. ``--device-iterations 4`` gives the guide's second case.
"""
import argparse

import torch

import poptorch

WIDTH = 2048


class Pipeline(torch.nn.Module):
    def __init__(self, heavy_layers: int = 6):
        super().__init__()
        self.a = torch.nn.Linear(WIDTH, WIDTH)
        self.b = torch.nn.Linear(WIDTH, WIDTH)
        self.c = torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH) for _ in range(heavy_layers)])
        self.d = torch.nn.Linear(WIDTH, WIDTH)
        self.loss = torch.nn.MSELoss()

    def forward(self, x, target):
        with poptorch.Block("A", ipu_id=0):
            x = self.a(x)
        with poptorch.Block("B", ipu_id=1):
            x = self.b(x)
        with poptorch.Block("C", ipu_id=2):
            x = self.c(x)
        with poptorch.Block("D", ipu_id=3):
            x = self.d(x)
            return x, self.loss(x, target)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device-iterations", type=int, default=64)
    parser.add_argument("--steps", type=int, default=2)
    args = parser.parse_args()
    opts = poptorch.Options().deviceIterations(args.device_iterations)
    opts.Training.gradientAccumulation(16)
    opts.setExecutionStrategy(poptorch.PipelinedExecution())
    opts.Simulation.system("mk2", num_ipus=16)
    opts.Simulation.timingOnly(True)
    opts.modelName(f"verdict_imbalance_di{args.device_iterations}")
    net = Pipeline()
    model = poptorch.trainingModel(net, opts, torch.optim.SGD(net.parameters(), lr=0.01))
    rows = 16 * args.device_iterations * 16
    for _ in range(args.steps):
        model(torch.zeros(rows, WIDTH), torch.zeros(rows, WIDTH))


if __name__ == "__main__":
    main()
