"""libpva's programs: ``Program`` with its ``Type``, the compute set of an
``OnTileExecute``, and ``ProgramVisitor``.

A program's ``accept(visitor)`` calls the visitor's ``visit<Type>`` method with the
program (``visitOnTileExecute``, ``visitDoExchange``, ``visitSync``...), as libpva's
visitor does; the base class's methods do nothing, so a visitor defines only those it
wants, and visits a ``Sequence``'s children itself if it wants them.
"""
from __future__ import annotations

import enum

from poptorch_shim.pva.not_simulated import NotSimulatedError


class ProgramType(enum.Enum):
    """The kinds of program a profile lists (libpva's ``pva.Program.Type``)."""

    OnTileExecute = "OnTileExecute"
    DoExchange = "DoExchange"
    Sync = "Sync"
    StreamCopyBegin = "StreamCopyBegin"
    StreamCopyMid = "StreamCopyMid"
    StreamCopyEnd = "StreamCopyEnd"
    Sequence = "Sequence"
    Repeat = "Repeat"
    Call = "Call"


class VertexType:
    """A kind of vertex: ``name`` is the operator model's kernel kind the compute set's
    vertex does (``matmul``, ``elementwise``...), not a Poplar codelet's name."""

    def __init__(self, name: str):
        self.name = name

    @property
    def size(self):
        raise NotSimulatedError("VertexType.size", "the operator model prices a vertex's "
                                "cycles, not its state's bytes")


class Vertex:
    """The vertices of one type in a compute set."""

    def __init__(self, name: str):
        self.type = VertexType(name)

    @property
    def countByTile(self):
        raise NotSimulatedError("Vertex.countByTile", "the operator model prices the busiest "
                                "tile and records no vertex placement per tile")


class ComputeSet:
    """The compute set an ``OnTileExecute`` runs: its name and its vertices, one entry per
    vertex type (each compute set of ipusim runs one kind of work)."""

    def __init__(self, name: str, vertex: str):
        self.name = name
        self.vertices = [Vertex(vertex)] if vertex else []


class Program:
    """One program of the profile: ``name``, ``type`` (:class:`ProgramType`), its
    ``children`` (a ``Sequence``'s in order; a ``Repeat``'s or a ``Call``'s one: the
    body it repeats ``count`` times, or the function it calls), and for an
    ``OnTileExecute`` its ``computeset``."""

    Type = ProgramType

    def __init__(self, index: int, columns: dict[str, list], programs: list[Program]):
        self._id = index
        self.name = columns["name"][index]
        self.type = ProgramType(columns["type"][index])
        self._children = columns["children"][index]
        self.count = columns["count"][index] if "count" in columns else 1
        self._programs = programs
        self.computeset = (ComputeSet(self.name, columns["vertex"][index])
                           if self.type is ProgramType.OnTileExecute else None)

    @property
    def children(self) -> list[Program]:
        return [self._programs[index] for index in self._children]

    @property
    def vars(self):
        raise NotSimulatedError("Program.vars", "ipusim records which variables are live at "
                                "each program step (livenessProgramSteps), not which a "
                                "program reads or writes")

    @property
    def codeBytesByTile(self):
        raise NotSimulatedError("Program.codeBytesByTile", "ipusim spreads the vertex code "
                                "over the tiles and places no program's code on a tile")

    def accept(self, visitor: ProgramVisitor) -> None:
        """Call ``visitor``'s ``visit<Type>`` method with this program."""
        getattr(visitor, f"visit{self.type.value}")(self)

    def __repr__(self) -> str:
        return f"<pva.Program {self.type.value} {self.name!r}>"


class ProgramVisitor:
    """Subclass it and define the ``visit<Type>`` methods wanted; ``program.accept(visitor)``
    calls the one of the program's type. Each does nothing here."""

    def visitOnTileExecute(self, onTileExecute: Program) -> None:
        pass

    def visitDoExchange(self, doExchange: Program) -> None:
        pass

    def visitSync(self, sync: Program) -> None:
        pass

    def visitStreamCopyBegin(self, streamCopyBegin: Program) -> None:
        pass

    def visitStreamCopyMid(self, streamCopyMid: Program) -> None:
        pass

    def visitStreamCopyEnd(self, streamCopyEnd: Program) -> None:
        pass

    def visitSequence(self, sequence: Program) -> None:
        pass

    def visitRepeat(self, repeat: Program) -> None:
        pass

    def visitCall(self, call: Program) -> None:
        pass
