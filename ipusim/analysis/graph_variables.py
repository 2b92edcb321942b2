"""The variables of a compiled model: what lives on each IPU's tiles, and when.

Always live (for the whole program): each stage's weights, and in training its
optimizer state and, with gradient accumulation, its accumulators, unless the run
keeps them in streaming memory (:class:`~ipusim.plan.run_config.Offload`) or
streams them in phase by phase. The weights are the model's own parameter tensors
when the front end names them (``named``: each with its module path and its layout),
else one variable a stage of its measured weight bytes; optimizer state and
accumulators are laid out like the weights they belong to.

Not always live, one per micro-batch that a step's program steps run (read off the
event table, :mod:`ipusim.analysis.program_steps`): each stage's stash (what its
backward reads, written by its forward), its output activations (read by the next
stage's forward, or by the copy to the host), and in training its weights'
gradients (written by its backward, read by its weight update).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ipusim.analysis.program_steps import StepTable
from ipusim.analysis.tile_memory import Variable
from ipusim.engine.event_kinds import BACKWARD, DEVICE_TO_HOST, FORWARD, RECOMPUTE, WEIGHT_UPDATE

if TYPE_CHECKING:
    from ipusim.cost.work import Stage
    from ipusim.plan.engine_plan import EnginePlan

FLOAT_BYTES = 4  # the width of a variable whose elements are not known


@dataclass(frozen=True)
class LiveRange:
    """A not-always-live variable and the program steps it is live over (``first`` to
    ``last``, indices into the step list, both included)."""

    variable: Variable
    first: int
    last: int


def stage_weights(index: int, stage: Stage, named: tuple[Variable, ...]) -> list[Variable]:
    """The weights of stage ``index``: those of ``named`` it holds, else one variable of its
    weight bytes (none if it has no weights)."""
    own = [v for v in named if v.stage == index]
    if own or not stage.weight_bytes:
        return own
    return [Variable(f"{stage.name}/weights", stage.ipu, stage.weight_bytes, FLOAT_BYTES,
                     "weights", True, stage=index)]


def always_live_variables(plan: EnginePlan, named: tuple[Variable, ...] = ()) -> list[Variable]:
    """The always-live variables of one replica (see the module's docstring). ``named``
    stands for the weights of the stage it names (its :attr:`Variable.stage`), each
    stage not named by any keeping one variable of its weight bytes."""
    run = plan.run
    on_chip = not run.execution.phased
    out: list[Variable] = []
    for index, stage in enumerate(plan.stages):
        weights = stage_weights(index, stage, named)
        if not on_chip:
            continue
        if not run.offload.weights:
            out.extend(weights)
        total = sum(v.bytes for v in weights) or 1
        if run.training and not run.offload.optimizer and stage.optimizer_bytes:
            share = stage.optimizer_bytes / run.optimizer_shards / total
            out.extend(replace(v, name=f"{v.name}/optimizer", category="optimizer",
                               bytes=round(v.bytes * share)) for v in weights)
        if run.training and run.gradient_accumulation > 1 and not run.offload.accumulators:
            out.extend(replace(v, name=f"{v.name}/accumulator", category="accumulators")
                       for v in weights)
    return out


def _spans(steps: StepTable) -> dict[tuple[int, str, int | None], tuple[int, int]]:
    """The first and last step of each (stage, phase, micro-batch), and of each (stage,
    phase, None) over all micro-batches."""
    if not len(steps):
        return {}
    frame = pd.DataFrame({"stage": steps.stage, "phase": steps.phase,
                          "micro_batch": steps.micro_batch, "index": np.arange(len(steps))})
    spans: dict[tuple[int, str, int | None], tuple[int, int]] = {}
    for keys in (["stage", "phase", "micro_batch"], ["stage", "phase"]):
        grouped = frame.groupby(keys)["index"].agg(["min", "max"])
        for key, row in zip(grouped.index, grouped.itertuples(index=False)):
            stage, phase, *batch = key
            spans[(int(stage), steps.phases[phase], int(batch[0]) if batch else None)] = (
                int(row.min), int(row.max))
    return spans


def _span(spans: dict, stage: int, phases: tuple[str, ...],
          micro_batch: int | None) -> tuple[int, int] | None:
    """The first and last step of ``stage`` in any of ``phases`` (for ``micro_batch``,
    or all of them when None); None if there is none."""
    found = [spans[key] for key in ((stage, phase, micro_batch) for phase in phases)
             if key in spans]
    return (min(f for f, _ in found), max(last for _, last in found)) if found else None


def live_ranges(plan: EnginePlan, steps: StepTable,
                named: tuple[Variable, ...] = ()) -> list[LiveRange]:
    """The not-always-live variables of one step's program ``steps`` and where they
    live (see the module's docstring): from the first step that writes each to the last
    that reads it."""
    out: list[LiveRange] = []
    stages = plan.stages
    spans = _spans(steps)
    for index, stage in enumerate(stages):
        batches = sorted(batch for (at, phase, batch) in spans
                         if at == index and phase == FORWARD and batch is not None and batch >= 0)
        for batch in batches:
            written = spans[(index, FORWARD, batch)]
            read = _span(spans, index, (BACKWARD, RECOMPUTE), batch)
            if read is not None and stage.stash_bytes:
                out.append(LiveRange(Variable(f"{stage.name}/stash/mb{batch}", stage.ipu,
                                              stage.stash_bytes, FLOAT_BYTES, "stash", False,
                                              stage=index), written[0], read[1]))
            consumer = (_span(spans, index + 1, (FORWARD,), batch) if index + 1 < len(stages)
                        else _span(spans, index, (DEVICE_TO_HOST,), batch))
            if stage.activation_bytes:
                out.append(LiveRange(Variable(f"{stage.name}/output/mb{batch}", stage.ipu,
                                              stage.activation_bytes, FLOAT_BYTES,
                                              "activations", False, stage=index),
                                     written[0], (consumer or written)[1]))
        backward = _span(spans, index, (BACKWARD,), None)
        update = _span(spans, index, (WEIGHT_UPDATE,), None)
        if backward is not None:
            weights = stage_weights(index, stage, named)
            last = (update or backward)[1]
            out.extend(LiveRange(replace(v, name=f"{v.name}/gradient", category="gradients",
                                         always_live=False), backward[0], last)
                       for v in weights)
    return out
