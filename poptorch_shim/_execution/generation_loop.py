"""Whether a model is one step of a generation loop that the host runs.

optimum-graphcore generates text by calling ``poptorch.inferenceModel`` of its
``DecoderWrapper`` once per token: each call's input is the token the previous
call chose, so its calls cannot run together as device iterations. What
spreads the host's round trip over several tokens is optimum's on-device
generation (``on_device_generation_steps``), which wraps the decoder in an
``OnDeviceGenerationModel`` running that many steps in one call. The run
configuration of a host loop says so (``RunConfig.autoregressive``), so that
the verdict offers that change and never more device iterations.
"""
from __future__ import annotations

import torch

# optimum-graphcore's wrapper of one decoding step, and of a loop on the device.
_DECODER_STEP = ("optimum.graphcore.generation", "DecoderWrapper")
_DEVICE_LOOP = "OnDeviceGenerationModel"


def host_generation_loop(model: torch.nn.Module) -> bool:
    """Whether ``model`` is optimum-graphcore's decoder step of a loop on the host
    (not one of its on-device loops)."""
    kind = type(model)
    package, name = _DECODER_STEP
    if name != kind.__name__ or not kind.__module__.startswith(package):
        return False
    return type(getattr(model, "pipelined_model", None)).__name__ != _DEVICE_LOOP
