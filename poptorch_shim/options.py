"""``poptorch.Options``: every setting that controls how a model is compiled and
run, grouped as in PopTorch (``Training``, ``Distributed``, ``TensorLocations``,
``Precision``, ``Jit``, ``_Popart``) plus ``Simulation``, an ipusim extension
that picks the simulated IPU system.

Settings are set with camelCase methods that return the group, so calls chain
(``opts.deviceIterations(4).replicationFactor(2)``), and read as snake_case
attributes (``opts.device_iterations``). Options freeze when first handed to a
model or a DataLoader (``_freeze()``); after that every setter raises
:class:`~poptorch_shim.errors.FrozenOptionsError`, and ``clone()`` gives an
unfrozen copy. Subclasses may override any setter and store values with
``self._set(key, value)`` (see :mod:`poptorch_shim._options.store`).

The groups are in :mod:`poptorch_shim._options.groups`, except
``TensorLocations`` and ``TensorLocationSettings``, which are in
:mod:`poptorch_shim._options.tensor_locations` (re-exported here).
"""
import copy
import dataclasses
import json
import logging
import os
import warnings
from typing import Any

import torch

from poptorch_shim import enums
from poptorch_shim._options.groups import (
    _DistributedOptions,
    _JitOptions,
    _PopartOptions,
    _PrecisionOptions,
    _SimulationOptions,
    _TrainingOptions,
    check_engine_options,
)
from poptorch_shim._options.sources import apply_environment, load_file
from poptorch_shim._options.store import (
    OptionsGroup,
    OptionSpec,
    check_value,
    count,
    require_arg,
    setter,
)
from poptorch_shim._options.tensor_locations import TensorLocationSettings, _TensorLocationOptions
from poptorch_shim.errors import ConfigFileError  # noqa: F401  (poptorch.options.ConfigFileError)
from poptorch_shim.strategies import PipelinedExecution

#: PopTorch's executable cache directory, applied to every new ``Options``.
CACHE_DIR_ENV = "POPTORCH_CACHE_DIR"
#: The longest name, in bytes, a folder may have (the model name names its profile's).
NAME_MAX = 255

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class AnchorSpec:
    """A tensor to return from every run besides the outputs
    (``Options.anchorTensor``): its PopART name and the output mode it is
    returned with (None: the model's own output mode)."""

    long_name: str
    output_mode: enums.OutputMode | None = None
    output_return_period: int = 1

    def toDict(self) -> dict:
        """Plain values: the output mode by name (None: the model's own)."""
        mode = None if self.output_mode is None else self.output_mode.name
        return {"long_name": self.long_name, "output_mode": mode,
                "output_return_period": self.output_return_period}


class Options(OptionsGroup):
    """Every option controlling how a model is compiled and run.

    >>> opts = poptorch.Options().deviceIterations(10)
    >>> opts.Training.gradientAccumulation(4)

    Read back as ``opts.device_iterations``, ``opts.replication_factor``,
    ``opts.input_group_size``, ``opts.output_mode``, ``opts.output_return_period``,
    ``opts.execution_strategy``, ``opts.sync_pattern``, ``opts.random_seed``,
    ``opts.model_name``, ``opts.use_model``, ``opts.ipu_id`` and the derived
    properties below.
    """

    _ENGINE_OPTIONS = ("Engine options are set with opts._Popart.setEngineOptions({...}) "
                       "(or opts._Popart.set(\"engineOptions\", {...})); "
                       "opts.engine_options reads them.")
    _elsewhere = {"engineOptions": _ENGINE_OPTIONS, "setEngineOptions": _ENGINE_OPTIONS}
    _path = "Options"
    _specs = (count("device_iterations", "deviceIterations"),
              count("replication_factor", "replicationFactor"),
              count("input_group_size", "inputReplicaGrouping"),
              OptionSpec("input_group_type", enums.CommGroupType.NoGrouping,
                         (enums.CommGroupType,), "inputReplicaGrouping"),
              OptionSpec("output_mode", enums.OutputMode.Default, (enums.OutputMode,),
                         "outputMode"),
              count("output_return_period", "outputMode"),
              OptionSpec("execution_strategy", None, (object,), "setExecutionStrategy",
                         nullable=True),
              OptionSpec("sync_pattern", enums.SyncPattern.Full, (enums.SyncPattern,),
                         "syncPattern"),
              OptionSpec("random_seed", None, (int,), "randomSeed", nullable=True),
              OptionSpec("model_name", None, (str,), "modelName", nullable=True),
              OptionSpec("use_model", False, (bool,), "useIpuModel"),
              OptionSpec("ipu_id", None, (int,), "useIpuId", minimum=0, nullable=True),
              OptionSpec("log_dir", ".", (str,), "logDir"),
              OptionSpec("auto_round_num_ipus", False, (bool,), "autoRoundNumIPUs"),
              OptionSpec("connection_type", enums.ConnectionType.Always,
                         (enums.ConnectionType,), "connectionType"),
              OptionSpec("ipu_version", None, (int,), "useOfflineIpuTarget", minimum=1,
                         nullable=True),
              OptionSpec("broadcast_buffers", True, (bool,), "broadcastBuffers"),
              OptionSpec("anchored_tensors", {}, (dict,), "anchorTensor"),
              OptionSpec("available_memory_proportion", {}, (dict,),
                         "setAvailableMemoryProportion"),
              OptionSpec("show_compilation_progress_bar", True, (bool,),
                         "showCompilationProgressBar"),
              OptionSpec("relax_optimizer_checks", False, (bool,),
                         "relaxOptimizerAttributesChecks"),
              OptionSpec("module_namescope_enabled", True, (bool,), "disableModuleNamescope"),
              OptionSpec("max_repeat_logs", 4, (int,), "maxRepeatLogs", minimum=0))

    def __init__(self) -> None:
        super().__init__()
        self._popart = _PopartOptions()
        self._training = _TrainingOptions(self._popart)
        self._precision = _PrecisionOptions(self._popart)
        self._distributed = _DistributedOptions()
        self._tensor_locations = _TensorLocationOptions()
        self._jit = _JitOptions()
        self._simulation = _SimulationOptions()
        cache = os.environ.get(CACHE_DIR_ENV, "")
        if cache:
            logger.info("%s is set: setting cache path to %s", CACHE_DIR_ENV, cache)
            self.enableExecutableCaching(cache)
        apply_environment(self)

    # -- groups ------------------------------------------------------------------
    @property
    def Training(self) -> _TrainingOptions:
        return self._training

    @property
    def Distributed(self) -> _DistributedOptions:
        return self._distributed

    @property
    def TensorLocations(self) -> _TensorLocationOptions:
        return self._tensor_locations

    @property
    def Precision(self) -> _PrecisionOptions:
        return self._precision

    @property
    def Jit(self) -> _JitOptions:
        return self._jit

    @property
    def Simulation(self) -> _SimulationOptions:
        """The simulated system (ipusim extension)."""
        return self._simulation

    @property
    def _Popart(self) -> _PopartOptions:
        return self._popart

    @property
    def Popart(self) -> _PopartOptions:
        """Deprecated alias of ``_Popart``."""
        warnings.warn("Options.Popart is deprecated; use Options._Popart instead.",
                      DeprecationWarning, stacklevel=2)
        return self._popart

    # -- setters -------------------------------------------------------------------
    @setter
    def loadFromFile(self, filepath: str) -> "Options":
        """Set options from a file of setter calls, one a line, written as in
        Python without the ``options.`` prefix (``deviceIterations(4)``);
        blank lines and ``#`` comments are skipped. A line that is not valid
        Python raises ``poptorch.options.ConfigFileError`` naming it."""
        require_arg(self._path, "loadFromFile", "filepath", filepath, str)
        load_file(self, filepath)
        return self

    @setter
    def deviceIterations(self, device_iterations: int) -> "Options":
        """Run this many micro-batch iterations on the device per call."""
        self._set("device_iterations", device_iterations)
        return self

    @setter
    def replicationFactor(self, replication_factor: int) -> "Options":
        """Replicate the model over this many IPUs (or groups of IPUs)."""
        self._set("replication_factor", replication_factor)
        return self

    @setter
    def inputReplicaGrouping(self, input_group_size: int, input_group_type) -> "Options":
        """Give each group of ``input_group_size`` replicas the same input
        (grouped ``Consecutive`` or ``Orthogonal``); ``NoGrouping`` gives every
        replica its own and ignores the size."""
        check_value(self._path, self._store.spec("input_group_type"), input_group_type)
        if input_group_type is enums.CommGroupType.All:
            raise ValueError(f"{self._path}.inputReplicaGrouping: CommGroupType.All is not "
                             "valid for input grouping; use Consecutive, Orthogonal or "
                             "NoGrouping.")
        check_value(self._path, self._store.spec("input_group_size"), input_group_size)
        if input_group_type is enums.CommGroupType.NoGrouping:
            input_group_size = 1
        self._set("input_group_size", input_group_size)
        self._set("input_group_type", input_group_type)
        return self

    @setter
    def outputMode(self, output_mode, output_return_period: int | None = None) -> "Options":
        """Which results to return: ``All``, ``Sum``, ``Final``, ``EveryN`` (every
        ``output_return_period``-th micro-batch) or ``Default``."""
        check_value(self._path, self._store.spec("output_mode"), output_mode)
        if output_mode is enums.OutputMode.EveryN:
            if output_return_period is None:
                raise ValueError(f"{self._path}.outputMode: EveryN anchor must have "
                                 "output_return_period set to valid positive integer N, e.g. "
                                 "outputMode(poptorch.OutputMode.EveryN, 10).")
            check_value(self._path, self._store.spec("output_return_period"),
                        output_return_period)
        elif output_return_period is not None:
            logger.info("output_return_period=%r ignored with output mode %s",
                        output_return_period, output_mode.name)
            output_return_period = None
        self._set("output_return_period", output_return_period or 1)
        self._set("output_mode", output_mode)
        return self

    def defaultOutputMode(self) -> bool:
        """Whether the output mode is still ``OutputMode.Default``."""
        return self._store.get("output_mode") is enums.OutputMode.Default

    def resolved_output_mode(self, training: bool) -> enums.OutputMode:
        """The output mode a model uses: ``Default`` becomes ``Final`` for
        training and ``All`` for inference."""
        mode = self._store.get("output_mode")
        if mode is not enums.OutputMode.Default:
            return mode
        return enums.OutputMode.Final if training else enums.OutputMode.All

    @setter
    def enableSyntheticData(self, enabled: bool) -> "Options":
        """Generate data on the IPU instead of copying it from the host."""
        require_arg(self._path, "enableSyntheticData", "enabled", enabled, bool)
        self._popart.set("syntheticDataMode", 2 if enabled else 0)
        return self

    @setter
    def setExecutionStrategy(self, strategy: Any) -> "Options":
        """Partition the model with this strategy (Pipelined, Sharded, phased)."""
        self._set("execution_strategy", strategy)
        return self

    @setter
    def syncPattern(self, sync_pattern) -> "Options":
        """How IPUs synchronise (``poptorch.SyncPattern``)."""
        self._set("sync_pattern", sync_pattern)
        return self

    @setter
    def randomSeed(self, random_seed: int) -> "Options":
        """Seed the IPU's random generator; also seeds torch, as PopTorch does."""
        self._set("random_seed", random_seed)
        torch.manual_seed(random_seed)
        return self

    @setter
    def logCycleCount(self, log_cycle_count: bool) -> "Options":
        """Count the cycles of each run, read with ``model.cycleCount()``."""
        return self._set_popart_flag("logCycleCount", "instrumentWithHardwareCycleCounter",
                                     log_cycle_count, name="log_cycle_count")

    @setter
    def enableProfiling(self, profile_dir: str | None = None) -> "Options":
        """Write a profile report under ``profile_dir`` (default: current
        directory), in a sub-directory named for the model."""
        if profile_dir is not None:
            require_arg(self._path, "enableProfiling", "profile_dir", profile_dir, str)
        self._popart._merge("engineOptions", {"debug.allowOutOfMemory": "true",
                                              "autoReport.directory": profile_dir or ".",
                                              "autoReport.all": "true"})
        return self

    @setter
    def modelName(self, name: str) -> "Options":
        """Name of the model: names its profile sub-directory, so a name longer than a
        folder's name may be (255 bytes) is refused here, not when the report is
        written at the end of the script."""
        size = len(name.encode("utf-8", "surrogatepass")) if isinstance(name, str) else 0
        if size > NAME_MAX:
            raise ValueError(f"Options.modelName: model_name names the model's profile folder, "
                             f"at most {NAME_MAX} bytes; got {size} bytes ({name[:32]!r}...)")
        self._set("model_name", name)
        return self

    @setter
    def useIpuModel(self, use_model: bool) -> "Options":
        """Use Poplar's IPU Model instead of hardware (both are simulated here)."""
        self._set("use_model", use_model)
        return self

    @setter
    def useIpuId(self, ipu_id: int) -> "Options":
        """Use the IPU device with this id, as listed by ``gc-info``."""
        self._set("ipu_id", ipu_id)
        return self

    @setter
    def logDir(self, log_dir: str) -> "Options":
        """Directory where PopTorch saves its log files (default: the current one)."""
        self._set("log_dir", log_dir)
        return self

    @setter
    def autoRoundNumIPUs(self, auto_round_num_ipus: bool = True) -> "Options":
        """Round the number of IPUs requested up to a power of two instead of
        failing (IPU devices come in powers of two)."""
        self._set("auto_round_num_ipus", auto_round_num_ipus)
        return self

    @setter
    def connectionType(self, connection_type) -> "Options":
        """When to attach to the IPUs: ``Always`` (default), ``OnDemand`` (when
        first run) or ``Never`` (compile only: running the model raises)."""
        self._set("connection_type", connection_type)
        return self

    @setter
    def useOfflineIpuTarget(self, ipu_version: int = 2) -> "Options":
        """Compile for an IPU of this version (1: Mk1, 2: Mk2) without attaching
        to one: sets ``connectionType(ConnectionType.Never)``, so the model can
        be compiled but not run."""
        check_value(self._path, self._store.spec("ipu_version"), ipu_version)
        self._set("connection_type", enums.ConnectionType.Never)
        self._set("ipu_version", ipu_version)
        return self

    @setter
    def setAvailableMemoryProportion(self, available_memory_proportion: dict) -> "Options":
        """The proportion of each IPU's memory that convolutions and matmuls may
        use for temporary values, e.g. ``{"IPU0": 0.5, "IPU1": 0.3}``: stored
        as ``{0: 0.5, 1: 0.3}``: each IPU's matmuls and convolutions are planned
        within it (:func:`ipusim.cost.operator_model.plan_matmul`)."""
        require_arg(self._path, "setAvailableMemoryProportion", "available_memory_proportion",
                    available_memory_proportion, dict)
        proportions = {}
        for key, proportion in available_memory_proportion.items():
            index = key[3:] if isinstance(key, str) and key.startswith("IPU") else ""
            if not index.isdigit():
                raise ValueError(
                    f"{self._path}.setAvailableMemoryProportion: Available memory proportions "
                    "are expected to be in a dictionary of {\"IPU0\": 0.5} where the 0 in IPU "
                    f"is the index of the IPU. Invalid key: {key}")
            require_arg(self._path, "setAvailableMemoryProportion", key, proportion, float, int)
            if not 0 < proportion <= 1:
                raise ValueError(f"{self._path}.setAvailableMemoryProportion: the proportion of "
                                 f"{key} must be in (0, 1], got {proportion!r}.")
            proportions[int(index)] = float(proportion)
        self._set("available_memory_proportion", proportions)
        return self

    @setter
    def enableExecutableCaching(self, path: str | None) -> "Options":
        """Cache compiled executables under ``path`` (None: no caching), as
        ``POPTORCH_CACHE_DIR`` does (recorded: compiling is not simulated)."""
        if path is None:
            self._popart.set("enableEngineCaching", False)
        else:
            require_arg(self._path, "enableExecutableCaching", "path", path, str)
            self._popart.set("cachePath", path)
            self._popart.set("enableEngineCaching", True)
        return self

    @setter
    def updatableNamedBuffers(self, buffers: list[str]) -> "Options":
        """The model's named buffers that ``copyNamedBuffersToDevice()`` writes to the
        device: a subset of its tensors updated from the host without copying all
        its weights (PopART's ``updatableNamedBuffers``)."""
        require_arg(self._path, "updatableNamedBuffers", "buffers", buffers, list, tuple)
        for name in buffers:
            require_arg(self._path, "updatableNamedBuffers", "buffers[...]", name, str)
        self._popart.set("updatableNamedBuffers", list(buffers))
        return self

    @setter
    def enableStableNorm(self, enabled: bool) -> "Options":
        """Use the slower, more accurate form of the norm operators."""
        return self._set_popart_flag("enableStableNorm", "enableStableNorm", enabled)

    @setter
    def showCompilationProgressBar(self, show: bool = True) -> "Options":
        """Show a progress bar while the model compiles (the default)."""
        self._set("show_compilation_progress_bar", show)
        return self

    @setter
    def relaxOptimizerAttributesChecks(self, relax: bool = True) -> "Options":
        """Log unexpected optimizer attributes at debug level instead of warning."""
        self._set("relax_optimizer_checks", relax)
        return self

    @setter
    def disableModuleNamescope(self) -> "Options":
        """Do not prefix operator names with their module's name."""
        self._set("module_namescope_enabled", False)
        return self

    @setter
    def maxRepeatLogs(self, max_lines: int | None) -> "Options":
        """Log an often-repeated line at most ``max_lines`` times (None: every
        time; default 4). Recorded as PopTorch records it; the shim repeats no
        per-operation log lines for it to limit."""
        self._set("max_repeat_logs", (1 << 64) - 1 if max_lines is None else max_lines)
        return self

    @setter
    def broadcastBuffers(self, broadcast_buffers: bool = True) -> "Options":
        """Broadcast the model's buffers to every replica (default True)."""
        self._set("broadcast_buffers", broadcast_buffers)
        return self

    @setter
    def anchorTensor(self, short_name: str, long_name: str, output_mode=None,
                     output_return_period: int | None = 1) -> "Options":
        """Return the tensor PopART names ``long_name`` from every run, read
        back with ``model.getAnchoredTensor(short_name)``; ``model.getTensorNames()``
        lists the names. ``output_mode`` (None: the model's own) and
        ``output_return_period`` (for ``EveryN``) choose which micro-batches'
        values come back, as ``outputMode`` does for the outputs."""
        require_arg(self._path, "anchorTensor", "short_name", short_name, str)
        require_arg(self._path, "anchorTensor", "long_name", long_name, str)
        if output_mode is not None:
            check_value(self._path, self._store.spec("output_mode"), output_mode)
        if output_mode is enums.OutputMode.EveryN:
            require_arg(self._path, "anchorTensor", "output_return_period",
                        output_return_period, int, minimum=1)
        else:
            output_return_period = 1
        anchors = self._store.get("anchored_tensors")
        anchors[short_name] = AnchorSpec(long_name, output_mode, output_return_period)
        self._set("anchored_tensors", anchors)
        return self

    # -- derived read accessors -------------------------------------------------------
    @property
    def _execution_strategy(self):
        """The execution strategy as PopTorch's private attribute holds it: the
        one set, else PopTorch's default, ``PipelinedExecution()``."""
        strategy = self._store.get("execution_strategy")
        return PipelinedExecution.default() if strategy is None else strategy

    @property
    def synthetic_data(self) -> bool:
        return self._popart.get("syntheticDataMode", 0) != 0

    @property
    def updatable_named_buffers(self) -> tuple[str, ...] | None:
        """The buffers ``updatableNamedBuffers`` named; None if it was never called."""
        names = self._popart.get("updatableNamedBuffers")
        return None if names is None else tuple(names)

    @property
    def log_cycle_count(self) -> bool:
        return bool(self._popart.get("instrumentWithHardwareCycleCounter", False))

    @property
    def engine_options(self) -> dict:
        """Poplar engine options: those set here, overridden by the JSON in
        ``POPLAR_ENGINE_OPTIONS`` as Poplar does."""
        merged = dict(self._popart.get("engineOptions", {}))
        text = os.environ.get("POPLAR_ENGINE_OPTIONS", "")
        if text:
            try:
                from_env = json.loads(text)
            except json.JSONDecodeError as error:
                raise ValueError(f"POPLAR_ENGINE_OPTIONS must hold a JSON object, got "
                                 f"{text!r} ({error}).") from None
            check_engine_options("POPLAR_ENGINE_OPTIONS", from_env)
            merged.update(from_env)
        return merged

    @property
    def profile_dir(self) -> str | None:
        """Where profile reports go, or None when profiling is off."""
        engine = self.engine_options
        if engine.get("autoReport.all", "").lower() != "true":
            return None
        return engine.get("autoReport.directory", ".")

    @property
    def recomputation(self) -> enums.RecomputationType:
        """The ``autoRecomputation`` mode set with ``_Popart.set``."""
        return enums.RecomputationType(self._popart.get("autoRecomputation", 0))

    @property
    def recomputation_set(self) -> bool:
        """Whether the script set ``autoRecomputation`` itself (PopTorch's default
        for pipelined models then yields to it)."""
        return self._popart.get("autoRecomputation") is not None

    # -- use, copy, print ---------------------------------------------------------------
    def _freeze(self) -> None:
        """Check the options agree with each other, then refuse every later
        change; called when the options are first used."""
        replicas, group = self._store.get("replication_factor"), self._store.get("input_group_size")
        if replicas % group:
            raise ValueError(
                f"{self._path}.inputReplicaGrouping: input_group_size ({group}) must divide "
                f"replication_factor ({replicas}) so that the replicas form whole groups; "
                f"choose a group size that divides {replicas}.")
        super()._freeze()

    def _groups(self) -> dict:
        return {"Training": self._training, "Distributed": self._distributed,
                "TensorLocations": self._tensor_locations, "Precision": self._precision,
                "Jit": self._jit, "Simulation": self._simulation, "_Popart": self._popart}

    def toDict(self) -> dict:
        """Every setting in one flat dict (a copy): the values of this group,
        ``Training``, ``Distributed`` and ``TensorLocations`` under their
        snake_case names, locations as PopART dicts and anchors as dicts
        (``AnchorSpec.toDict``), the PopART options under
        their own names and the simulation settings prefixed ``sim_``. The
        execution strategy, an object, is left out."""
        out = self._store.values()
        del out["execution_strategy"]
        out["anchored_tensors"] = {short_name: spec.toDict() for short_name, spec
                                   in out["anchored_tensors"].items()}
        out.update(self._training._values())
        out.update(self._distributed._values())
        for key, value in self._tensor_locations._values().items():
            out[key] = value.toDict() if isinstance(value, TensorLocationSettings) else value
        out.update(self._popart.options)
        out.update({f"sim_{key}": value for key, value in self._simulation._values().items()})
        return out

    def clone(self) -> "Options":
        """An unfrozen deep copy."""
        return copy.deepcopy(self)

    def __repr__(self) -> str:
        """Every setting, then every group, as PopTorch prints options: two
        options print alike exactly when they hold the same settings."""
        parts = self._repr_parts() + [f"{name}={group!r}" for name, group
                                      in self._groups().items()]
        return f"{type(self).__name__}({', '.join(parts)})"
