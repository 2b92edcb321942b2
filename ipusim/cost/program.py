"""An operator as the program PopLibs builds for it: a list of program steps.

Poplar runs a compiled graph as a tree of programs whose leaves are *steps*: a
``Sync`` of the tiles, a ``DoExchange`` that moves the data the next compute set
needs onto its tiles, and an ``OnTileExecute`` of one compute set's vertices
(PopVision's program tree and execution trace show exactly these). A PopLibs
function builds several compute sets for one framework operator: a matmul's
regroup and transpose copies, its convolve, the stages of its reduction; a
normalisation's statistics, whitening and scaling. Each :class:`Step` carries its
name, the Poplar program it is, what it does for the operator (:class:`Role`),
the unit of the tile it occupies, and its cycles on the busiest tile.

:class:`OperatorCycles` is the operator's step list; its split by unit (AMP,
exchange, sync, vector) and by role (the operator's own vertices, the glue
between them, exchanges, syncs) is computed from the steps, never kept beside
them.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ipusim.cost.tile_figures import TileFigures
    from ipusim.hardware import IPUSpec


class ProgramKind(str, enum.Enum):
    """The Poplar program a step is (PopVision's names for them)."""

    SYNC = "Sync"
    DO_EXCHANGE = "DoExchange"
    ON_TILE_EXECUTE = "OnTileExecute"


class Unit(str, enum.Enum):
    """The part of the tile a step keeps busy."""

    AMP = "amp"            # the accumulating matrix product units: a convolve's passes
    VECTOR = "vector"      # the vector pipeline: element-wise, reduce, copy, transpose vertices
    EXCHANGE = "exchange"  # the exchange: bytes a tile receives, and the phase's fixed cost
    SYNC = "sync"          # the on-chip sync before an exchange phase


class Role(str, enum.Enum):
    """What a step does for its operator: the step breakdown's four groups."""

    VERTEX = "vertex"      # the operator's own arithmetic: its AMP passes or vector vertices
    GLUE = "glue"          # what PopLibs adds around it: regroups, transposes, reductions, casts
    EXCHANGE = "exchange"
    SYNC = "sync"


@dataclass(frozen=True)
class Step:
    """One program step of an operator: ``cycles`` on the busiest tile each time it
    runs, ``count`` runs per run of the operator (a serial split repeats its steps)."""

    program: ProgramKind
    name: str
    cycles: float
    unit: Unit
    glue: bool = False
    count: int = 1

    @property
    def role(self) -> Role:
        """The step's group in the breakdown: syncs and exchanges by their program,
        compute sets as the operator's own vertices or the glue around them."""
        if self.program is ProgramKind.SYNC:
            return Role.SYNC
        if self.program is ProgramKind.DO_EXCHANGE:
            return Role.EXCHANGE
        return Role.GLUE if self.glue else Role.VERTEX

    @property
    def total(self) -> float:
        """The step's cycles over all its runs."""
        return self.cycles * self.count


@dataclass(frozen=True)
class OperatorCycles:
    """One operator's program steps, and its cycles summed from them by unit and role."""

    steps: tuple[Step, ...] = ()

    def _by_unit(self, unit: Unit) -> float:
        return sum(step.total for step in self.steps if step.unit is unit)

    @property
    def amp(self) -> float:
        """The AMP's passes with their vertex and pass overheads."""
        return self._by_unit(Unit.AMP)

    @property
    def exchange(self) -> float:
        """Exchange phases: their fixed cost and the bytes the busiest tile receives."""
        return self._by_unit(Unit.EXCHANGE)

    @property
    def sync(self) -> float:
        """The syncs that open each exchange phase."""
        return self._by_unit(Unit.SYNC)

    @property
    def vector(self) -> float:
        """Vector-unit work: element-wise vertices, reductions, copies, transposes, casts."""
        return self._by_unit(Unit.VECTOR)

    @property
    def compute_sets(self) -> int:
        """Compute sets the operator runs (one ``OnTileExecute`` each)."""
        return sum(step.count for step in self.steps
                   if step.program is ProgramKind.ON_TILE_EXECUTE)

    @property
    def total(self) -> float:
        """All cycles of the operator."""
        return sum(step.total for step in self.steps)

    def by_role(self) -> dict[Role, float]:
        """Cycles by what the steps do: vertices, glue, exchanges, syncs."""
        totals = dict.fromkeys(Role, 0.0)
        for step in self.steps:
            totals[step.role] += step.total
        return totals

    def __add__(self, other: OperatorCycles) -> OperatorCycles:
        return OperatorCycles(self.steps + other.steps)

    def times(self, count: int) -> OperatorCycles:
        """The steps of ``count`` runs of the operator."""
        return OperatorCycles(tuple(replace(step, count=step.count * count)
                                    for step in self.steps))


def compute_set_fixed_cycles(model: TileFigures) -> float:
    """What a compute set costs besides its work: its sync and its exchange phase."""
    return model.sync_cycles + model.exchange_overhead_cycles


def compute_set(name: str, cycles: float, model: TileFigures, ipu: IPUSpec, *,
                unit: Unit = Unit.VECTOR, glue: bool = False, received_bytes: float = 0.0,
                exchange_cycles: float = 0.0, count: int = 1) -> tuple[Step, ...]:
    """The three steps of one compute set as Poplar runs it: the tiles' sync, the
    exchange phase that brings ``received_bytes`` to the busiest tile (its fixed
    cost and the bytes at the tile's exchange rate, plus ``exchange_cycles`` a
    planner already priced), and the vertices' ``cycles``; ``count`` runs of them.

    The sync and the exchange phase's fixed cost are PopLibs' planner constants
    (:attr:`TileFigures.sync_cycles`, :attr:`TileFigures.exchange_overhead_cycles`).
    """
    exchange = model.exchange_overhead_cycles + received_bytes / ipu.exchange_bytes_per_cycle \
        + exchange_cycles
    return (Step(ProgramKind.SYNC, f"{name}/Sync", model.sync_cycles, Unit.SYNC, count=count),
            Step(ProgramKind.DO_EXCHANGE, f"{name}/ExchangePre", exchange, Unit.EXCHANGE,
                 count=count),
            Step(ProgramKind.ON_TILE_EXECUTE, name, cycles, unit, glue, count))
