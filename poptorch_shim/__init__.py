"""poptorch_shim: PopTorch's Python API over the ipusim simulator.

Run an unmodified PopTorch script with ``python -m poptorch_shim SCRIPT.py``:
``import poptorch`` then resolves to this package. The public API is
re-exported here from thin modules; the machinery lives in one private
package per subsystem (``_data``, ``_options``, ``_optim``, ``_execution``,
``_distributed``, ``_run``), over ``_core``, what several of them share
(ARCHITECTURE.md has the map).
"""
from poptorch_shim import (  # noqa: F401  (_impl: poptorch._impl)
    _impl,
    ops,
    optim,
    poptorch_core,
    profiling,
)
from poptorch_shim._core import run_settings as _run_settings
from poptorch_shim._data.async_data_accessor import AsynchronousDataAccessor
from poptorch_shim._data.data_loader import DataLoader
from poptorch_shim.annotations import (
    Attribute,
    OverlapMode,
    recomputationCheckpoint,
    set_available_memory,
    set_overlap_for_input,
    set_overlap_for_output,
)
from poptorch_shim.blocks import BeginBlock, Block, BlockFunction, module_repr, removeBlocks
from poptorch_shim.compile_hooks import registerPostCompileHook, registerPreCompileHook
from poptorch_shim.control_flow import cond, for_loop
from poptorch_shim.custom_args import ICustomArgParser, registerCustomArgParser
from poptorch_shim.enums import (
    AutoStage,
    CommGroupType,
    ConnectionType,
    DataLoaderMode,
    HalfFloatCastingBehavior,
    Liveness,
    MatMulSerializationMode,
    MeanReductionStrategy,
    OutputMode,
    RecomputationType,
    ReductionType,
    SharingStrategy,
    SyncPattern,
)
from poptorch_shim.errors import Error, RecoverableError, UnrecoverableError
from poptorch_shim.ipu_context import isRunningOnIpu
from poptorch_shim.logging_level import level_from_environment as _level_from_environment
from poptorch_shim.logging_level import setLogLevel
from poptorch_shim.losses import identity_loss
from poptorch_shim.model import PoplarExecutor, inferenceModel, trainingModel
from poptorch_shim.ops import (
    custom_op,
    dynamic_slice,
    dynamic_update,
    ipu_print_tensor,
    nop,
    registerCustomOp,
    serializedMatMul,
)
from poptorch_shim.options import Options, TensorLocationSettings
from poptorch_shim.strategies import (
    ParallelPhasedExecution,
    Phase,
    PipelinedExecution,
    SerialPhasedExecution,
    ShardedExecution,
    Stage,
)

__version__ = "3.3.0+ipusim"
# The IPU version PopTorch reports for each simulated system's IPUs.
_IPU_VERSIONS = {"mk1": 1, "gc2": 1, "mk2": 2, "gc200": 2, "bow": 2}

_level_from_environment()  # POPTORCH_LOG_LEVEL, read at import as PopTorch does


def ipuHardwareIsAvailable(num_ipus: int = 1) -> bool:
    """Whether the simulated machine has at least ``num_ipus`` IPUs."""
    return num_ipus <= _run_settings.available_ipus()


def ipuHardwareVersion() -> int:
    """The IPU version of the simulated machine: of the system a new
    ``poptorch.Options()`` simulates (Mk2 GC200 IPUs unless
    ``POPTORCH_DEFAULT_OPTIONS`` sets ``Simulation.system``), 1 for Mk1 (GC2), 2 for
    Mk2 and Bow, as PopTorch reports on that hardware. A model may simulate
    another system with its own Options; this is the machine's."""
    return _IPU_VERSIONS[Options().Simulation.preset]


__all__ = [
    "AsynchronousDataAccessor", "Attribute", "AutoStage", "BeginBlock", "Block", "BlockFunction",
    "CommGroupType", "ConnectionType", "DataLoader", "DataLoaderMode", "Error",
    "HalfFloatCastingBehavior", "ICustomArgParser", "Liveness", "MatMulSerializationMode",
    "MeanReductionStrategy",
    "Options", "OutputMode", "ParallelPhasedExecution", "Phase", "PipelinedExecution",
    "PoplarExecutor", "RecomputationType", "RecoverableError",
    "ReductionType", "SerialPhasedExecution", "ShardedExecution", "SharingStrategy", "Stage",
    "SyncPattern", "TensorLocationSettings", "UnrecoverableError", "cond", "custom_op",
    "identity_loss", "dynamic_slice", "dynamic_update", "for_loop", "inferenceModel",
    "ipu_print_tensor", "nop", "registerCustomOp", "set_available_memory", "ipuHardwareIsAvailable",
    "ipuHardwareVersion", "isRunningOnIpu", "module_repr", "ops", "optim",
    "OverlapMode",
    "poptorch_core", "profiling", "recomputationCheckpoint", "registerCustomArgParser",
    "registerPostCompileHook", "registerPreCompileHook", "removeBlocks", "serializedMatMul",
    "setLogLevel", "set_overlap_for_input", "set_overlap_for_output", "trainingModel",
]
