"""The model of a sweep and its measurements, one per distinct stage signature.

A model comes from a factory or from the first model a PopTorch script
compiles. Measuring it (timing-only: forward and backward of one
micro-batch on fake tensors) gives the ipusim :class:`Work` every point
with the same signature shares: the same model arguments, pipeline split,
micro-batch size and precision. Replicas, gradient accumulation, sync
pattern, system and the rest only change how that work runs.
"""
from __future__ import annotations

import copy
import hashlib
import importlib
import pickle
import warnings
from dataclasses import dataclass, replace
from typing import Any

import torch

from ipusim import Work
from ipusim.cost.optimizer import DEFAULT_PROGRAM, UpdateProgram
from poptorch_shim import enums
from poptorch_shim._core.compile_hooks import compiling, registerPreCompileHook
from poptorch_shim._core.run_settings import RunSettings
from poptorch_shim._execution.executor import PoplarExecutor
from poptorch_shim._run.runner import install_aliases
from poptorch_shim.options import Options
from poptorch_shim.sweep import settings as sweep_settings
from poptorch_shim.sweep.spec import ModelError, ModelSource

# Batching the measurement runs under: only the stages' costs are kept, so it
# is chosen to pass every check (a pipeline of up to this many stages).
_MEASURE_REPEATS = 1024
_MEASURE_IPUS = 64


@dataclass
class ModelCase:
    """A model ready to wrap: the torch model, one micro-batch of inputs, its
    options (never frozen), optimizer and whether it trains."""

    model: torch.nn.Module
    inputs: tuple
    kwargs: dict
    options: Options
    training: bool = True
    optimizer: torch.optim.Optimizer | None = None


@dataclass(frozen=True)
class Measured:
    """What a measurement gives a point: the work, and how the model asked to run it."""

    work: Work
    training: bool
    strategy: Any  # the execution strategy the stages were placed by (None: one stage)
    overlap: tuple[bool, bool]  # overlapped input / output stream copies asked for
    optimizer: UpdateProgram = DEFAULT_PROGRAM  # the weight update's operators

    @property
    def fingerprint(self) -> str:
        """A hash of what was measured: the work, training or not, the overlap, the
        optimizer's program."""
        measured = (self.work, self.training, self.overlap, self.optimizer)
        try:
            data = pickle.dumps(measured, protocol=4)
        except Exception:  # something in the work that does not pickle: its text
            data = repr(measured).encode()
        return hashlib.sha256(data).hexdigest()[:16]


def signature(point_settings: dict[str, Any]) -> dict[str, Any]:
    """The settings of a point that change its measurement."""
    return {name: value for name, value in sorted(point_settings.items())
            if sweep_settings.is_measured(name)}


def from_factory(source: ModelSource, model_arguments: dict[str, Any]) -> ModelCase:
    """Call ``module:function`` with the spec's and the point's model arguments."""
    module_name, _, function_name = source.factory.partition(":")
    install_aliases()  # the factory's module may `import poptorch`
    try:
        factory = getattr(importlib.import_module(module_name), function_name)
    except Exception as error:  # missing, or its module fails to import
        raise ModelError(f"[model] factory {source.factory!r} cannot be loaded: "
                         f"{type(error).__name__}: {error}") from None
    arguments = {**source.kwargs, **model_arguments}
    try:
        made = factory(**arguments)
    except Exception as error:
        raise ModelError(f"[model] factory {source.factory!r} raised {type(error).__name__}: "
                         f"{error} (called with {arguments})") from None
    if isinstance(made, ModelCase):
        return made
    if not isinstance(made, tuple) or len(made) not in (3, 4) or \
            not isinstance(made[0], torch.nn.Module) or not isinstance(made[2], Options):
        raise ModelError(f"[model] factory {source.factory!r} must return (model, inputs, "
                         f"options) or (model, inputs, options, optimizer), got "
                         f"{type(made).__name__}")
    model, inputs, options, *optimizer = made
    inputs = inputs if isinstance(inputs, tuple) else (inputs,)
    return ModelCase(model, inputs, {}, options.clone(), training=True,
                     optimizer=optimizer[0] if optimizer else None)


class _Captured(Exception):
    """Stops a script at its first compile, once its model is captured."""


def from_script(source: ModelSource) -> ModelCase:
    """The first model the script compiles (or runs), with its options and
    first micro-batch; the script stops there."""
    from poptorch_shim._run.runner import run_script

    captured: list[ModelCase] = []

    def capture() -> None:
        executor, (args, kwargs) = compiling()
        captured.append(ModelCase(executor.model, tuple(args), dict(kwargs),
                                  executor.options.clone(), executor.training,
                                  executor._optimizer if executor.training else None))
        raise _Captured

    handle = registerPreCompileHook(capture)   # PopTorch's own hook: the shim is untouched
    settings = replace(RunSettings.from_environment(), timing_only=True)
    try:  # a script's sys.exit comes back as run_script's status
        status = run_script(source.script, list(source.args), settings)
        if status and not captured:
            raise ModelError(f"[model] script {source.script} exited (status {status}) "
                             "before compiling a poptorch model")
    except _Captured:
        pass
    except FileNotFoundError:
        raise ModelError(f"[model] script {source.script}: no such file") from None
    except ModelError:
        raise
    except Exception as error:
        raise ModelError(f"[model] script {source.script} raised {type(error).__name__}: "
                         f"{error}") from None
    finally:
        handle.remove()
    if not captured:
        raise ModelError(f"[model] script {source.script} ended without compiling or running a "
                         "poptorch model (trainingModel or inferenceModel)")
    return captured[0]


def _resized(value: Any, old: int, new: int) -> Any:
    """Tensors whose first dimension is the micro-batch, at ``new`` samples:
    a stride-0 view of the first sample (measuring reads shapes only)."""
    if isinstance(value, torch.Tensor) and value.dim() and value.shape[0] == old:
        return value[:1].expand(new, *value.shape[1:])
    if isinstance(value, (tuple, list)):
        return type(value)(_resized(v, old, new) for v in value)
    if isinstance(value, dict):
        return {key: _resized(v, old, new) for key, v in value.items()}
    return value


def _in_precision(value: Any, dtype: torch.dtype) -> Any:
    if isinstance(value, torch.Tensor) and value.is_floating_point():
        return value.to(dtype)
    if isinstance(value, (tuple, list)):
        return type(value)(_in_precision(v, dtype) for v in value)
    if isinstance(value, dict):
        return {key: _in_precision(v, dtype) for key, v in value.items()}
    return value


def micro_batch_size(case: ModelCase) -> int:
    """Samples in the case's micro-batch: the first dimension of its first tensor."""
    for value in (*case.inputs, *case.kwargs.values()):
        if isinstance(value, torch.Tensor) and value.dim():
            return value.shape[0]
    raise ValueError("the model's inputs hold no tensor with a batch dimension")


def measure(case: ModelCase, point_settings: dict[str, Any]) -> Measured:
    """Measure ``case`` with the point's measured settings, timing-only."""
    model, inputs, kwargs = case.model, case.inputs, case.kwargs
    optimizer = case.optimizer if case.training else None
    precision = point_settings.get(sweep_settings.PRECISION)
    if precision is not None:
        if precision not in sweep_settings.PRECISIONS:
            raise ValueError(f"precision must be one of {sorted(sweep_settings.PRECISIONS)}, "
                             f"got {precision!r}")
        dtype = sweep_settings.PRECISIONS[precision]
        # Copied together, the optimizer holds the copy's parameters, which ``to`` casts
        # in place: its update is then priced in the point's precision.
        model, optimizer = copy.deepcopy((model, optimizer))
        model = model.to(dtype)
        inputs, kwargs = _in_precision(inputs, dtype), _in_precision(kwargs, dtype)
    size = point_settings.get(sweep_settings.MICRO_BATCH)
    if size is not None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise ValueError(f"micro_batch must be a positive integer, got {size!r}")
        old = micro_batch_size(case)
        inputs, kwargs = _resized(inputs, old, size), _resized(kwargs, old, size)
    options = case.options.clone()
    if sweep_settings.PIPELINE in point_settings:
        options.setExecutionStrategy(
            sweep_settings.pipeline_strategy(point_settings[sweep_settings.PIPELINE]))
    options.replicationFactor(1)
    options.inputReplicaGrouping(1, enums.CommGroupType.Consecutive)
    options.deviceIterations(1 if case.training else _MEASURE_REPEATS)
    options.Training.gradientAccumulation(_MEASURE_REPEATS if case.training else 1)
    options.outputMode(enums.OutputMode.Final)
    simulation = options.Simulation
    simulation.system(simulation.preset, _MEASURE_IPUS, **simulation.overrides)
    options.Simulation.timingOnly(True)
    options._Popart.set("engineOptions", {"debug.allowOutOfMemory": "true"})
    executor = PoplarExecutor(model, options, case.training, optimizer)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        executor._compile((tuple(inputs), dict(kwargs)))
    run = executor.device.run
    return Measured(executor.device.work, case.training, executor._runner.strategy,
                    (run.overlap_inputs, run.overlap_outputs), run.optimizer)


class Measurements:
    """The model's measurements, one per distinct signature, made on first use."""

    def __init__(self, source: ModelSource):
        self.source = source
        self._cases: dict[str, ModelCase] = {}
        self._measured: dict[str, Measured | Exception] = {}
        self._code: str | None = None

    @property
    def code(self) -> str:
        """A hash of the model's code (:class:`ModelError` if there is none to read)."""
        if self._code is None:
            self._code = self.source.code_hash()
        return self._code

    def case(self, point_settings: dict[str, Any]) -> ModelCase:
        """The model case for the point's model arguments (built once each)."""
        arguments = {name[len(sweep_settings.MODEL_PREFIX):]: value
                     for name, value in point_settings.items()
                     if name.startswith(sweep_settings.MODEL_PREFIX)}
        key = repr(sorted(arguments.items()))
        if key not in self._cases:
            if self.source.script is not None:
                if arguments:
                    raise ModelError(f"model arguments {sorted(arguments)} need a model factory; "
                                     f"the model comes from the script {self.source.script}")
                self._cases[key] = from_script(self.source)
            else:
                self._cases[key] = from_factory(self.source, arguments)
        return self._cases[key]

    def get(self, point_settings: dict[str, Any]) -> Measured:
        """The measurement the point needs (measured now if it is the first)."""
        key = repr(signature(point_settings))
        if key not in self._measured:
            case = self.case(point_settings)  # a model that cannot be built ends the sweep
            try:
                self._measured[key] = measure(case, point_settings)
            except Exception as error:  # every point of the signature fails the same way
                self._measured[key] = error
        measured = self._measured[key]
        if isinstance(measured, Exception):
            raise measured
        return measured

    def __len__(self) -> int:
        return len(self._measured)
