"""Anchored tensors: intermediate tensors a model returns besides its outputs.

``Options.anchorTensor(short_name, long_name, output_mode, output_return_period)``
asks for a tensor by the name PopART gives it; ``model.getTensorNames()``
lists the names and ``model.getAnchoredTensor(short_name)`` reads the value
the last run returned. The names follow PopART's, as PopTorch shows them:

- a weight by its parameter name, ``fc1.weight``;
- its gradient ``Gradient___fc1.weight`` and its value after the optimizer
  step ``UpdatedVar___fc1.weight`` (training only); PopTorch 2's names with a
  ``model.`` prefix (``Gradient___model.fc1.weight``) are accepted too;
- a module's output by its scope and operator, ``fc1/Linear:0``: the module's
  path with ``/`` for ``.`` and its class for the operator (the shim runs
  torch's modules, not PopART's operators).

The values are the torch compute's own: gradients are captured as autograd
computes them, per micro-batch and replica, before any accumulation or
reduction (PopART's ``Gradient___`` tensor, so a Mean reduction's division is
undone); activations as each module returns them; updated weights after each
weight update. They come back as the outputs do (``poptorch.OutputMode``): a
tensor made once per micro-batch has a value per micro-batch and replica, an
updated weight one per weight update.
"""
from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import replace
from typing import Any

import torch

from poptorch_shim import enums
from poptorch_shim._execution.step_shape import StepShape, assemble, flatten
from poptorch_shim.errors import InvalidUseError

GRADIENT, UPDATED = "Gradient___", "UpdatedVar___"
_LEGACY_SCOPE = "model."   # PopTorch 2 traced the model inside a wrapper named "model"


def activation_name(path: str, module: torch.nn.Module) -> str:
    """PopART-style name of a module's output: ``scope/Operator:0``."""
    return f"{path.replace('.', '/')}/{type(module).__name__}:0"


def activation_names(model: torch.nn.Module) -> Iterator[tuple[str, torch.nn.Module]]:
    """(name, module) for every sub-module whose output can be anchored."""
    for path, module in model.named_modules():
        if path:
            yield activation_name(path, module), module


class Anchors:
    """Captures the anchored tensors of a model's runs and assembles them.

    ``called`` is the list of activation names the model produced when it was
    compiled: together with the weights they are the model's tensor names.
    """

    def __init__(self, specs: dict, model: torch.nn.Module, training: bool):
        self._specs = specs
        self._model = model
        self._training = training
        self._called: list[str] = []
        self._targets: dict[str, tuple[str, str]] = {}    # short name -> (kind, key)
        self._values: dict[str, Any] = {}                # short name -> last run's value

    # -- names -------------------------------------------------------------------
    def tensor_names(self) -> list[str]:
        """Every tensor that can be anchored, as PopART names it."""
        weights = [name for name, _ in self._model.named_parameters()]
        names = self._called + weights
        if self._training:
            trained = [name for name, p in self._model.named_parameters() if p.requires_grad]
            names += [GRADIENT + name for name in trained] + [UPDATED + name for name in trained]
        return names

    def compiled(self, called: list[str], shape: StepShape) -> None:
        """Learn the activations the model produces and check every anchor
        names one of its tensors and asks for a return period that fits."""
        self._called = called
        known = set(self.tensor_names())
        for short_name, spec in self._specs.items():
            name = spec.long_name
            if name not in known:
                modern = _modern(name)
                if modern not in known:
                    raise InvalidUseError(
                        f"anchorTensor({short_name!r}, {name!r}): the model has no tensor "
                        f"named {name!r}. poptorch_model.getTensorNames() lists its tensors, "
                        "for example 'Gradient___fc1.weight' (training), 'fc1.weight' or "
                        "'fc1/Linear:0'.")
                name = modern
            kind, key = _classify(name)
            self._targets[short_name] = (kind, key)
            own = self._shape(spec, kind, shape)
            rows, period = own.micro_batches_per_step, own.output_return_period
            if own.output_mode is enums.OutputMode.EveryN and rows % period:
                raise InvalidUseError(
                    f"anchorTensor({short_name!r}, {spec.long_name!r}): the return period "
                    f"{period} must divide the {rows} values the tensor has per call "
                    "(deviceIterations x gradientAccumulation for a tensor of each "
                    "micro-batch, deviceIterations for an updated weight).")

    @staticmethod
    def _shape(spec, kind: str, shape: StepShape) -> StepShape:
        """The shape of an anchor's values in a call: the model's, with the
        anchor's own output mode if it gives one, and one row per device
        iteration for an updated weight."""
        if spec.output_mode is not None and spec.output_mode is not enums.OutputMode.Default:
            shape = replace(shape, output_mode=spec.output_mode,
                            output_return_period=spec.output_return_period)
        return replace(shape, gradient_accumulation=1) if kind == UPDATED else shape

    # -- capture -------------------------------------------------------------------
    def capturing(self, shape: StepShape,
                  loss_scale: float) -> AbstractContextManager[_StepCapture | None]:
        """Capture the anchored tensors of one call; the values are assembled
        when the ``with`` body ends. None where nothing is anchored: the call's
        micro-batches then have nothing to close."""
        return self._capturing(shape, loss_scale) if self._specs else nullcontext()

    @contextmanager
    def _capturing(self, shape: StepShape, loss_scale: float) -> Iterator[_StepCapture]:
        capture = _StepCapture(self._targets, self._model, loss_scale)
        with capture.hooked():
            yield capture
        for short_name, spec in self._specs.items():
            kind, _ = self._targets[short_name]
            values = capture.values[short_name]
            if kind == UPDATED:   # one per update, the same on every replica
                values = [value for value in values for _ in range(shape.replicas)]
            self._values[short_name] = assemble([flatten(value) for value in values],
                                                self._shape(spec, kind, shape))

    def value(self, short_name: str) -> Any:
        """The value the last run returned for the anchor ``short_name``."""
        if short_name not in self._values:
            anchored = sorted(self._specs)
            why = ("the model has not run since it was compiled"
                   if short_name in self._specs else f"the anchored tensors are {anchored}")
            raise InvalidUseError(f"No tensor with name {short_name} found: {why}. Anchor it "
                                  "with opts.anchorTensor(short_name, long_name) before "
                                  "wrapping the model, then run the model.")
        return self._values[short_name]


class _StepCapture:
    """The hooks that record anchored values while one call computes."""

    def __init__(self, targets: dict, model: torch.nn.Module, loss_scale: float):
        self._targets = targets
        self._model = model
        self._loss_scale = loss_scale
        self.values: dict[str, list] = {short_name: [] for short_name in targets}
        self._current: dict[str, torch.Tensor] = {}
        # The parameters the anchors name, looked up once per call.
        params = dict(model.named_parameters()) if targets else {}
        self._params = {key: params[key] for kind, key in targets.values()
                        if kind in (GRADIENT, UPDATED, "weight")}

    def _wanted(self, kind: str) -> dict[str, list[str]]:
        """key -> the short names anchoring it, for one kind of tensor."""
        wanted: dict[str, list[str]] = {}
        for short_name, (target_kind, key) in self._targets.items():
            if target_kind == kind:
                wanted.setdefault(key, []).append(short_name)
        return wanted

    @contextmanager
    def hooked(self) -> Iterator[None]:
        handles = []
        gradients, outputs = self._wanted(GRADIENT), self._wanted("activation")
        for key, short_names in gradients.items():
            handles.append(self._params[key].register_hook(
                lambda grad, names=short_names: self._keep(names, grad / self._loss_scale)))
        for name, module in activation_names(self._model) if outputs else ():
            if name in outputs:
                handles.append(module.register_forward_hook(
                    lambda module, args, out, names=outputs[name]: self._keep(names, out)))
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()

    def _keep(self, short_names: list[str], value: Any) -> None:
        if isinstance(value, torch.Tensor):
            for short_name in short_names:
                self._current[short_name] = value.detach().clone()

    def micro_batch_done(self) -> None:
        """Close one micro-batch of one replica: its gradients, activations
        and weights become one value of each anchor."""
        for short_name, (kind, key) in self._targets.items():
            if kind == "weight":
                self.values[short_name].append(self._params[key].detach().clone())
            elif kind != UPDATED:
                if short_name not in self._current:
                    raise InvalidUseError(
                        f"The anchored tensor {short_name!r} ({key}) was not computed by a "
                        "micro-batch: the model skipped the module or the weight that makes "
                        "it, although it computed it when it was compiled.")
                self.values[short_name].append(self._current.pop(short_name))
        self._current.clear()

    def weights_updated(self) -> None:
        """Record the updated weights after an optimizer step."""
        for short_name, (kind, key) in self._targets.items():
            if kind == UPDATED:
                self.values[short_name].append(self._params[key].detach().clone())


def _modern(name: str) -> str:
    """PopTorch 3's name for a PopTorch 2 name (``model.`` scope dropped)."""
    for prefix in (GRADIENT, UPDATED, ""):
        if name.startswith(prefix + _LEGACY_SCOPE):
            return prefix + name[len(prefix + _LEGACY_SCOPE):]
    return name


def _classify(name: str) -> tuple[str, str]:
    """(kind, key) of a known tensor name: a gradient, an updated weight, an
    activation (key: its name) or a weight (key: the parameter name)."""
    for prefix in (GRADIENT, UPDATED):
        if name.startswith(prefix):
            return prefix, name[len(prefix):]
    if name.endswith(":0"):
        return "activation", name
    return "weight", name
