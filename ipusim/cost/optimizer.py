"""The weight update as PopART builds it: the operators each optimizer runs over
every parameter tensor.

PopART decomposes an optimizer into operators per weight tensor and merges none
of them across tensors by default (``mergeVarUpdate`` is ``None``:
willow/include/popart/sessionoptions.hpp:890 at graphcore/popart d2f20d78). Each
operator is a popops vertex on every tile holding the tensor: a built-in
element-wise vertex (``scaledAddTo``, a multiply) is one pass of
:data:`~ipusim.cost.operator_model.CYCLES_PER_VECTOR`'s 3 cycles a vector; a fused
``popops::map`` expression costs its inputs times its operations cycles a vector
(lib/popops/ExpressionGenerator.cpp:320-335 at graphcore/poplibs 7eac0f2), so
``ceil(inputs x operations / 3)`` passes. LAMB's norms are whole-tensor
reductions, each a pass on the tiles and a second compute set across them
(lambx.cpp:32). Sources below are popart's, at d2f20d78: ``pattern`` is
willow/src/patterns/, ``opx`` willow/src/popx/op/.
"""
from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from ipusim.cost.operator_model import CYCLES_PER_VECTOR
from ipusim.cost.work import Cost, Kernel, KernelKind, Stage, check_element_width
from ipusim.hardware.specs import check_amount, check_type

#: Cycles a vector of one built-in element-wise pass (the operator model's add or
#: multiply): what a fused expression's ``inputs x operations`` cycles a vector are
#: counted in.
PASS_CYCLES_PER_VECTOR = CYCLES_PER_VECTOR[KernelKind.ELEMENTWISE][0]


@dataclass(frozen=True)
class UpdateOp:
    """One operator the optimizer runs over a whole parameter tensor.

    ``reads`` and ``writes``: the full-size tensors it reads and writes, in
    elements of ``width`` bytes; ``operations``: the fused expression's
    operations (1 for a built-in vertex); ``reduction``: it reduces the tensor
    to one scalar; ``per_micro_batch``: with gradient accumulation it runs after
    every micro-batch's backward rather than once a step; ``accumulator``: it
    exists only with gradient accumulation (the accumulator's own add);
    ``scalar``: it works on one element, not the tensor (a compute set of its own
    all the same).
    """

    name: str
    reads: int
    writes: int
    width: int = 4
    operations: int = 1
    reduction: bool = False
    per_micro_batch: bool = False
    accumulator: bool = False
    scalar: bool = False

    def __post_init__(self) -> None:
        check_type("UpdateOp.", "name", self.name, str)
        for name in ("reads", "writes", "operations"):
            check_amount("UpdateOp.", name, getattr(self, name), integer=True)
        check_element_width("UpdateOp.", self.width)

    @property
    def passes(self) -> int:
        """Element-wise passes over the tensor the operator costs."""
        if self.operations <= 1:
            return 1
        return ceil(self.reads * self.operations / PASS_CYCLES_PER_VECTOR)


@dataclass(frozen=True)
class UpdateProgram:
    """An optimizer as PopART runs it on each parameter tensor whose elements are
    ``weight_width`` bytes wide."""

    name: str
    ops: tuple[UpdateOp, ...]
    weight_width: int = 4

    def __post_init__(self) -> None:
        check_type("UpdateProgram.", "name", self.name, str)
        object.__setattr__(self, "ops", tuple(self.ops))
        for op in self.ops:
            check_type("UpdateProgram.", "ops", op, UpdateOp)
        check_amount("UpdateProgram.", "weight_width", self.weight_width, integer=True,
                     positive=True)

    def step_ops(self, accumulating: bool) -> tuple[UpdateOp, ...]:
        """The operators run once a weight update."""
        def once_a_step(op: UpdateOp) -> bool:
            if op.accumulator and not accumulating:
                return False
            return not (op.per_micro_batch and accumulating)
        return tuple(op for op in self.ops if once_a_step(op))

    def micro_batch_ops(self, accumulating: bool) -> tuple[UpdateOp, ...]:
        """The operators run after every micro-batch's backward (only when the
        gradients accumulate over several)."""
        return tuple(op for op in self.ops if op.per_micro_batch) if accumulating else ()

    def bytes_per_element(self, ops: tuple[UpdateOp, ...]) -> int:
        """Bytes ``ops`` read and write per element of a parameter tensor (its
        scalar operators' aside)."""
        return sum((op.reads + op.writes) * op.width for op in ops if not op.scalar)

    def update_cost(self, stage: Stage, accumulating: bool = False) -> Cost:
        """The weight update of ``stage``: given, or the operators this program runs
        once a step over each of its parameter tensors, each of the stage's mean size."""
        if stage.update is not None:
            return stage.update
        return self.cost(stage, self.step_ops(accumulating))

    def accumulate_cost(self, stage: Stage, accumulating: bool = False) -> Cost:
        """What the optimizer adds to each micro-batch's backward of ``stage``: given,
        or with gradient accumulation each gradient's add into its accumulator."""
        if stage.accumulate is not None:
            return stage.accumulate
        return self.cost(stage, self.micro_batch_ops(accumulating))

    def cost(self, stage: Stage, ops: tuple[UpdateOp, ...]) -> Cost:
        """``ops`` over each parameter tensor of ``stage``: vector kernels where the
        stage's operators are measured, a roofline's FLOPs and bytes otherwise."""
        if stage.weight_bytes == 0 or not ops:
            return Cost()
        elements = stage.weight_bytes // self.weight_width
        tensors = stage.parameter_tensors
        flops = float(sum((tensors if op.scalar else elements) * op.operations for op in ops))
        nbytes = float(elements * self.bytes_per_element(ops) + tensors * sum(
            (op.reads + op.writes) * op.width for op in ops if op.scalar))
        if not stage.forward.kernels:
            return Cost(flops=flops, bytes=nbytes, ops=tensors * len(ops))
        per_tensor = max(1, elements // tensors)
        kernels: dict[Kernel, int] = {}
        for op in ops:
            size = 1 if op.scalar else per_tensor
            traffic = size * (op.reads + op.writes) * op.width
            parts = [(Kernel(KernelKind.ELEMENTWISE, width=op.width, elements=size,
                             bytes=traffic // op.passes, op=op.name), op.passes)]
            if op.reduction:   # the tiles' partial sums reduced in a second compute set
                parts.append((Kernel(KernelKind.ELEMENTWISE, width=4, elements=1, bytes=4,
                                     op=op.name), 1))
            for kernel, count in parts:
                kernels[kernel] = kernels.get(kernel, 0) + count * tensors
        return Cost(flops=flops, bytes=nbytes, ops=tensors * len(ops),
                    kernels=tuple(kernels.items()))


def _scaled_add(name: str, width: int, **kwargs) -> UpdateOp:
    """``a += s * b`` in place (popops' ScaledAdd vertex): two reads, one write."""
    return UpdateOp(name, 2, 1, width, **kwargs)


def _scale(name: str, width: int) -> UpdateOp:
    """``a *= s`` in place: one read, one write."""
    return UpdateOp(name, 1, 1, width)


def _negate_learning_rate() -> UpdateOp:
    """``-lr``: PopTorch's learning rate is a variable, so each weight update
    negates it in a map of its own, one element and its own compute set, before
    its ``scaledAddTo`` (opx/sgd0varupdatex.cpp:84-92; opx/sgd1varupdatex.cpp:44-52,
    which SGD2's update is too, op/sgd2varupdate.hpp:17; opx/adamvarupdatex.cpp:
    121-123; opx/scaledvarupdatex.cpp:136-137)."""
    return UpdateOp("negate learning rate", 1, 1, 4, scalar=True)


def _accumulate(accum_width: int) -> tuple[UpdateOp, UpdateOp]:
    """The gradient accumulator's ``AccumulateOp(Add)`` after each micro-batch
    (pattern/optimizerdecompose.cpp:282, opx/accumulatex.cpp:133), and its zeroing
    once the update has read it (``AccumulatorZeroOp``, popops::zero: :388)."""
    return (_scaled_add("accumulate gradient", accum_width, per_micro_batch=True,
                        accumulator=True),
            UpdateOp("zero accumulator", 0, 1, accum_width, accumulator=True))


def sgd(weight_width: int = 4, momentum: bool = False, weight_decay: bool = False,
        combined: bool = False, velocity_width: int = 4, accum_width: int = 4) -> UpdateProgram:
    """PopTorch's SGD as PopART decomposes it.

    - No momentum (SGD0): the weight scaled by ``1 - lr * wd`` (PopTorch's learning
      rate is a variable, so the scale is never the constant 1:
      opx/sgd0varupdatex.cpp:57-68), then ``w -= lr * g`` (:84).
    - Combined accumulator (SGD1, ``use_combined_accum=True``): the dampened gradient
      added to the velocity (pattern/sgd1decompose.cpp:205), the weight update
      (:519), then the velocity's momentum scale (:472, opx/sgd1acclupdatex.cpp:55)
      and, with weight decay, the weight added into it (:79).
    - Separate (SGD2, PopTorch's default): the velocity scaled by the momentum
      (pattern/sgd2decompose.cpp:162), the weight decay added into it, the dampened
      gradient added (:214), the weight update (:381).
    """
    if not momentum:
        ops = (_scale("SGD0 weight decay scale", weight_width), _negate_learning_rate(),
               _scaled_add("SGD0 weight update", weight_width), *_accumulate(accum_width))
        return UpdateProgram("SGD", ops, weight_width)
    if combined:
        ops = [_scaled_add("SGD1 dampened gradient into velocity", weight_width,
                           per_micro_batch=True),
               _negate_learning_rate(), _scaled_add("SGD1 weight update", weight_width),
               _scale("SGD1 velocity momentum", weight_width)]
        if weight_decay:
            ops.append(_scaled_add("SGD1 weight decay into velocity", weight_width))
        return UpdateProgram("SGD (combined)", tuple(ops), weight_width)
    ops = [_scale("SGD2 velocity momentum", velocity_width)]
    if weight_decay:
        ops.append(_scaled_add("SGD2 weight decay into velocity", velocity_width))
    ops += [_scaled_add("SGD2 dampened gradient into velocity", velocity_width),
            _negate_learning_rate(), _scaled_add("SGD2 weight update", weight_width),
            *_accumulate(accum_width)]
    return UpdateProgram("SGD", tuple(ops), weight_width)


def adam(weight_width: int = 4, decoupled: bool = False, lamb: bool = False,
         bias_correction: bool = True, first_width: int = 4, second_width: int = 4,
         accum_width: int = 4) -> UpdateProgram:
    """Adam, AdamW and LAMB as PopART decomposes them (pattern/adamdecompose.cpp).

    Adam adds the L2 term into the gradient first, always (:279,
    optimizerdecompose.cpp:556); then the two moments' moving averages, fused
    expressions of 3 and 4 operations (:297, :312; opx/accumulatex.cpp:263, 288);
    the updater, a fused expression of 9 operations over the moments (the two
    corrections' subtract and power, 4; m / c1, v / c2, the square root, + eps and
    the divide, 5: opx/adamupdaterx.cpp:86-147), 11 with AdamW's and LAMB's
    decoupled weight decay, which also reads the weight (+ wd x w, :155-167), and
    without bias correction the corrections are the constant 1, so 5 and 7
    (:83-126); LAMB's two squared norms, of the weight and of the update (:436,
    :451, opx/lambx.cpp:32); and the weight update, its variable learning rate
    negated first (:479, opx/adamvarupdatex.cpp:114-127).
    """
    decay = decoupled or lamb
    ops = [] if decay else [_scaled_add("Adam L2 into gradient", weight_width)]
    updater_operations = (11 if decay else 9) - (0 if bias_correction else 4)
    ops += [UpdateOp("first moment", 2, 1, first_width, operations=3),
            UpdateOp("second moment", 2, 1, second_width, operations=4),
            UpdateOp("Adam updater", 3 if decay else 2, 1, first_width,
                     operations=updater_operations)]
    if lamb:
        ops += [UpdateOp("LAMB weight norm", 1, 0, weight_width, reduction=True),
                UpdateOp("LAMB update norm", 1, 0, first_width, reduction=True)]
    ops += [_negate_learning_rate(), _scaled_add("Adam weight update", weight_width),
            *_accumulate(accum_width)]
    name = "LAMB" if lamb else "AdamW" if decoupled else "Adam"
    return UpdateProgram(name, tuple(ops), weight_width)


def rmsprop(weight_width: int = 4, centred: bool = False, momentum: bool = False,
            first_width: int = 4, second_width: int = 4, accum_width: int = 4) -> UpdateProgram:
    """RMSprop as PopART decomposes it (pattern/adaptivedecompose.cpp): the L2 term
    into the gradient (:144), the squared gradient's moving average (:158), the
    centred average (:179), the updater (:240, opx/rmspropupdaterx.cpp:77), with
    momentum a decaying add and a cast (:387, opx/scaledvarupdatex.cpp:109), and the
    weight update (:404)."""
    ops = [_scaled_add("RMSprop L2 into gradient", weight_width),
           UpdateOp("squared gradient average", 2, 1, first_width, operations=4)]
    if centred:
        ops.append(UpdateOp("gradient average", 2, 1, second_width, operations=3))
    ops.append(UpdateOp("RMSprop updater", 2, 1, weight_width, operations=3))
    if momentum:
        ops += [_scaled_add("RMSprop momentum", 4), _scale("RMSprop update cast", 4)]
    ops += [_negate_learning_rate(), _scaled_add("RMSprop weight update", weight_width),
            *_accumulate(accum_width)]
    return UpdateProgram("RMSprop", tuple(ops), weight_width)


#: PopTorch's optimizer when a training model is given none: SGD at lr 0.01, no momentum.
DEFAULT_PROGRAM = sgd()
