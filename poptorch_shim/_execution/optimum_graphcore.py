"""What the shim knows of optimum-graphcore: which of its models is one step of a
generation loop on the host, and which it wraps itself (its users then set the
run's settings through its ``IPUConfig`` and ``IPUTrainingArguments``).

optimum-graphcore generates text by calling ``poptorch.inferenceModel`` of its
``DecoderWrapper`` once per token: each call's input is the token the previous
call chose, so its calls cannot run together as device iterations. What
spreads the host's round trip over several tokens is optimum's on-device
generation (``on_device_generation_steps``), which wraps the decoder in an
``OnDeviceGenerationModel`` running that many steps in one call. The run
configuration of a host loop says so (``RunConfig.autoregressive``), so that
the verdict offers that change and never more device iterations. optimum's
on-device generation assumes its static KV cache, which it keeps only for the
pipelined models it marks ``supports_kv_cache`` (``MODELS_SUPPORTING_KV_CACHE``:
BART, T5 and Whisper in 0.7.1): for any other model (GPT-2, MT5) the verdict
says that the change needs one of those (:func:`without_device_loop`).

A model optimum wraps (its ``IPUTrainer``, its generation) runs under the
options ``IPUConfig.to_options`` made, and its trainer's DataLoader under
``IPUTrainingArguments``: the verdict names those (:func:`library_of`).
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

# optimum-graphcore's wrapper of one decoding step, and of a loop on the device.
_DECODER_STEP = ("optimum.graphcore.generation", "DecoderWrapper")
_DEVICE_LOOP = "OnDeviceGenerationModel"
# The pipelined models optimum keeps a KV cache for: those it can generate with on the device.
_KV_CACHE_MODELS = ("optimum.graphcore.generation.utils", "MODELS_SUPPORTING_KV_CACHE")
_PACKAGE, _TRAINER = "optimum.graphcore", "optimum.graphcore.trainer"
_SHIM = str(Path(__file__).resolve().parents[1])
_TORCH = str(Path(torch.__file__).resolve().parent)


def _decoder_step(model: torch.nn.Module) -> bool:
    kind = type(model)
    package, name = _DECODER_STEP
    return name == kind.__name__ and kind.__module__.startswith(package)


def _loops_on_device(model: torch.nn.Module) -> bool:
    return type(getattr(model, "pipelined_model", None)).__name__ == _DEVICE_LOOP


def host_generation_loop(model: torch.nn.Module) -> bool:
    """Whether ``model`` is optimum-graphcore's decoder step of a loop on the host
    (not one of its on-device loops)."""
    return _decoder_step(model) and not _loops_on_device(model)


def device_generation_loop(model: torch.nn.Module) -> bool:
    """Whether ``model`` is optimum-graphcore's generation loop run on the device: its
    device iterations are the ``on_device_generation_steps`` optimum sets them to."""
    return _decoder_step(model) and _loops_on_device(model)


def without_device_loop(model: torch.nn.Module) -> tuple[str, tuple[str, ...]] | None:
    """For optimum-graphcore's decoder step of a loop on the host whose pipelined model
    it cannot generate with on the device (it keeps no KV cache for it): that model's
    class name and those of the models it can, else None."""
    if not host_generation_loop(model):
        return None
    module, name = _KV_CACHE_MODELS
    supported = getattr(sys.modules.get(module), name, None)
    inner = type(getattr(model, "pipelined_model", None))
    if supported is None or inner in supported:
        return None
    return inner.__name__, tuple(sorted(kind.__name__ for kind in supported))


def library_of() -> str | None:
    """Who wraps the model being wrapped now, from the first caller outside the shim
    and torch: ``"trainer"`` (optimum-graphcore's IPUTrainer, which built its options
    and its DataLoader), ``"optimum"`` (elsewhere in optimum-graphcore: its options
    are an IPUConfig's), or None (the user's own code)."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith((_SHIM, _TORCH)):
        frame = frame.f_back
    module = "" if frame is None else str(frame.f_globals.get("__name__", ""))
    if module == _TRAINER:
        return "trainer"
    return "optimum" if module == _PACKAGE or module.startswith(_PACKAGE + ".") else None
