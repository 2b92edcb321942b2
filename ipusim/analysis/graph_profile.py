"""A simulated run as Poplar's graph and execution profile: program steps, variables on
tiles, liveness and operations, the figures ``profile.pop`` holds and libpva reads.

Everything here is read off the timeline: the program steps of its last step
(:mod:`ipusim.analysis.program_steps`), the variables of its plan
(:mod:`ipusim.analysis.graph_variables`), their liveness over those steps
(:mod:`ipusim.analysis.liveness`) and each tile's memory with the liveness peak
(:mod:`ipusim.analysis.tile_memory`). ``named`` are the model's parameter tensors as
the front end names them (module paths, layouts), when it can place them on stages.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import pandas as pd

from ipusim.analysis.graph_variables import LiveRange, always_live_variables, live_ranges
from ipusim.analysis.liveness import Peak, not_always_live_bytes, peak, peak_per_tile
from ipusim.analysis.program_steps import ControlProgram, StepTable, program_steps, program_tree
from ipusim.analysis.tile_memory import Variable, check_tiles, tile_memory
from ipusim.plan.memory import MemoryModel

if TYPE_CHECKING:
    from ipusim.analysis.timeline_view import TimelineView
    from ipusim.hardware import SystemSpec
    from ipusim.plan.engine_plan import EnginePlan


@dataclass(frozen=True)
class GraphProfile:
    """One replica's program steps in a step, its variables and where they live, and the
    control programs over the steps (:func:`~ipusim.analysis.program_steps.program_tree`,
    worked out once for ``profile.pop`` and the report's program tree)."""

    steps: StepTable
    always_live: list[Variable]
    ranges: list[LiveRange]
    tiles: pd.DataFrame       # of :func:`~ipusim.analysis.tile_memory.tile_memory`
    liveness: pd.DataFrame    # of :func:`~ipusim.analysis.liveness.not_always_live_bytes`
    peak: Peak | None
    tree: list[ControlProgram]


def vertex_code_bytes(memory: pd.DataFrame, tiles: int,
                      model: MemoryModel = MemoryModel()) -> dict[int, float]:
    """Each IPU's vertex code, of a memory table (:func:`~ipusim.plan.memory.memory_per_ipu`):
    its code less the runtime's on every one of its ``tiles``."""
    return {int(ipu): float(code) - model.code_bytes_per_tile * tiles
            for ipu, code in memory["code"].items()}


def graph_profile(timeline: TimelineView, named: tuple[Variable, ...] = ()) -> GraphProfile:
    """The :class:`GraphProfile` of ``timeline``'s last step (its program steps at most
    :data:`~ipusim.analysis.program_steps.MAX_PROGRAM_STEPS`: the variables' liveness and
    the tiles' peaks are those of the steps listed)."""
    plan = timeline.plan
    ipu = timeline.system.ipu
    tiles = timeline.run.compute_ipu(ipu)
    ipus = plan.ipus_per_replica
    steps = program_steps(timeline)
    always = always_live_variables(plan, named)
    ranges = live_ranges(plan, steps, named)
    code = vertex_code_bytes(timeline.memory_per_ipu(), ipu.tiles)
    table = tile_memory(always, tiles, ipus, code, peak_per_tile(ranges, tiles.tiles, ipus))
    return GraphProfile(steps, always, ranges, table,
                        not_always_live_bytes(steps, ranges, ipus), peak(steps, ranges, ipus),
                        program_tree(steps))


def check_tiles_fit(plan: EnginePlan, system: SystemSpec, memory: pd.DataFrame,
                    named: tuple[Variable, ...], setting: str) -> pd.DataFrame:
    """Check, before a model runs, that each tile holds its always-live variables, code and
    exchange buffers (the liveness of the others is known once it has run); raises
    :class:`~ipusim.plan.memory.OutOfMemoryError` naming the fullest tile (see
    :func:`~ipusim.analysis.tile_memory.check_tiles`). Returns the tiles' table."""
    tiles = plan.run.compute_ipu(system.ipu)
    always = always_live_variables(plan, named)
    table = tile_memory(always, tiles, plan.ipus_per_replica,
                        vertex_code_bytes(memory, system.ipu.tiles))
    check_tiles(table, always, setting)
    return table
