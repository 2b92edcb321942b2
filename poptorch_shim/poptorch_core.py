"""``poptorch.poptorch_core``: in PopTorch its C++ extension module; here the
part of it scripts and PopTorch's own tests reach by name: the error classes
its checks raise and ``_validateOptions``, the check of an options dict."""
import torch

from poptorch_shim.errors import Error, RecoverableError, UnrecoverableError

__all__ = ["Error", "RecoverableError", "UnrecoverableError"]

#: The PopART session options PopTorch's compiler passes on (the names its
#: popart_compiler registers, graphcore/poptorch SessionOptions.cpp), besides
#: those the shim's ``Options.toDict`` holds.
POPART_OPTIONS = frozenset("""
accumulationAndReplicationReductionType accumulationFactor aliasZeroCopy autoRecomputation
autodiffSettings.stitchStrategy automaticLossScalingSettings.binEdgeLocation
automaticLossScalingSettings.enabled automaticLossScalingSettings.gradientTensorTrackingMethod
automaticLossScalingSettings.thresholdUpperCountProportion
automaticLossScalingSettings.updatePeriod batchSerializationSettings.batchSchedule
batchSerializationSettings.concatOnExecutionPhaseChange
batchSerializationSettings.concatOnPipelineStageChange
batchSerializationSettings.concatOnVirtualGraphChange batchSerializationSettings.factor
batchSerializationSettings.method batchSerializationSettings.transformContext cachePath
compilationProgressTotal compileEngine constantWeights customCodeletCompileFlags
decomposeGradSum defaultBufferingDepth defaultPrefetchBufferingDepth delayVarUpdates
disableGradAccumulationTensorStreams disableOptimizerStateTensorStreams dotOpNames
enableDistributedReplicatedGraphs enableEngineCaching enableExplicitMainLoops
enableFloatingPointChecks enableFullyConnectedPass enableGradientAccumulation
enableInplaceAmbiguityChecking enableLoadAndOffloadRNGState enableMergeExchange
enableNonStableSoftmax enableOutlining enableOutliningCopyCostPruning enablePipelining
enablePrefetchDatastreams enableReplicatedGraphs enableSerializedMatmuls enableStableNorm
enableStochasticRounding enableSupportedDataTypeCasting ensureFp32LossScaleTensor
executionPhaseSettings.phases executionPhaseSettings.stages explicitRecomputation
exportPoplarComputationGraph exportPoplarVertexGraph finalDotOp firstDotOp globalReplicaOffset
globalReplicationFactor groupHostSync groupNormStridedChannelGrouping
instrumentWithHardwareCycleCounter kahnTieBreaker logDir looseThresholdAtPeak
meanAccumulationAndReplicationReductionStrategy mergeVarUpdate mergeVarUpdateMemThreshold name
numIOTiles opxAliasChecking opxModifyChecking outlineSequenceBreakCost outlineThreshold
partialsTypeMatMuls rearrangeAnchorsOnHost rearrangeStreamsOnHost
replicatedCollectivesSettings.mergeAllReduceCollectives
replicatedCollectivesSettings.prepareScheduleForMergingCollectives
scheduleNonWeightUpdateGradientConsumersEarly separateCallOpPdfs
serializedPoprithmsShiftGraphsDir strictOpVersions subgraphCopyingStrategy swapLimitScheduler
syntheticDataMode timeLimitScheduler transitiveClosureOptimizationThreshold useHostCopyOps
virtualGraphMode
dotChecks hardwareInstrumentations customCodelets engineOptions reportOptions
convolutionOptions matmulOptions lstmOptions gclOptions updatableNamedBuffers
saveInitializersToFile accumulateOuterFragmentSettings.schedule patterns patterns_level
enableExplicitIR compilation_progress_bar_fn enablePrefetchDatastreams
accumulateOuterFragmentSettings.excludedVirtualGraphs tensorLocationSettingsOverride
""".split())


def isCompilingWithDispatcher() -> bool:
    """Whether a model is being traced by PopTorch's dispatcher now: never after
    a compilation returns, here as in PopTorch."""
    return False


def _type_name(value) -> str | None:
    """The option type PopTorch's parser files ``value`` under (None: none)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "uint64"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple, set)):
        return "container"
    if isinstance(value, dict):
        return "dictionary"
    return None


def _validateOptions(options: dict) -> None:
    """Check an options dict (``Options.toDict()``) as PopTorch's compiler reads
    it: ``poptorch.Error`` for a value of a type no option takes ("Unknown
    value type ... for option ...") or an option it does not know ("Unknown
    bool option asdfasdf"); at DEBUG level the PopART options are logged as
    PopTorch's compiler logs them."""
    from poptorch_shim.options import Options  # the options module imports this one's errors
    own = set(Options().toDict())   # typed and range-checked when they were set
    for key, value in options.items():
        if key in own:
            continue
        kind = _type_name(value)
        if kind is None:
            shown = type(value).__name__
            if isinstance(value, torch.Tensor):
                shown = "torch.Tensor"
            raise Error(f"Unknown value type {shown} for option {key}",
                        type="poptorch_cpp_error")
        if key not in POPART_OPTIONS:
            raise Error(f"Unknown {kind} option {key}", type="poptorch_cpp_error")
    # PopTorch's compiler logs each option as it takes it.
    from poptorch_shim._execution.engine_config import log_options
    log_options({key: value for key, value in options.items() if key not in own})
