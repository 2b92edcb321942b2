"""The option groups reached from ``Options``: ``Training``, ``Distributed``,
``Precision``, ``Jit``, ``_Popart`` and ``Simulation`` (an ipusim extension).

Each group declares its settings (see :mod:`poptorch_shim._options.store`);
setters return the group so that calls chain, and freeze with ``Options``.
"""
import copy
import math
import os
from typing import Any

import torch

from ipusim.hardware import system_spec
from poptorch_shim import enums, popart
from poptorch_shim._core.run_settings import MAX_NUM_IPUS
from poptorch_shim._core.run_settings import current as current_settings
from poptorch_shim._options.store import (
    OptionsGroup,
    OptionSpec,
    check_value,
    count,
    require_arg,
    setter,
)

_SIM_PRESETS = ("mk2", "gc200", "mk1", "gc2", "bow")

#: The PopART session options whose value is a member of an enum, by the enum: a value
#: is checked against its members, so every value the enum offers is accepted.
_ENUM_OPTIONS = {"syntheticDataMode": popart.SyntheticDataMode,
                 "autoRecomputation": enums.RecomputationType,
                 "virtualGraphMode": popart.VirtualGraphMode,
                 "mergeVarUpdate": popart.MergeVarUpdateType,
                 "subgraphCopyingStrategy": popart.SubgraphCopyingStrategy}


class _JitOptions(OptionsGroup):
    """Options of PyTorch's JIT (``opts.Jit``)."""
    _path = "Options.Jit"
    _specs = (OptionSpec("trace_model", True, (bool,), "traceModel"),)

    @setter
    def traceModel(self, trace_model: bool) -> "_JitOptions":
        """Build the graph with ``torch.jit.trace`` (True, default) or the
        dispatcher (False); both run the same torch code here."""
        self._set("trace_model", trace_model)
        return self


class _PopartOptions(OptionsGroup):
    """Raw PopART session options (``opts._Popart``), for advanced users.

    Any key is accepted, as PopART has many; the ones the shim interprets
    (synthetic data, cycle counting, engine options, recomputation, ...) are
    type-checked here rather than at compile time.
    """
    _path = "Options._Popart"
    _initial = {"instrumentWithHardwareCycleCounter": False,
                "rearrangeAnchorsOnHost": False}
    _bools = ("instrumentWithHardwareCycleCounter", "rearrangeAnchorsOnHost",
              "enableStochasticRounding", "enableFloatingPointChecks",
              "enableStableNorm", "enableEngineCaching",
              "automaticLossScalingSettings.enabled")

    def __init__(self) -> None:
        super().__init__()
        self._raw = dict(self._initial)

    @property
    def options(self) -> dict:
        """A copy of every PopART option set so far."""
        return copy.deepcopy(self._raw)

    @setter
    def set(self, key: str, value: Any) -> "_PopartOptions":
        """Set the PopART session option ``key`` to ``value``."""
        require_arg(self._path, "set", "key", key, str)
        if key in self._bools:
            require_arg(self._path, "set", key, value, bool)
        elif key in _ENUM_OPTIONS:
            require_arg(self._path, "set", key, value, int)
            members = _ENUM_OPTIONS[key]
            if value not in set(members):
                owner = "poptorch" if members.__module__ == enums.__name__ else "popart"
                raise ValueError(
                    f"{self._path}.set: {key} must be a {owner}.{members.__name__} value "
                    f"{[(m.name, m.value) for m in members]}, got {value!r}.")
        elif key == "engineOptions":
            check_engine_options(f"{self._path}.set", value)
        self._raw[key] = copy.deepcopy(value)
        return self

    @setter
    def setEngineOptions(self, engine_options: dict) -> "_PopartOptions":
        """Set Poplar engine options such as ``{"autoReport.all": "true"}``."""
        return self.set("engineOptions", engine_options)

    @setter
    def setPatterns(self, patterns: dict, level: int = 2) -> "_PopartOptions":
        """Override PopART's default patterns (name -> enabled) at ``level``."""
        require_arg(self._path, "setPatterns", "patterns", patterns, dict)
        require_arg(self._path, "setPatterns", "level", level, int, minimum=0)
        return self.set("patterns_level", level).set("patterns", patterns)

    def get(self, key: str, default: Any = None) -> Any:
        """The value of the PopART option ``key`` (``default`` where it was never set):
        how the rest of the shim reads these options, without a copy of them all."""
        return self._raw.get(key, default)

    def _merge(self, key: str, entries: dict) -> "_PopartOptions":
        """Add ``entries`` to the dict-valued option ``key`` (PopTorch replaces
        the dict, losing what another setter put there)."""
        current = self._raw.get(key)
        return self.set(key, {**(current if isinstance(current, dict) else {}), **entries})

    def _changed(self) -> dict:
        return {k: v for k, v in self._raw.items() if self._initial.get(k, ...) != v}

    def _values(self) -> dict:
        return self.options


def check_engine_options(where: str, value: Any) -> None:
    """Poplar engine options are a dict of strings; say so, naming the culprit."""
    if not isinstance(value, dict):
        raise TypeError(f"{where}: engineOptions must be a dict of str to str, "
                        f"got {value!r} ({type(value).__name__}).")
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise TypeError(
                f"{where}: engineOptions keys and values must be strings, as "
                f"Poplar reads them, got {key!r}: {item!r}; write for example "
                f"{{'autoReport.all': 'true'}}.")


class _PrecisionOptions(OptionsGroup):
    """Numerical precision options (``opts.Precision``)."""
    _path = "Options.Precision"
    _specs = (OptionSpec("half_float_casting", enums.HalfFloatCastingBehavior.Default,
                         (enums.HalfFloatCastingBehavior,), "halfFloatCasting"),
              OptionSpec("running_statistics_always_float", True, (bool,),
                         "runningStatisticsAlwaysFloat"))

    def __init__(self, popart: _PopartOptions) -> None:
        super().__init__()
        self._popart = popart

    @setter
    def halfFloatCasting(self, half_float_casting) -> "_PrecisionOptions":
        """How ops mixing float16 and float32 operands are cast."""
        self._set("half_float_casting", half_float_casting)
        return self

    @setter
    def runningStatisticsAlwaysFloat(self, value: bool) -> "_PrecisionOptions":
        """Keep batch-norm running statistics in float32 whatever the input type."""
        self._set("running_statistics_always_float", value)
        return self

    @setter
    def enableFloatingPointExceptions(self, enabled: bool) -> "_PrecisionOptions":
        """Raise on IPU floating-point exceptions (PopART ``enableFloatingPointChecks``)."""
        return self._set_popart_flag("enableFloatingPointExceptions",
                                     "enableFloatingPointChecks", enabled)

    @setter
    def enableStochasticRounding(self, enabled: bool) -> "_PrecisionOptions":
        """Round float16 results stochastically (PopART ``enableStochasticRounding``)."""
        return self._set_popart_flag("enableStochasticRounding", "enableStochasticRounding",
                                     enabled)

    @setter
    def setPartialsType(self, dtype: torch.dtype) -> "_PrecisionOptions":
        """Type of matmul and convolution partial results: torch.float or torch.half."""
        names = {torch.float32: "float", torch.float16: "half"}
        if dtype not in names:
            raise ValueError(f"{self._path}.setPartialsType: parameter to setPartialsType "
                             f"should be either torch.float or torch.half, got {dtype!r}.")
        self._popart.set("partialsTypeMatMuls", names[dtype])
        self._popart._merge("convolutionOptions", {"partialsType": names[dtype]})
        return self

    @property
    def partials_type(self) -> torch.dtype | None:
        """The partials type set by ``setPartialsType``, None if never set."""
        name = self._popart.get("partialsTypeMatMuls")
        return {"float": torch.float32, "half": torch.float16}.get(name)

    @property
    def floating_point_exceptions(self) -> bool:
        return self._popart.get("enableFloatingPointChecks", False)

    @property
    def stochastic_rounding(self) -> bool:
        return self._popart.get("enableStochasticRounding", False)


class _TrainingOptions(OptionsGroup):
    """Options of training models only (``opts.Training``)."""
    _path = "Options.Training"
    _specs = (count("gradient_accumulation", "gradientAccumulation"),
              OptionSpec("reduction_type", enums.ReductionType.Mean,
                         (enums.ReductionType,), "accumulationAndReplicationReductionType"),
              OptionSpec("mean_reduction_strategy", enums.MeanReductionStrategy.Post,
                         (enums.MeanReductionStrategy,),
                         "setMeanAccumulationAndReplicationReductionStrategy"))

    def __init__(self, popart: _PopartOptions) -> None:
        super().__init__()
        self._popart = popart

    @setter
    def gradientAccumulation(self, gradient_accumulation: int) -> "_TrainingOptions":
        """Accumulate gradients over this many micro-batches per weight update."""
        self._set("gradient_accumulation", gradient_accumulation)
        return self

    @setter
    def accumulationAndReplicationReductionType(self, reduction_type) -> "_TrainingOptions":
        """Combine gradients across micro-batches and replicas by Mean (default) or Sum."""
        if reduction_type is enums.ReductionType.NoReduction:
            raise ValueError(f"{self._path}.accumulationAndReplicationReductionType must be "
                             "set to poptorch.ReductionType.Mean or poptorch.ReductionType.Sum, "
                             "got ReductionType.NoReduction.")
        self._set("reduction_type", reduction_type)
        return self

    @setter
    def setMeanAccumulationAndReplicationReductionStrategy(
            self, mean_reduction_strategy) -> "_TrainingOptions":
        """When a Mean reduction divides (see ``poptorch.MeanReductionStrategy``)."""
        self._set("mean_reduction_strategy", mean_reduction_strategy)
        return self

    @setter
    def setAutomaticLossScaling(self, enabled: bool) -> "_TrainingOptions":
        """Let the IPU adjust the loss scale during float16 training."""
        return self._set_popart_flag("setAutomaticLossScaling",
                                     "automaticLossScalingSettings.enabled", enabled)

    @setter
    def setConvolutionDithering(self, enabled: bool) -> "_TrainingOptions":
        """Spread convolutions with different parameters over different tiles."""
        require_arg(self._path, "setConvolutionDithering", "enabled", enabled, bool)
        self._popart._merge("convolutionOptions", {"enableConvDithering": enabled})
        return self

    @property
    def automatic_loss_scaling(self) -> bool:
        return self._popart.get("automaticLossScalingSettings.enabled", False)

    # PopTorch's names for what these setters set.
    @property
    def accumulation_and_replication_reduction_type(self) -> enums.ReductionType:
        """What ``accumulationAndReplicationReductionType`` set (``reduction_type``)."""
        return self._store.get("reduction_type")

    @property
    def meanAccumulationAndReplicationReductionStrategy(self) -> enums.MeanReductionStrategy:
        """What ``setMeanAccumulationAndReplicationReductionStrategy`` set."""
        return self._store.get("mean_reduction_strategy")


class _DistributedOptions(OptionsGroup):
    """Options of multi-process runs (``opts.Distributed``).

    Reads OpenMPI's ``OMPI_COMM_WORLD_RANK`` / ``OMPI_COMM_WORLD_SIZE`` at
    construction, as PopTorch does; use ``popdist.poptorch.Options`` under poprun.
    """
    _path = "Options.Distributed"
    _specs = (count("process_id", "configureProcessId", default=0, minimum=0),
              count("num_processes", "configureProcessId"))

    def __init__(self) -> None:
        super().__init__()
        self._store_from_env("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "__init__")

    @setter
    def disable(self) -> "_DistributedOptions":
        """Ignore the environment and run as a single process."""
        return self.configureProcessId(0, 1)

    @setter
    def setEnvVarNames(self, var_num_processes: str, var_process_id: str) -> "_DistributedOptions":
        """Read the process count and id from these environment variables."""
        self._store_from_env(var_num_processes, var_process_id, "setEnvVarNames")
        return self

    @setter
    def configureProcessId(self, process_id: int, num_processes: int) -> "_DistributedOptions":
        """Set this process's id (0 to num_processes - 1) and the process count."""
        self._store_ids(process_id, num_processes, "configureProcessId")
        return self

    def _store_from_env(self, var_num_processes: str, var_process_id: str, method: str) -> None:
        values = []
        for var, default in ((var_process_id, "0"), (var_num_processes, "1")):
            text = os.environ.get(var, default)
            try:
                values.append(int(text))
            except ValueError:
                raise ValueError(f"{self._path}.{method}: environment variable {var} "
                                 f"must hold an integer, got {text!r}.") from None
        self._store_ids(values[0], values[1], method)

    def _store_ids(self, process_id: int, num_processes: int, method: str) -> None:
        require_arg(self._path, method, "process_id", process_id, int, minimum=0)
        require_arg(self._path, method, "num_processes", num_processes, int, minimum=1)
        if process_id >= num_processes:
            raise ValueError(
                f"{self._path}.{method}: process_id must be below num_processes "
                f"(ids run from 0 to {num_processes - 1}), got process_id={process_id} "
                f"with num_processes={num_processes}.")
        self._set("process_id", process_id)
        self._set("num_processes", num_processes)

    @property
    def processId(self) -> int:
        """Id of the current process."""
        return self._store.get("process_id")

    @property
    def numProcesses(self) -> int:
        """Total number of processes the execution is distributed over."""
        return self._store.get("num_processes")

    # PopTorch's names for the same two settings.
    distributed_process_id = processId
    num_distributed_processes = numProcesses


class _SimulationOptions(OptionsGroup):
    """The simulated IPU system (``opts.Simulation``): an ipusim extension with
    no PopTorch counterpart, ignored by real PopTorch scripts.

    Values are stored as plain data; ipusim turns them into a system and a
    cost model when the model is compiled.
    """
    _path = "Options.Simulation"
    _specs = (OptionSpec("preset", "mk2", (str,), "system"),
              OptionSpec("num_ipus", None, (int,), "system", minimum=1, nullable=True),
              OptionSpec("overrides", {}, (dict,), "system"),
              OptionSpec("cost_overrides", {}, (dict,), "costModel"),
              OptionSpec("loader_rate", None, (int, float), "loaderRate", nullable=True),
              OptionSpec("timing_only", False, (bool,), "timingOnly"))

    @property
    def runs_timing_only(self) -> bool:
        """Whether models run timing-only: ``timingOnly`` or the run's settings
        (``ipusim run --timing-only``, ``IPUSIM_TIMING_ONLY=1``)."""
        return bool(self._store.get("timing_only") or current_settings().timing_only)

    @setter
    def system(self, preset: str = "mk2", num_ipus: int | None = None,
               **overrides) -> "_SimulationOptions":
        """Simulate ``num_ipus`` IPUs of ``preset`` ("mk2"/"gc200", "mk1"/"gc2"
        or "bow"; None: the simulated machine's IPUs, ``IPUSIM_NUM_IPUS`` or
        16), with hardware figures
        overridden by keyword, e.g. ``system("mk2", 8, clock_hz=1.2e9)``.
        Each call replaces the previous system."""
        require_arg(self._path, "system", "preset", preset, str)
        if preset.lower() not in _SIM_PRESETS:
            raise ValueError(f"{self._path}.system: unknown preset {preset!r}; expected one "
                             f"of {list(_SIM_PRESETS)}.")
        check_value(self._path, self._store.spec("num_ipus"), num_ipus)
        _check_plain(f"{self._path}.system", overrides)
        if num_ipus is not None and num_ipus > MAX_NUM_IPUS:
            raise ValueError(f"{self._path}.system: num_ipus must be at most {MAX_NUM_IPUS} "
                             f"(an IPU-POD1024), got {num_ipus}.")
        try:  # the figures as ipusim checks them, now rather than at compile
            system_spec(preset, num_ipus or 1, **overrides)
        except ValueError as error:
            raise ValueError(f"{self._path}.system: {error}.") from None
        self._set("preset", preset.lower())
        self._set("num_ipus", num_ipus)
        self._set("overrides", overrides)
        return self

    @setter
    def costModel(self, **overrides) -> "_SimulationOptions":
        """Override cost-model parameters by keyword (replacing earlier ones)."""
        _check_plain(f"{self._path}.costModel", overrides)
        self._set("cost_overrides", overrides)
        return self

    @setter
    def timingOnly(self, enabled: bool = True) -> "_SimulationOptions":
        """Simulate without computing: each stage is measured once on fake
        tensors (shapes and dtypes, no data), every micro-batch of every
        replica is then only simulated. Outputs keep PopTorch's shapes and
        dtypes but hold NaN (floating point) or zeros, and the weights are
        not updated. ``IPUSIM_TIMING_ONLY=1`` turns it on for every model."""
        check_value(self._path, self._store.spec("timing_only"), enabled)
        self._set("timing_only", enabled)
        return self

    @setter
    def loaderRate(self, items_per_second: float | None) -> "_SimulationOptions":
        """Tell the report's bottleneck verdict that the host data loader
        delivers this many items per second, instead of the rate measured on
        the real ``poptorch.DataLoader`` (its CPU time per step on the simulated
        host's ``host_cpu_cores``); None goes back to measuring it."""
        check_value(self._path, self._store.spec("loader_rate"), items_per_second)
        if items_per_second is not None and not 0 < items_per_second < math.inf:   # NaN too
            raise ValueError(f"{self._path}.loaderRate: items_per_second must be a positive "
                             f"finite number, got {items_per_second!r}.")
        self._set("loader_rate", items_per_second)
        return self


def _check_plain(where: str, overrides: dict) -> None:
    for key, value in overrides.items():
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise TypeError(f"{where}: override {key} must be a number or a str, "
                            f"got {value!r} ({type(value).__name__}).")
