"""``import popart``: the enums and constants of PopART's Python module, as the
Poplar SDK installs it beside PopTorch.

PopTorch users and the libraries over PopTorch (optimum-graphcore, for one)
import PopART for its enums, to pass their values to ``opts._Popart.set``:
``int(popart.SubgraphCopyingStrategy.JustInTime)``. Each enum here has
PopART's name, members and values (read from PopART's Python bindings and
its C++ headers); a member converts to its int and prints as
``Enum.Member``, as pybind11's enums do. PopART's IR (``Builder``, sessions,
``SessionOptions``, ``Patterns``, devices) is not simulated: reading one of
those names raises an ``AttributeError`` that says so.
"""
from __future__ import annotations

import enum

__version__ = "3.3.0+ipusim"

#: The ONNX opset versions PopART's builder defaults to.
defaultAiOnnxOpset = 10
defaultAiOnnxMlOpset = 1
defaultAiGraphcoreOpset = 1


class _PopartEnum(enum.IntEnum):
    """An int-valued enum that prints as ``Enum.Member``, as PopART's do."""

    def __str__(self) -> str:
        return f"{type(self).__name__}.{self.name}"


def _enum(name: str, **members: int) -> type[_PopartEnum]:
    return _PopartEnum(name, members, module=__name__)


# Session options: what ``opts._Popart.set(key, int(value))`` takes.
AccumulateOuterFragmentSchedule = _enum(
    "AccumulateOuterFragmentSchedule",
    Scheduler=0, Serial=1, OverlapCycleOptimized=2, OverlapMemoryOptimized=3)
AutodiffStitchStrategy = _enum(
    "AutodiffStitchStrategy",
    RecomputeMinimal=0, RecomputeAllNonInputs=1, AddFwdOutputs=2, SafeAddFwdOutputs=3)
BatchSerializationBatchSchedule = _enum(
    "BatchSerializationBatchSchedule",
    Scheduler=0, Isomorphic=1, OverlapOnIo=2, OverlapOnCompute=3)
BatchSerializationMethod = _enum(
    "BatchSerializationMethod", UnrollDynamic=0, UnrollStatic=1, Loop=2)
BatchSerializationTransformContext = _enum(
    "BatchSerializationTransformContext", Forward=0, Backward=1, Fwd=0, Bwd=1)
ExecutionPhaseIOSchedule = _enum("ExecutionPhaseIOSchedule", Preload=0, OnDemand=1)
ExecutionPhaseSchedule = _enum(
    "ExecutionPhaseSchedule", Interleaving=0, Batch=1, BatchClusteredIO=2)
GradientTensorTrackingMethod = _enum(
    "GradientTensorTrackingMethod", AllNonViewChangingGradientTensors=0,
    ConvAndMatmulGradients=1, GradientsOfUserSpecifiedTensors=2)
Instrumentation = _enum("Instrumentation", Outer=0, Inner=1)
IrSerializationFormat = _enum("IrSerializationFormat", JSON=0)
MeanReductionStrategy = _enum("MeanReductionStrategy", Running=0, Post=1)
MergeVarUpdateType = _enum("MergeVarUpdateType", Off=0, All=1, AutoLoose=2, AutoTight=3)
PatternsLevel = _enum("PatternsLevel", NoPatterns=0, Minimal=1, Default=2, All=3)
RecomputationType = _enum(
    "RecomputationType", NoRecompute=0, Standard=1, NormOnly=2, Pipeline=3, RecomputeAll=4)
SubgraphCopyingStrategy = _enum("SubgraphCopyingStrategy", OnEnterAndExit=0, JustInTime=1)
SyncPattern = _enum("SyncPattern", Full=0, SinglePipeline=1, ReplicaAndLadder=2)
SyntheticDataMode = _enum("SyntheticDataMode", Off=0, Zeros=1, RandomNormal=2, RandomUniform=3)
VirtualGraphMode = _enum("VirtualGraphMode", Off=0, Manual=1, Auto=2, ExecutionPhases=3)

# Tensors, reductions, replicas and optimizers.
AnchorReturnTypeId = _enum("AnchorReturnTypeId", Final=0, EveryN=1, All=2, Sum=3)
CommGroupType = _enum("CommGroupType", All=0, Consecutive=1, Orthogonal=2, Ungrouped=3)
ExchangeStrategy = _enum(
    "ExchangeStrategy", JustInTime=0, OverlapInnerLoop=1, OverlapLoops=2, OverlapStep=3)
InitType = _enum("InitType", NoInit=0, Zero=1)
RecomputeType = _enum("RecomputeType", Undefined=0, Checkpoint=1, Recompute=2, Recomputed=3)
ReductionType = _enum("ReductionType", Sum=0, Mean=1, NoReduction=2)
ReplicatedStreamMode = _enum("ReplicatedStreamMode", Broadcast=0, Replicate=1)
ReplicatedTensorSharding = _enum("ReplicatedTensorSharding", Off=0, On=1)
ScatterReduction = _enum("ScatterReduction", Sum=0, Max=1, Min=2, Mul=3, NoReduction=4)
TensorRemapType = _enum("TensorRemapType", FwdBwdReverse=0, FwdBwd=1, Fwd=2)
TensorStorage = _enum("TensorStorage", OnChip=0, OffChip=1)
TileSet = _enum("TileSet", Compute=0, IO=1)
VariableRetrievalMode = _enum(
    "VariableRetrievalMode", OnePerGroup=0, AllReduceReplicas=1, AllReplicas=2)
WeightDecayMode = _enum("WeightDecayMode", Decay=0, L2Regularization=1)

# Devices.
DeviceConnectionType = _enum("DeviceConnectionType", Always=0, OnDemand=1, Never=2)
DeviceSelectionCriterion = _enum("DeviceSelectionCriterion", First=0, Random=1)
DeviceType = _enum("DeviceType", IpuModel=0, Cpu=1, Ipu=2, OfflineIpu=3, Sim=4)


def syncPatternFromString(name: str) -> SyncPattern:
    """The ``SyncPattern`` PopART spells ``name`` (``"full"``, ``"singlePipeline"``,
    ``"replicaAndLadder"``)."""
    for member in SyncPattern:
        if syncPatternToString(member) == name:
            return member
    raise ValueError(f"Unknown SyncPattern {name!r}: PopART spells them "
                     f"{[syncPatternToString(m) for m in SyncPattern]}.")


def syncPatternToString(pattern: SyncPattern) -> str:
    """PopART's spelling of ``pattern``: its name with a lower-case first letter."""
    name = SyncPattern(pattern).name
    return name[0].lower() + name[1:]


def versionString() -> str:
    """The PopART version this module stands for (the SDK's, 3.3.0)."""
    return __version__.split("+")[0]


# What reads or builds PopART's IR: refused, with the reason.
_IR = ("Builder", "InferenceSession", "TrainingSession", "SessionOptions", "Patterns",
       "DeviceManager", "DeviceInfo", "TensorInfo", "DataFlow", "AnchorReturnType",
       "Optimizer", "ConstSGD", "SGD", "Adam", "Adaptive", "OptimizerValue",
       "ClipNormSettings", "InputShapeInfo", "ir", "getLogger", "getSupportedOperations")


def __getattr__(name: str):
    if name in _IR:
        raise AttributeError(
            f"popart.{name}: ipusim simulates PopTorch's programs, not PopART's IR; only "
            "PopART's enums and constants are here (run PopART's own API on a Poplar SDK).")
    raise AttributeError(f"module 'popart' has no attribute {name!r}")
