"""The work description: what a model costs, independent of how it is run.

ipusim never sees a torch model. It sees stages with costs per micro-batch
(FLOPs, bytes of memory traffic, operator count), the bytes that cross
between stages and to the host, and where each stage lives. A user can write
one by hand ("timing-only") or let ``poptorch_shim`` measure it from a real
model.
"""
from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field

# The one check of every public dataclass's fields, kept in the lowest layer
# (the hardware specs use it too) and re-exported here.
from ipusim.hardware.specs import check_amount, check_type


class KernelKind(str, enum.Enum):
    """How the IPU runs an operator: which unit of the tile does the work."""

    MATMUL = "matmul"                  # the AMP: matmuls, and convolutions as implicit GEMM
    ELEMENTWISE = "elementwise"        # vector unit, about one 64-bit vector a cycle
    TRANSCENDENTAL = "transcendental"  # vector unit: exp, log, tanh, sigmoid, GELU, softmax
    DIVIDE = "divide"                  # vector unit: divide, sqrt, rsqrt
    NORMALISE = "normalise"            # batch/group/layer norm: statistics, then whitening
    NORMALISE_GRAD = "normalise_grad"  # their backward: the statistics' and parameters' gradients
    SOFTMAX = "softmax"                # softmax and log-softmax: max, exp, sum, scale
    SOFTMAX_GRAD = "softmax_grad"      # their backward
    POOL = "pool"                      # max pooling: popnn's pooling vertex (m rows of n, k taps)
    POOL_GRAD = "pool_grad"            # its backward: popnn's MaxPoolingGrad
    DROPOUT = "dropout"                # poprand's dropout: the mask drawn and applied at once
    GATHER = "gather"                  # embedding lookups and their gradients: multi-slice
    DATA = "data"                      # other gathers, scatters, copies: exchange-bound


def check_element_width(owner: str, width) -> None:
    """Refuse an element width that is not 1, 2, 4 or 8 bytes, naming ``owner.width``."""
    check_amount(owner, "width", width, integer=True)
    if width not in (1, 2, 4, 8):
        raise ValueError(f"{owner}width must be 1, 2, 4 or 8 bytes, got {width!r}")


@dataclass(frozen=True)
class Kernel:
    """One operator as the IPU would run it, for the operator-level compute model.

    A matmul is ``groups`` independent products of an (m x k) by a (k x n)
    matrix; a convolution is one in implicit-GEMM form (m output positions, k
    input channels times kernel taps, n output channels). The other kinds work
    on ``elements`` elements; pooling on ``m`` output rows of ``n`` outputs with
    ``k`` kernel positions. ``width`` is the bytes of one input element: 2
    for fp16/bf16, 4 for fp32. ``bytes`` is everything read and written.
    ``regroup`` is the bytes of a matmul operand rearranged into the AMP's
    layout first: in a backward pass, the transposed weights or activations.
    A convolution's implicit GEMM counts each input element once per kernel
    position (``taps``, at ``stride``): in ``k`` for the forward and the input
    gradient (``taps_on="k"``, the field's positions the rows), in ``n`` for the
    weight gradient (``taps_on="n"``, the positions ``k``); the operand crosses
    the exchange as its field with a halo, not as those copies.
    ``op`` names the framework operator it comes from (``aten::addmm``), for
    the reports; it takes no part in the price. ``available_memory``: the
    proportion of tile memory a matmul's plan may use, set on this operator
    alone (PopTorch's ``set_available_memory``); None: the cost model's.
    """

    kind: KernelKind
    width: int = 4
    m: int = 0
    k: int = 0
    n: int = 0
    groups: int = 1
    elements: int = 0
    bytes: int = 0
    regroup: int = 0
    taps: int = 1
    stride: int = 1
    taps_on: str = "k"
    op: str = ""
    available_memory: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", KernelKind(self.kind))
        check_type("Kernel.", "op", self.op, str)
        check_element_width("Kernel.", self.width)
        for name in ("m", "k", "n", "elements", "bytes", "regroup"):
            check_amount("Kernel.", name, getattr(self, name), integer=True)
        check_amount("Kernel.", "groups", self.groups, integer=True)
        if self.groups < 1:
            raise ValueError(f"Kernel.groups must be at least 1, got {self.groups!r}")
        for name in ("taps", "stride"):
            check_amount("Kernel.", name, getattr(self, name), integer=True, positive=True)
        if self.taps_on not in ("k", "n"):
            raise ValueError(f"Kernel.taps_on must be 'k' or 'n', got {self.taps_on!r}")
        if self.available_memory is not None:
            check_amount("Kernel.", "available_memory", self.available_memory, fraction=True)
        if self.regroup and self.kind is not KernelKind.MATMUL:
            raise ValueError(f"Kernel.regroup is for matmuls, got regroup={self.regroup} on a "
                             f"{self.kind.value} kernel")


def _merge_kernels(*lists: tuple[tuple[Kernel, int], ...]) -> tuple[tuple[Kernel, int], ...]:
    """Kernel counts of several costs added together, identical kernels counted once."""
    counts: dict[Kernel, int] = {}
    for kernels in lists:
        for kernel, count in kernels:
            counts[kernel] = counts.get(kernel, 0) + count
    return tuple(counts.items())


@dataclass(frozen=True)
class Cost:
    """The cost of one piece of compute on one micro-batch.

    A cost measured from a real model lists its operators as ``kernels``
    (each with how many times it runs), and the cost model prices them one by
    one; a hand-written cost gives only ``flops`` and ``bytes``, priced by a
    roofline. ``flops``, ``bytes`` and ``ops`` are kept either way for the
    reports.
    """

    flops: float = field(default=0.0, metadata={"help": "floating-point operations"})
    bytes: float = field(default=0.0, metadata={"help": "bytes read and written in SRAM"})
    ops: int = field(default=0, metadata={"help": "operators (compute sets), each a BSP superstep"})
    time_ps: int = field(default=0, metadata={"help": "fixed extra time in picoseconds"})
    kernels: tuple[tuple[Kernel, int], ...] = field(
        default=(), metadata={"help": "the operators, as (kernel, times it runs); empty: "
                                      "priced from flops and bytes"})

    def __post_init__(self) -> None:
        for name in ("flops", "bytes"):
            check_amount("Cost.", name, getattr(self, name))
        for name in ("ops", "time_ps"):
            check_amount("Cost.", name, getattr(self, name), integer=True)
        check_type("Cost.", "kernels", self.kernels, (tuple, list))
        object.__setattr__(self, "kernels", tuple(self.kernels))
        for entry in self.kernels:
            if not (isinstance(entry, tuple) and len(entry) == 2
                    and isinstance(entry[0], Kernel)):
                raise ValueError(f"Cost.kernels must hold (Kernel, count) pairs, got {entry!r}")
            check_amount("Cost.kernels: the count of ", repr(entry[0]), entry[1], integer=True)

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.flops + other.flops, self.bytes + other.bytes,
                    self.ops + other.ops, self.time_ps + other.time_ps,
                    _merge_kernels(self.kernels, other.kernels))


@dataclass(frozen=True)
class Stage:
    """A contiguous part of the model placed on one IPU of a replica."""

    name: str
    ipu: int = field(default=0, metadata={"help": "IPU of the replica the stage runs on"})
    forward: Cost = field(default=Cost(), metadata={"help": "forward pass, one micro-batch"})
    backward: Cost = field(default=Cost(), metadata={"help": "backward pass, one micro-batch"})
    recompute: Cost | None = field(
        default=None, metadata={"help": "forward recomputed before backward; None: the forward"})
    update: Cost | None = field(
        default=None, metadata={"help": "weight update; None: derived from weight_bytes"})
    accumulate: Cost | None = field(
        default=None, metadata={"help": "with gradient accumulation, the optimizer's adds into "
                                        "the accumulators after each micro-batch's backward; "
                                        "None: derived from weight_bytes"})
    activation_bytes: int = field(
        default=0, metadata={"help": "bytes of the stage's output for one micro-batch"})
    stash_bytes: int = field(
        default=0, metadata={"help": "activations kept for the backward, one micro-batch"})
    weight_bytes: int = field(default=0, metadata={"help": "parameters held by the stage"})
    weight_tensors: int = field(
        default=0, metadata={"help": "parameter tensors the stage holds, each updated by its "
                                     "own operators; 0: one tensor if it has weights"})
    weight_sizes: tuple[int, ...] = field(
        default=(), metadata={"help": "bytes of each parameter tensor, each of whose "
                                      "gradients the replicas all-reduce on its own; (): "
                                      "weight_tensors tensors of equal size"})
    optimizer_bytes: int = field(default=0, metadata={"help": "optimizer state of the stage"})
    checkpoint_bytes: int = field(
        default=0, metadata={"help": "recomputation checkpoints of one micro-batch: what "
                                     "recomputation keeps besides the stage's input"})
    segment_stash_bytes: int | None = field(
        default=None, metadata={"help": "the most activations recomputing one segment between "
                                        "checkpoints holds; None: stash_bytes (one segment)"})

    def __post_init__(self) -> None:
        check_type("Stage.", "name", self.name, str)
        owner = f"Stage {self.name!r}: "
        if not isinstance(self.ipu, int) or isinstance(self.ipu, bool) or self.ipu < 0:
            raise ValueError(f"{owner}ipu must be a non-negative integer, got {self.ipu!r}")
        check_amount(owner, "ipu", self.ipu, integer=True)
        for name in ("activation_bytes", "stash_bytes", "weight_bytes", "weight_tensors",
                     "optimizer_bytes", "checkpoint_bytes"):
            check_amount(owner, name, getattr(self, name), integer=True)
        check_amount(owner, "segment_stash_bytes", self.segment_stash_bytes, integer=True,
                     optional=True)
        check_type(owner, "weight_sizes", self.weight_sizes, (tuple, list))
        object.__setattr__(self, "weight_sizes", tuple(self.weight_sizes))
        for size in self.weight_sizes:
            check_amount(owner, "weight_sizes", size, integer=True)
        for name in ("forward", "backward"):
            check_type(owner, name, getattr(self, name), Cost)
        for name in ("recompute", "update", "accumulate"):
            check_type(owner, name, getattr(self, name), Cost, optional=True)

    @property
    def parameter_tensors(self) -> int:
        """The parameter tensors the optimizer updates: as given, or one if the stage
        has weights and says no more."""
        return self.weight_tensors or (1 if self.weight_bytes else 0)

    @property
    def parameter_sizes(self) -> tuple[int, ...]:
        """Bytes of each parameter tensor: as given where they add up to the
        stage's weights, else its :attr:`parameter_tensors` of equal size (the
        first taking what does not divide)."""
        if self.weight_sizes and sum(self.weight_sizes) == self.weight_bytes:
            return self.weight_sizes
        tensors = self.parameter_tensors
        if not tensors:
            return ()
        size, rest = divmod(self.weight_bytes, tensors)
        return (size + rest,) + (size,) * (tensors - 1)

    @property
    def recompute_stash_bytes(self) -> int:
        """Activations held while one micro-batch is recomputed and backpropagated."""
        segment = self.stash_bytes if self.segment_stash_bytes is None else self.segment_stash_bytes
        return self.checkpoint_bytes + segment

    @property
    def recompute_cost(self) -> Cost:
        """What recomputing the forward costs (the forward itself unless given)."""
        return self.forward if self.recompute is None else self.recompute


class Execution(enum.Enum):
    """How the stages of one replica share its IPUs in time."""

    SHARDED = "sharded"        # one stage at a time, micro-batch after micro-batch
    PIPELINED = "pipelined"    # PopART's pipeline: all stages busy on different micro-batches
    PHASED = "phased"          # serial phased: each phase streams its weights in, runs, streams out
    PARALLEL_PHASED = "parallel_phased"  # phases alternate between two IPU groups, ping-pong

    @property
    def phased(self) -> bool:
        """Whether each stage is a phase whose state is streamed in and out."""
        return self in (Execution.PHASED, Execution.PARALLEL_PHASED)


@dataclass(frozen=True)
class Work:
    """A model's stages and the data it moves per sample."""

    stages: tuple[Stage, ...]
    micro_batch_size: int = field(default=1, metadata={"help": "samples in one micro-batch"})
    input_bytes_per_sample: int = field(default=0,
                                        metadata={"help": "host-to-device bytes per sample"})
    output_bytes_per_sample: int = field(default=0,
                                         metadata={"help": "device-to-host bytes per sample"})

    def __post_init__(self) -> None:
        check_type("Work.", "stages", self.stages, (tuple, list))
        object.__setattr__(self, "stages", tuple(self.stages))
        if not self.stages:
            raise ValueError("Work needs at least one stage, got none")
        for stage in self.stages:
            check_type("Work.", "stages", stage, Stage)
        size = self.micro_batch_size
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise ValueError(f"micro_batch_size must be a positive integer, got {size!r}")
        check_amount("Work.", "micro_batch_size", size, integer=True)
        for name in ("input_bytes_per_sample", "output_bytes_per_sample"):
            check_amount("", name, getattr(self, name), integer=True)

    @property
    def ipus_per_replica(self) -> int:
        """IPUs one replica occupies: one more than the highest stage IPU."""
        return max(stage.ipu for stage in self.stages) + 1

    @property
    def input_bytes(self) -> int:
        """Host-to-device bytes of one micro-batch."""
        return self.input_bytes_per_sample * self.micro_batch_size

    @property
    def output_bytes(self) -> int:
        """Device-to-host bytes of one micro-batch."""
        return self.output_bytes_per_sample * self.micro_batch_size

    def merged(self, derived_update: Callable[[Stage], Cost] | None = None,
               derived_accumulate: Callable[[Stage], Cost] | None = None) -> Work:
        """Merge consecutive stages on the same IPU into one, as PopART does.

        A stage without an explicit update (or accumulation) cost has one derived
        by the cost model (``derived_update``, ``derived_accumulate``); merged with
        a stage that gives its own, the merged cost is the sum of both. Callers
        that want only the stages' structure (names, IPUs, bytes) may leave them
        out; the schedule, which prices the update, passes them.
        """
        def given(stage: Stage, name: str, derived: Callable[[Stage], Cost] | None) -> Cost:
            own = getattr(stage, name)
            if own is not None:
                return own
            return derived(stage) if derived is not None else Cost()

        def either(prev: Stage, stage: Stage, name: str,
                   derived: Callable[[Stage], Cost] | None) -> Cost | None:
            if getattr(prev, name) is None and getattr(stage, name) is None:
                return None
            return given(prev, name, derived) + given(stage, name, derived)

        out: list[Stage] = []
        for stage in self.stages:
            if out and out[-1].ipu == stage.ipu:
                prev = out.pop()
                stage = Stage(
                    name=f"{prev.name}+{stage.name}", ipu=stage.ipu,
                    forward=prev.forward + stage.forward,
                    backward=prev.backward + stage.backward,
                    recompute=(None if prev.recompute is None and stage.recompute is None
                               else prev.recompute_cost + stage.recompute_cost),
                    update=either(prev, stage, "update", derived_update),
                    accumulate=either(prev, stage, "accumulate", derived_accumulate),
                    activation_bytes=stage.activation_bytes,
                    stash_bytes=prev.stash_bytes + stage.stash_bytes,
                    weight_bytes=prev.weight_bytes + stage.weight_bytes,
                    weight_tensors=prev.parameter_tensors + stage.parameter_tensors,
                    weight_sizes=prev.parameter_sizes + stage.parameter_sizes,
                    optimizer_bytes=prev.optimizer_bytes + stage.optimizer_bytes,
                    checkpoint_bytes=prev.checkpoint_bytes + stage.checkpoint_bytes,
                    segment_stash_bytes=(
                        None if (prev.segment_stash_bytes is None
                                 and stage.segment_stash_bytes is None)
                        else max(prev.recompute_stash_bytes - prev.checkpoint_bytes,
                                 stage.recompute_stash_bytes - stage.checkpoint_bytes)))
            out.append(stage)
        return Work(tuple(out), self.micro_batch_size, self.input_bytes_per_sample,
                    self.output_bytes_per_sample)
