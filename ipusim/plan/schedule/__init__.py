"""Schedules: from a work description to one program per IPU, call by call."""
from __future__ import annotations

from collections.abc import Sequence

from ipusim.cost.work import Execution
from ipusim.engine.gc_pause import cyclic_gc_paused
from ipusim.engine.program import Instruction
from ipusim.hardware import SystemSpec
from ipusim.plan.engine_plan import EnginePlan
from ipusim.plan.pipeline_stages import pipeline_stages
from ipusim.plan.schedule.builder import ProgramBuilder
from ipusim.plan.schedule.phased import emit_phased
from ipusim.plan.schedule.pipelined import emit_pipelined
from ipusim.plan.schedule.sharded import emit_sharded

_EMITTERS = {
    Execution.SHARDED: emit_sharded,
    Execution.PIPELINED: emit_pipelined,
    Execution.PHASED: emit_phased,
    Execution.PARALLEL_PHASED: emit_phased,
}


def build_step(plan: EnginePlan, spec: SystemSpec, step: int,
               folded: bool = False) -> list[list[Instruction]]:
    """The per-IPU programs of one call to the engine ``plan`` (index ``step``);
    ``folded``: replica 0's only (see :mod:`ipusim.plan.folding`)."""
    with cyclic_gc_paused():
        builder = ProgramBuilder(plan, spec, step, folded)
        builder.host_call()
        _EMITTERS[plan.run.execution](builder)
    return builder.programs


def build_host_write(plan: EnginePlan, spec: SystemSpec, step: int, nbytes_by_ipu: Sequence[int],
                     folded: bool = False) -> list[list[Instruction]]:
    """The per-IPU programs of a write from the host before call ``step``: the bytes of
    each logical IPU of a replica streamed to it in every replica, one host exchange
    each, as the engine's own program that writes weights from the host runs them
    (no model call around it). Synthetic data streams nothing."""
    builder = ProgramBuilder(plan, spec, step, folded)
    for ipu, nbytes in enumerate(nbytes_by_ipu):
        if nbytes:
            builder.host_write(ipu, nbytes)
    return builder.programs


__all__ = ["build_host_write", "build_step", "pipeline_stages", "ProgramBuilder"]
