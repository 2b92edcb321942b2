"""A sweep's settings: names and values from a spec, applied to ``poptorch.Options``.

A setting is named by the PopTorch call that makes it, without ``opts.``:
``replicationFactor``, ``Training.gradientAccumulation``, ``Simulation.system``.
A list value gives the call's positional arguments (``["bow", 16]``), any
other value its one argument. Strings naming a poptorch enum member
(``"SyncPattern.SinglePipeline"``) or a torch dtype (``"torch.float16"``)
become that member or dtype; a table given to a ``set...Location`` call
becomes a ``TensorLocationSettings`` with those calls made on it.

The results table keeps these names as its columns. Where ipusim has a name
of its own for a setting (``gradient_accumulation``), the shim's table
(:mod:`poptorch_shim._core.option_names`) pairs the two: it gives the key
(:func:`~poptorch_shim._core.option_names.sweep_key`) the advisor searches
over, and tells ipusim's sweep page which column holds the setting.

A few settings are not ``Options`` calls and are named plainly:

- ``micro_batch``: the micro-batch size (the DataLoader's ``batch_size``);
- ``precision``: ``"float16"`` or ``"float32"``, the model's floating dtype;
- ``recomputation``: a ``RecomputationType`` name, PopART's ``autoRecomputation``;
- ``pipeline``: a table block id -> IPU, in execution order: a
  ``PipelinedExecution`` of one stage per block on that IPU;
- ``model.NAME``: the argument ``NAME`` of the model factory.
"""
from __future__ import annotations

from typing import Any

import torch

from poptorch_shim import enums
from poptorch_shim._options.tensor_locations import TensorLocationSettings
from poptorch_shim.options import Options
from poptorch_shim.strategies import PipelinedExecution, Stage

MICRO_BATCH, PRECISION, RECOMPUTATION, PIPELINE = "micro_batch", "precision", "recomputation", \
    "pipeline"
MODEL_PREFIX = "model."
SIMULATION_PREFIX = "Simulation."  # ipusim's own options (the machine simulated), not PopTorch's
PRECISIONS = {"float16": torch.float16, "float32": torch.float32}
# Settings that change what is measured: points that share them share a measurement.
MEASURED = (MICRO_BATCH, PRECISION, PIPELINE)

_ENUMS = {name: getattr(enums, name) for name in (
    "SyncPattern", "OutputMode", "RecomputationType", "ReductionType", "MeanReductionStrategy",
    "CommGroupType", "AutoStage")}


def is_measured(name: str) -> bool:
    """Whether the setting ``name`` changes the measured stages (a new measurement)."""
    return name in MEASURED or name.startswith(MODEL_PREFIX)


def convert(value: Any) -> Any:
    """A spec value as PopTorch takes it: enum members and dtypes from their names."""
    if isinstance(value, str):
        name = value.removeprefix("poptorch.")
        kind, _, member = name.partition(".")
        if kind in _ENUMS and member:
            try:
                return _ENUMS[kind][member]
            except KeyError:
                raise ValueError(f"{value!r}: poptorch.{kind} has no member {member!r}; its "
                                 f"members are {[m.name for m in _ENUMS[kind]]}") from None
        if value.startswith("torch.") and isinstance(getattr(torch, value[6:], None),
                                                     torch.dtype):
            return getattr(torch, value[6:])
    return value


def _location(calls: dict) -> TensorLocationSettings:
    settings = TensorLocationSettings()
    for method, argument in calls.items():
        getattr(settings, method)(argument)
    return settings


def _split(value: Any) -> tuple[list, dict]:
    """A setting's value as the positional and keyword arguments of its call: a
    table last in a list gives keywords (``["mk2", 4, {clock_hz = 1.2e9}]``)."""
    values = value if isinstance(value, list) else [value]
    keywords = values[-1] if values and isinstance(values[-1], dict) else {}
    return (values[:-1] if keywords else values), keywords


def _arguments(name: str, value: Any) -> tuple[list, dict]:
    """Positional and keyword arguments of the call, converted to the options' types."""
    values = value if isinstance(value, list) else [value]
    if name.endswith("Location") and len(values) == 1 and isinstance(values[0], dict):
        return [_location(values[0])], {}
    positional, keywords = _split(value)
    return [convert(v) for v in positional], {key: convert(v) for key, v in keywords.items()}


def _setter(options: Options, name: str):
    target = options
    parts = name.split(".")
    for part in parts:
        if part.startswith("__") or not hasattr(target, part):
            raise ValueError(f"Unknown setting {name!r}: poptorch.Options has no "
                             f"{'.'.join(parts[:parts.index(part) + 1])!r}")
        target = getattr(target, part)
    if not callable(target):
        raise ValueError(f"Unknown setting {name!r}: poptorch.Options.{name} is not a call")
    return target


def pipeline_strategy(assignment: dict[str, int]) -> PipelinedExecution:
    """A pipeline of one stage per block, each on the IPU ``assignment`` gives it."""
    if not isinstance(assignment, dict) or not assignment:
        raise ValueError(f"pipeline: expected a table of block id -> IPU, got {assignment!r}")
    return PipelinedExecution(*[Stage(block).ipu(ipu) for block, ipu in assignment.items()])


def apply(options: Options, settings: dict[str, Any]) -> Options:
    """``options`` with ``settings`` applied (the measured ones but ``pipeline``
    are left to the model; see :mod:`poptorch_shim.sweep.measure`)."""
    for name, value in settings.items():
        if name in (MICRO_BATCH, PRECISION) or name.startswith(MODEL_PREFIX):
            continue
        if name == PIPELINE:
            options.setExecutionStrategy(pipeline_strategy(value))
        elif name == RECOMPUTATION:
            options._Popart.set("autoRecomputation", int(convert(f"RecomputationType.{value}")))
        else:
            positional, keywords = _arguments(name, value)
            _setter(options, name)(*positional, **keywords)
    return options


def check_names(names) -> None:
    """Fail early, naming it, on a setting that is not a PopTorch call or a sweep setting."""
    for name in names:
        if name in (MICRO_BATCH, PRECISION, RECOMPUTATION, PIPELINE) or \
                name.startswith(MODEL_PREFIX):
            continue
        _setter(Options(), name)


def _literal(value: Any) -> str:
    value = convert(value)
    if isinstance(value, enum_types()):
        return f"poptorch.{type(value).__name__}.{value.name}"
    if isinstance(value, torch.dtype):
        return str(value)
    return repr(value)


def enum_types() -> tuple[type, ...]:
    return tuple(_ENUMS.values())


def as_code(settings: dict[str, Any]) -> str:
    """The settings as the lines of PopTorch code that make them, to paste
    after ``opts = poptorch.Options()`` (or the script's own options)."""
    lines = []
    for name, value in settings.items():
        if name == MICRO_BATCH:
            lines.append(f"# micro-batch size {value}: poptorch.DataLoader(opts, dataset, "
                         f"batch_size={value})")
        elif name == PRECISION:
            lines.append(f"# model in {value}: model.{'half' if value == 'float16' else 'float'}()")
        elif name.startswith(MODEL_PREFIX):
            lines.append(f"# model built with {name[len(MODEL_PREFIX):]}={value!r}")
        elif name == PIPELINE:
            stages = ", ".join(f'poptorch.Stage("{block}").ipu({ipu})'
                               for block, ipu in value.items())
            lines.append(f"opts.setExecutionStrategy(poptorch.PipelinedExecution({stages}))")
        elif name == RECOMPUTATION:
            # PopART's option takes the enum's value (PopTorch documents
            # `opts._Popart.set("autoRecomputation", 3)  # RecomputationType::Pipeline`).
            lines.append(f'opts._Popart.set("autoRecomputation", '
                         f'{int(enums.RecomputationType[value])})  # RecomputationType::{value}')
        elif name.startswith(SIMULATION_PREFIX):
            # ipusim's own options: what to simulate, not a PopTorch setting.
            lines.append(f"# simulated with ipusim's opts.{name}({_call_text(value)}) "
                         "(not a PopTorch option)")
        else:
            values = value if isinstance(value, list) else [value]
            if name.endswith("Location") and len(values) == 1 and isinstance(values[0], dict):
                calls = "".join(f".{method}({argument!r})" for method, argument
                                in values[0].items())
                arguments = f"poptorch.TensorLocationSettings(){calls}"
            else:
                arguments = _call_text(value)
            lines.append(f"opts.{name}({arguments})")
    return "\n".join(lines)


def _call_text(value: Any) -> str:
    """A setting's value as the arguments of its call, as code."""
    positional, keywords = _split(value)
    return ", ".join([_literal(v) for v in positional]
                     + [f"{key}={_literal(v)}" for key, v in keywords.items()])
