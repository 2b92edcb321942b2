"""Execution strategies: how a model's blocks become stages on IPUs.

``poptorch.Stage`` groups blocks that run together on one IPU;
``PipelinedExecution`` and ``ShardedExecution`` list stages in order,
``SerialPhasedExecution`` and ``ParallelPhasedExecution`` list phases of
stages. With no arguments the pipelined and sharded strategies make a stage
per IPU (``AutoStage.SameAsIpu``, the default) or per block
(``AutoStage.AutoIncrement``).

A stage runs on the IPU given by ``strategy.stage(id).ipu(i)``, else the
``ipu_id`` of its first block, else its position (phased: its place within
the phase, alternating IPU groups for parallel phases). Consecutive stages
on the same IPU merge into one, as PopART does, named "B1+B2"; in phased
execution every stage stays a phase of its own.
"""
from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping
from dataclasses import dataclass

from poptorch_shim.enums import AutoStage, Liveness
from poptorch_shim.errors import InvalidUseError

#: A block's id: what ``poptorch.Block(user_id)`` was given (any hashable), or
#: an automatic "0", "1", ... Strategies list blocks by str ids, as PopTorch's
#: ``Stage`` does; a block with another id is placed by an ``AutoStage``.
BlockId = Hashable


class Stage:
    """One or more blocks that run together on one IPU.

    >>> poptorch.Stage("B1", "B2").ipu(0)
    """

    def __init__(self, *block_ids: BlockId):
        if not block_ids or not all(isinstance(b, str) for b in block_ids):
            raise TypeError(f"poptorch.Stage: block ids must be one or more strings, got "
                            f"{block_ids!r}; e.g. poptorch.Stage(\"B1\", \"B2\"). A Block whose "
                            "user_id is not a str can only be staged automatically, by "
                            "PipelinedExecution() or ShardedExecution() with a poptorch.AutoStage.")
        self._blocks = tuple(block_ids)
        self._ipu: int | None = None

    @classmethod
    def _automatic(cls, *block_ids: BlockId) -> Stage:
        """A stage an ``AutoStage`` makes from the blocks the model started,
        whatever their ids."""
        stage = cls.__new__(cls)
        stage._blocks, stage._ipu = tuple(block_ids), None
        return stage

    @property
    def blocks(self) -> tuple[BlockId, ...]:
        """The ids of the blocks this stage is made of."""
        return self._blocks

    def ipu(self, ipu: int) -> Stage:
        """Run this stage on IPU ``ipu`` (overrides the blocks' ``ipu_id``)."""
        if isinstance(ipu, bool) or not isinstance(ipu, int) or ipu < 0:
            raise TypeError(f"poptorch.Stage{self._blocks!r}.ipu: ipu must be a non-negative int, "
                            f"got {ipu!r}.")
        self._ipu = ipu
        return self

    def __repr__(self) -> str:
        ipu = "" if self._ipu is None else f".ipu({self._ipu})"
        return f"Stage({', '.join(map(repr, self._blocks))}){ipu}"


#: The name of a stage holding only the work a model does before its first block.
BEFORE_BLOCKS = "(before the first block)"


@dataclass(frozen=True)
class PlacedStage:
    """A stage after placement: its name, IPU and blocks, in execution order."""

    name: str
    ipu: int
    blocks: tuple[BlockId, ...]


def _as_stage(arg: BlockId | Stage | list | tuple, where: str) -> Stage:
    if isinstance(arg, Stage):
        return arg
    if isinstance(arg, str):
        return Stage(arg)
    if isinstance(arg, (list, tuple)):
        return Stage(*arg)
    raise TypeError(f"{where}: expected a block id (str), a poptorch.Stage or a list of block "
                    f"ids, got {arg!r} ({type(arg).__name__}).")


class ExecutionStrategy:
    """The base of every execution strategy: its stages, block lookup and
    placement, what the staged runner reads of any strategy."""

    execution_kind = ""  # ipusim's name for how the stages share the IPUs in time
    _merges_on_one_ipu = True  # consecutive stages on one IPU become one stage

    def __init__(self, stages: list[Stage]):
        self._stages = stages
        self._block_map: dict[BlockId, Stage] = {}
        for stage in stages:
            for block in stage.blocks:
                if block in self._block_map:
                    raise ValueError(f"{type(self).__name__}: block {block!r} is associated with "
                                     "more than one stage; list each block once.")
                self._block_map[block] = stage

    def stage(self, block_id: BlockId) -> Stage:
        """The :class:`Stage` the block ``block_id`` belongs to."""
        if block_id not in self._block_map:
            raise ValueError(f"{type(self).__name__}.stage: unknown block {block_id!r}; the "
                             f"strategy's blocks are {list(self._block_map)}.")
        return self._block_map[block_id]

    def run_together(self, block: BlockId, other: BlockId) -> bool:
        """Whether the stages of two blocks run at the same time, so that either
        may use the other's results (the stages of one phase); by default stages
        run in turn, in the order listed."""
        return False

    def _ordered(self, seen: Mapping[BlockId, int | None]) -> list[tuple[Stage, int]]:
        """The strategy's stages in order, each with the IPU it gets by default."""
        return [(stage, position) for position, stage in enumerate(self._stages)]

    def _check_blocks(self, seen: Mapping[BlockId, int | None]) -> None:
        expected = list(self._block_map)
        for block in seen:
            if block not in self._block_map:
                raise ValueError(
                    f"Unknown Block {block!r}: the model starts a block that the execution "
                    f"strategy {type(self).__name__} does not list. List of expected Blocks: "
                    f"{expected}. Add it to the strategy (e.g. poptorch.Stage({block!r})) or "
                    "rename the block in the model.")
        missing = [block for block in expected if block not in seen]
        if missing:
            raise ValueError(
                f"The execution strategy {type(self).__name__} lists Block(s) {missing} that the "
                f"model never starts; the model's blocks are {list(seen)}. Remove them from the "
                "strategy or fix their names (the model names blocks with "
                "poptorch.Block(user_id), BeginBlock or BlockFunction).")

    def place(self, seen: Mapping[BlockId, int | None],
              computing: Collection[BlockId | None]) -> tuple[PlacedStage, ...]:
        """Place the blocks the model started (``seen``: id -> its ``ipu_id``, in
        the order they started) on IPUs, stages in execution order; blocks
        outside ``computing`` do no work and take no stage. A model without
        blocks is one stage on IPU 0. ``None`` in ``computing``: the model works
        before its first block starts (see :meth:`_with_work_before_blocks`)."""
        self._check_blocks(seen)
        if not seen:
            return (PlacedStage("model", 0, ()),)
        seen = self._with_work_before_blocks(seen, computing)
        placed: list[PlacedStage] = []
        for stage, default_ipu in self._ordered(seen):
            blocks = tuple(b for b in stage.blocks if b in computing)
            if not blocks:
                continue
            given = [seen[b] for b in stage.blocks if seen.get(b) is not None]
            ipu = stage._ipu if stage._ipu is not None else (given[0] if given else default_ipu)
            if self._merges_on_one_ipu and placed and placed[-1].ipu == ipu:
                previous = placed.pop()
                blocks = previous.blocks + blocks
            name = "+".join(str(b) for b in blocks if b is not None) or BEFORE_BLOCKS
            placed.append(PlacedStage(name, ipu, blocks))
        return tuple(placed)

    def _with_work_before_blocks(self, seen: Mapping[BlockId, int | None],
                                 computing: Collection[BlockId | None]
                                 ) -> Mapping[BlockId | None, int | None]:
        """``seen`` with the work done before the first block, if any, as a block of
        its own (``None``). A strategy that lists its stages charges that work to
        the first block's stage: none of its stages lists it."""
        return seen

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(map(repr, self._stages))})"


class PipelinedExecution(ExecutionStrategy):
    """Pipeline the stages over their IPUs, each on a different micro-batch.

    >>> strategy = poptorch.PipelinedExecution("B1", "B2", "B3", "B4")
    >>> strategy.stage("B2").ipu(1)
    >>> poptorch.PipelinedExecution(poptorch.Stage("B1", "B2"), "B3")

    Each argument is a block id, a :class:`Stage` or a list of block ids
    (one stage). With no argument, or a single ``poptorch.AutoStage``, the
    stages come from the blocks the model starts.
    """

    execution_kind = "pipelined"
    _by_default = False  # the strategy PopTorch uses when none is set

    def __init__(self, *args: BlockId | Stage | list | AutoStage):
        self._auto: AutoStage | None = AutoStage.SameAsIpu if not args else None
        if len(args) == 1 and isinstance(args[0], AutoStage):
            self._auto, args = args[0], ()
        where = type(self).__name__
        super().__init__([_as_stage(arg, where) for arg in args])

    @classmethod
    def default(cls) -> PipelinedExecution:
        """PopTorch's strategy for a model whose options set none:
        ``PipelinedExecution(AutoStage.SameAsIpu)``."""
        strategy = cls(AutoStage.SameAsIpu)
        strategy._by_default = True
        return strategy

    def _check_blocks(self, seen):
        if self._auto is None:
            super()._check_blocks(seen)

    def _with_work_before_blocks(self, seen, computing):
        """PopTorch's compiler puts what runs before the first block in pipeline stage 0
        on IPU 0 (its active stage and IPU until a block starts): with automatic
        stages, a stage of its own there, merged with IPU 0's blocks."""
        if self._auto is None or None not in computing:
            return seen
        return {None: 0, **seen}

    def _ordered(self, seen):
        if self._auto is None:
            return super()._ordered(seen)
        if self._auto is AutoStage.AutoIncrement:
            return [(Stage._automatic(block), position) for position, block in enumerate(seen)]
        by_ipu: dict[int, list[BlockId]] = {}
        for block, ipu in seen.items():
            if ipu is None:
                how = (" (by the default execution strategy, PipelinedExecution(AutoStage."
                       "SameAsIpu): no strategy was set)" if self._by_default else "")
                raise ValueError(
                    f"poptorch.AutoStage.SameAsIpu was selected{how} but no IPU was specified "
                    f"for block {block!r}: give it one with poptorch.Block({block!r}, "
                    f"ipu_id=...), list the stages explicitly, e.g. opts.setExecutionStrategy("
                    f"{type(self).__name__}({list(seen)})), or use "
                    "poptorch.AutoStage.AutoIncrement.")
            by_ipu.setdefault(ipu, []).append(block)
        return [(Stage._automatic(*by_ipu[ipu]), ipu) for ipu in sorted(by_ipu)]

    def __repr__(self) -> str:
        if self._auto is not None:
            return f"{type(self).__name__}(poptorch.AutoStage.{self._auto.name})"
        return super().__repr__()


class ShardedExecution(PipelinedExecution):
    """Run the stages one after the other, each on its IPU, a micro-batch at a time.

    Takes the same arguments as :class:`PipelinedExecution`.
    """

    execution_kind = "sharded"


class Phase:
    """Stages that run at the same time, each on its own IPU.

    >>> poptorch.Phase(poptorch.Stage("A").ipu(0), poptorch.Stage("B").ipu(1))
    >>> poptorch.Phase("A", "B")  # one stage made of two blocks
    """

    def __init__(self, *arg: BlockId | Stage):
        if len(arg) == 1 and isinstance(arg[0], (list, tuple)):
            arg = tuple(arg[0])
        if arg and all(isinstance(elt, Stage) for elt in arg):
            self.stages = list(arg)
        elif arg and all(isinstance(elt, str) for elt in arg):
            self.stages = [Stage(*arg)]
        else:
            kinds = [type(elt).__name__ for elt in arg]
            raise TypeError("poptorch.Phase: all arguments must either be block ids (strings) "
                            f"or poptorch.Stage objects, got {kinds}.")

    def stage(self, idx: int) -> Stage:
        """The ``idx``-th stage of this phase."""
        if not 0 <= idx < len(self.stages):
            raise IndexError(f"poptorch.Phase.stage: the phase has {len(self.stages)} stage(s), "
                             f"got index {idx}.")
        return self.stages[idx]

    def ipus(self, *ipus: int) -> Phase:
        """Place the phase's stages on these IPUs, one IPU per stage."""
        if len(ipus) != len(self.stages):
            raise ValueError(f"poptorch.Phase.ipus: Phase contains {len(self.stages)} stages but "
                             f"you provided {len(ipus)} ipus; give one IPU per stage.")
        for stage, ipu in zip(self.stages, ipus):
            stage.ipu(ipu)
        return self

    def __repr__(self) -> str:
        return f"Phase({', '.join(map(repr, self.stages))})"


class _PhasedExecution(ExecutionStrategy):
    """Run the model one phase at a time, streaming each phase's weights in."""

    execution_kind = "phased"
    _merges_on_one_ipu = False
    _alternate_ipus = False

    def __init__(self, *phases: Phase | list | BlockId | Stage):
        if len(phases) == 1 and isinstance(phases[0], (list, tuple)) and phases[0] \
                and all(isinstance(p, Phase) for p in phases[0]):
            phases = tuple(phases[0])
        if not phases:
            raise ValueError(f"{type(self).__name__}: there is no AutoStage for phased execution; "
                             "list the phases explicitly, e.g. "
                             f"{type(self).__name__}(\"B1\", \"B2\").")
        self._phases = [p if isinstance(p, Phase) else
                        Phase(*p) if isinstance(p, (list, tuple)) else Phase(p) for p in phases]
        self._tensors_liveness = Liveness.AlwaysLive
        self._separate_backward_phase = False
        super().__init__([stage for phase in self._phases for stage in phase.stages])

    @property
    def tensors_liveness(self) -> Liveness:
        """Where the phases' tensors live between phases (``poptorch.Liveness``)."""
        return self._tensors_liveness

    @property
    def separate_backward_phase(self) -> bool:
        """Whether the backward pass starts a phase of its own."""
        return self._separate_backward_phase

    def setTensorsLiveness(self, liveness: Liveness) -> _PhasedExecution:
        """Keep the tensors on the IPUs between phases (``AlwaysLive``, the
        default) or send them off chip after the forward pass or after every
        phase; see ``poptorch.Liveness``. Off chip, a training phase streams
        its stash out after the forward pass and back in before the backward
        (every off-chip choice alike: each phase is simulated in turn)."""
        if not isinstance(liveness, Liveness):
            members = ", ".join(member.name for member in Liveness)
            raise TypeError(f"{type(self).__name__}.setTensorsLiveness: liveness must be a "
                            f"poptorch.Liveness ({members}), got {liveness!r}.")
        self._tensors_liveness = liveness
        return self

    def useSeparateBackwardPhase(self, use: bool = True) -> _PhasedExecution:
        """PopTorch gives the backward pass phases of its own with ``True`` (forward
        phases 0, 1, 2, then backward phases 4, 5, 6 instead of sharing phase 2).
        The simulator runs each phase's backward in the phase of its forward, so it
        refuses ``True`` rather than simulate something else; ``False`` is the default."""
        if not isinstance(use, bool):
            raise TypeError(f"{type(self).__name__}.useSeparateBackwardPhase: use must be a "
                            f"bool, got {use!r}.")
        if use:
            raise InvalidUseError(
                f"{type(self).__name__}.useSeparateBackwardPhase(True): ipusim does not "
                "simulate a backward pass in phases of its own; leave it False (the default), "
                "where the last forward phase and the first backward phase share a phase.")
        self._separate_backward_phase = use
        return self

    def phase(self, phase: int) -> Phase:
        """The ``phase``-th :class:`Phase`."""
        if isinstance(phase, bool) or not isinstance(phase, int) or not \
                0 <= phase < len(self._phases):
            raise IndexError(f"{type(self).__name__}.phase: phases are numbered 0.."
                             f"{len(self._phases) - 1}, got {phase!r}.")
        return self._phases[phase]

    def run_together(self, block: BlockId, other: BlockId) -> bool:
        """The stages of one phase run at once on their IPUs and exchange tensors
        both ways (PopTorch's 2x2 parallel phased models do)."""
        return self._phase_of(block) == self._phase_of(other)

    def _phase_of(self, block: BlockId) -> int:
        stage = self.stage(block)
        return next(number for number, phase in enumerate(self._phases)
                    if any(each is stage for each in phase.stages))

    def _ordered(self, seen):
        step = 2 if self._alternate_ipus else 1
        return [(stage, index * step + (number % 2 if self._alternate_ipus else 0))
                for number, phase in enumerate(self._phases)
                for index, stage in enumerate(phase.stages)]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(map(repr, self._phases))})"


class SerialPhasedExecution(_PhasedExecution):
    """All the phases run in turn on one group of IPUs.

    >>> strategy = poptorch.SerialPhasedExecution("B1", "B2", "B3", "B4")
    >>> strategy.stage("B1").ipu(0)

    A stage with no IPU given runs on the IPU of its place in the phase.
    """


class ParallelPhasedExecution(_PhasedExecution):
    """Phases alternate between two groups of IPUs (phase 0 on IPUs 0, 2, ...;
    phase 1 on IPUs 1, 3, ...), the default placement of stages without an IPU.

    While one group computes a phase, the other streams in the next phase's
    state (ping-pong); with ``SyncPattern.ReplicaAndLadder`` host I/O syncs
    only the computing group, so the two overlap.
    """

    execution_kind = "parallel_phased"
    _alternate_ipus = True

    def sendTensorsOffChipAfterFwd(self, off_chip: bool = True) -> ParallelPhasedExecution:
        """Send the tensors off chip after the forward pass
        (``Liveness.OffChipAfterFwd``), or keep them live (``AlwaysLive``)."""
        if not isinstance(off_chip, bool):
            raise TypeError("ParallelPhasedExecution.sendTensorsOffChipAfterFwd: off_chip must "
                            f"be a bool, got {off_chip!r}.")
        return self.setTensorsLiveness(Liveness.OffChipAfterFwd if off_chip
                                       else Liveness.AlwaysLive)

    def place(self, seen: Mapping[BlockId, int | None],
              computing: Collection[BlockId]) -> tuple[PlacedStage, ...]:
        placed = super().place(seen, computing)
        phase_of = {block: number for number, phase in enumerate(self._phases)
                    for stage in phase.stages for block in stage.blocks}
        for stage in placed:
            number = phase_of.get(stage.blocks[0]) if stage.blocks else None
            if number is not None and stage.ipu % 2 != number % 2:
                parity = "even" if number % 2 == 0 else "odd"
                raise ValueError(
                    f"ParallelPhasedExecution: phase {number} places stage {stage.name!r} on "
                    f"IPU {stage.ipu}, but even phases must run on even IPUs and odd phases on "
                    f"odd IPUs. Place it on an {parity} IPU (for example strategy.stage("
                    f"{stage.blocks[0]!r}).ipu({stage.ipu - 1 if stage.ipu else 1})).")
        return placed
