"""PopTorch's public enums, with PopTorch's member names and integer values.

The values match PopTorch (and, for :class:`RecomputationType`, PopART's
``autoRecomputation`` session option) so that integers users pass through
``Options._Popart.set`` mean the same thing here as on real hardware.
"""
import enum


class OutputMode(enum.IntEnum):
    """Which results a model returns for the micro-batches of one step.

    - ``All``: a result for each micro-batch.
    - ``Sum``: the sum of the results of all the micro-batches.
    - ``Final``: the result of the last micro-batch only.
    - ``EveryN``: the result of every N-th micro-batch, N being the
      ``output_return_period`` given to ``Options.outputMode``.
    - ``Default``: ``All`` for inference, ``Final`` for training.
    """
    Final = 0
    EveryN = 1
    All = 2
    Sum = 3
    Default = 4


class MatMulSerializationMode(enum.Enum):
    """Which dimension ``serializedMatMul`` splits, for ``lhs`` m x n times ``rhs`` n x p.

    - ``InputChannels``: m; ``ReducingDim``: n; ``OutputChannels``: p;
    - ``Disabled``: none, an ordinary multiplication.
    """
    InputChannels = "input_channels"
    ReducingDim = "reducing_dim"
    OutputChannels = "output_channels"
    Disabled = "none"


class SyncPattern(enum.IntEnum):
    """How IPUs are placed in the two sync groups GS1 (host I/O) and GS2.

    - ``Full``: every IPU is in both groups, so any host transfer stalls them
      all.
    - ``SinglePipeline``: each IPU meets the host on its own (GS1 per IPU).
    - ``ReplicaAndLadder``: halves of the IPUs alternate between host I/O and
      compute (GS1 per half), as phased execution wants.
    """
    Full = 0
    SinglePipeline = 1
    ReplicaAndLadder = 2


class DataLoaderMode(enum.IntEnum):
    """How ``poptorch.DataLoader`` reads the dataset.

    - ``Sync``: in the calling process, one batch when asked.
    - ``Async``: through an ``AsynchronousDataAccessor`` worker process.
    - ``AsyncRebatched``: like ``Async``, but the torch workers load batches
      of ``rebatched_worker_size`` (by default the combined batch size) and
      the accessor re-assembles them into full steps, so an iterable dataset
      split over many workers loses fewer items to rounding.
    """
    Sync = 0
    Async = 1
    AsyncRebatched = 2


class SharingStrategy(enum.IntEnum):
    """How an ``AsynchronousDataAccessor`` starts its worker and shares data.

    - ``SharedMemory``: spawn, share tensors through shared memory.
    - ``FileSystem``: spawn, share tensors through files (default).
    - ``Fork``: fork, no sharing needed.
    - ``ForkServer``: fork from a single-threaded server process.
    """
    SharedMemory = 0
    FileSystem = 1
    Fork = 2
    ForkServer = 3


class ReductionType(enum.IntEnum):
    """How gradients are combined across micro-batches and replicas.

    ``Options.Training.accumulationAndReplicationReductionType`` accepts
    ``Sum`` and ``Mean`` (the default) only.
    """
    Sum = 0
    Mean = 1
    NoReduction = 2


class MeanReductionStrategy(enum.IntEnum):
    """When a ``Mean`` reduction divides by the number of micro-batches.

    - ``Running``: keep a running mean (numerically safest).
    - ``Post``: sum, then divide once at the end (default, faster).
    - ``PostAndLoss``: deprecated legacy behaviour.
    """
    Running = 0
    Post = 1
    PostAndLoss = 2


class RecomputationType(enum.IntEnum):
    """Which forward activations are recomputed in the backward pass instead
    of being stashed; the values of PopART's ``autoRecomputation`` option.

    - ``NoRecompute``: stash everything (default).
    - ``Standard``: recompute from checkpoints chosen to cut peak liveness.
    - ``NormOnly``: recompute normalisation ops (and following
      non-linearities) only.
    - ``Pipeline``: keep only each pipeline stage's inputs and recompute the
      stage's forward pass before its backward pass.
    - ``RecomputeAll``: recompute every op.
    """
    NoRecompute = 0
    Standard = 1
    NormOnly = 2
    Pipeline = 3
    RecomputeAll = 4


class CommGroupType(enum.IntEnum):
    """How replicas are grouped, for example by ``Options.inputReplicaGrouping``.

    With N replicas and group size k:

    - ``All``: one group of every replica (not valid for input grouping).
    - ``Consecutive``: ``{0..k-1}, {k..2k-1}, ...``.
    - ``Orthogonal``: with m = N/k groups, ``{0, m, 2m, ...}, {1, m+1, ...}``.
    - ``NoGrouping``: every replica on its own; the group size is ignored.
    """
    All = 0
    Consecutive = 1
    Orthogonal = 2
    NoGrouping = 3


class HalfFloatCastingBehavior(enum.IntEnum):
    """How an op mixing float16 and float32 operands is cast.

    - ``FloatDowncastToHalf``: cast every operand to float16.
    - ``HalfUpcastToFloat``: follow PyTorch and promote to float32.
    - ``Default``: ``FloatDowncastToHalf`` when tracing.
    """
    FloatDowncastToHalf = 0
    HalfUpcastToFloat = 1
    Default = 2


class AutoStage(enum.IntEnum):
    """How blocks without an explicit stage are given one.

    - ``SameAsIpu``: the stage id is the block's IPU id.
    - ``AutoIncrement``: each new block gets the next stage id.
    """
    SameAsIpu = 0
    AutoIncrement = 1


class Liveness(enum.IntEnum):
    """Where tensors live between phases of phased execution.

    - ``AlwaysLive``: on chip throughout.
    - ``OffChipAfterFwd``: sent off chip after the forward pass.
    - ``OffChipAfterFwdNoOverlap``: the same, without overlapping the loads and
      stores of neighbouring phases (less memory, more time).
    - ``OffChipAfterEachPhase``: sent off chip after every phase.
    """
    AlwaysLive = 0
    OffChipAfterFwd = 1
    OffChipAfterFwdNoOverlap = 2
    OffChipAfterEachPhase = 3


class ConnectionType(enum.IntEnum):
    """When a model attaches to its IPUs.

    - ``Always``: from the start (default).
    - ``OnDemand``: once it is compiled and first run.
    - ``Never``: never; the model can be compiled (offline compilation) but
      running it raises.
    """
    Always = 0
    OnDemand = 1
    Never = 2
