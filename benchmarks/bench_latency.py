"""Where a batch-1 inference call goes: a 6-layer encoder on one simulated Mk2 IPU.

A BERT-base-sized encoder (6 post-LayerNorm layers, hidden 768, 12 heads, FFN 3,072,
sequence 128, fp16) as a PopTorch inference model with one device iteration, called
once with one sequence of hidden states. Prints the call's simulated time part by
part, read from the event table: PopTorch's Python path and the engine's run (the
host's side, ``CostModel.poptorch_call_ps`` and ``engine_run_ps``), the input's
stream copy with its sync, the compute, the output's copy; then the whole call and
``getLatency()`` (PopTorch's figure: the input's arrival to the output's, so without
the host's side). Prints only.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

from poptorch_shim.commands import install_aliases

install_aliases()
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import poptorch  # noqa: E402
from ipusim.cost.cost_model import DEFAULT  # noqa: E402
from scenarios.models import BertLayer  # noqa: E402

HIDDEN, HEADS, FFN, LAYERS, SEQUENCE = 768, 12, 3072, 6, 128


class Encoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList(BertLayer(HIDDEN, HEADS, FFN, 0.0, 1e-12)
                                          for _ in range(LAYERS))

    def forward(self, x):
        mask_bias = torch.zeros(x.shape[0], 1, 1, x.shape[1], dtype=x.dtype)
        for layer in self.layers:
            x = layer(x, mask_bias)
        return x


def main() -> None:
    opts = poptorch.Options()
    opts.Simulation.timingOnly(True)
    model = poptorch.inferenceModel(Encoder().half().eval(), opts)
    model(torch.randn(1, SEQUENCE, HIDDEN, dtype=torch.half))
    events = model.timeline.events
    ipu0 = events[events["ipu"] == 0]
    took = (ipu0["end_ps"] - ipu0["start_ps"]).groupby(ipu0["kind"]).sum() / 1e6
    host = took.get("host_call", 0.0)
    print("A batch-1 inference call of a 6-layer encoder (hidden 768, sequence 128, fp16, "
          "one Mk2 IPU), simulated, us:")
    for name, us in (
            ("PopTorch's Python path (poptorch_call_ps)", DEFAULT.poptorch_call_ps / 1e6),
            ("the engine's run on the host (engine_run_ps)", DEFAULT.engine_run_ps / 1e6),
            ("input copy, host to device", took.get("host_to_device", 0.0)),
            ("compute", took.get("forward", 0.0)),
            ("output copy, device to host", took.get("device_to_host", 0.0)),
            ("syncs with the host", took.get("sync_wait", 0.0))):
        print(f"  {name:<46}{us:>9.1f}")
    total = (events["end_ps"].max() - events["start_ps"].min()) / 1e6
    print(f"  {'the whole call':<46}{total:>9.1f}")
    print(f"  {'of which the host side':<46}{host:>9.1f}")
    print(f"  {'getLatency() (mean), input to output':<46}{model.getLatency()[2] * 1e6:>9.1f}")


if __name__ == "__main__":
    main()
