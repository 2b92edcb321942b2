"""SRAM use per IPU: weights, optimizer state, accumulators, stash, code.

What each IPU must hold for the stages placed on it, and a check that it
fits the IPU's In-Processor-Memory. Tensors moved to streaming memory by
:class:`Offload` leave SRAM (and cost transfer time in the schedule).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from ipusim.cost.work import Execution, Stage, Work
from ipusim.hardware import SystemSpec
from ipusim.plan.engine_plan import EnginePlan
from ipusim.plan.pipeline_stages import pipeline_depth
from ipusim.plan.run_config import RunConfig
from ipusim.plan.setting_names import SettingNames

MB = 1e6
# What an IPU's memory holds, by category: the columns of :func:`memory_per_ipu`.
MEMORY_PARTS = ("weights", "optimizer", "accumulators", "stash", "code", "exchange")
DATA_PARTS = MEMORY_PARTS[:4]  # the tensors, whose exchange buffers grow with them


@dataclass(frozen=True)
class MemoryModel:
    """The fixed costs of a compiled program on each IPU."""

    code_bytes_per_tile: int = field(
        default=24 * 1024, metadata={"help": "program code and runtime state on every tile"})
    code_bytes_per_op: int = field(
        default=32 * 1024, metadata={"help": "vertex code and descriptors per operator"})
    exchange_fraction: float = field(
        default=0.05, metadata={"help": "exchange buffers, as a fraction of the data held"})


class OutOfMemoryError(ValueError):
    """A model that does not fit an IPU's SRAM; ``memory`` is the table that says so
    (:func:`memory_per_ipu`), for a report of where the memory goes."""

    def __init__(self, message: str, memory: pd.DataFrame | None = None):
        super().__init__(message)
        self.memory = memory


def stash_depth(stage: int, num_stages: int, run: RunConfig) -> int:
    """Micro-batches whose activations a stage keeps for its backward.

    In a training pipeline of P pipeline stages the forward of stage k is
    pipeline stage k and its backward pipeline stage P - 1 - k, so P - 2k
    micro-batches are in flight; elsewhere only the current one.
    """
    if not run.training:
        return 0
    if run.execution is Execution.PIPELINED:
        return pipeline_depth(num_stages, training=True) - 2 * stage
    return 1


def recomputes(run: RunConfig, depth: int) -> bool:
    """Whether a stage with ``depth`` micro-batches in flight recomputes its
    forward: a pipeline's last stage runs its backward straight after its
    forward, so it has nothing to recompute."""
    if not (run.training and run.recompute):
        return False
    return depth > 1 if run.execution is Execution.PIPELINED else not run.execution.phased


def memory_per_ipu(work: Work, run: RunConfig, spec: SystemSpec,
                   model: MemoryModel = MemoryModel(),
                   plan: EnginePlan | None = None) -> pd.DataFrame:
    """Bytes each IPU of one replica needs, by category, against its capacity.

    ``plan``: the engine's plan when the caller has it (else worked out here).
    """
    plan = plan or EnginePlan.build(work, run, spec)
    work = plan.work
    offload = run.offload
    stages = work.stages
    rows = {ipu: dict.fromkeys(DATA_PARTS + ("code",), 0.0)
            for ipu in range(plan.ipus_per_replica)}
    for k, stage in enumerate(stages):
        row = rows[stage.ipu]
        weights_on_chip = not offload.weights and not run.execution.phased
        if weights_on_chip:
            row["weights"] += stage.weight_bytes
        if run.training and not offload.optimizer and not run.execution.phased:
            row["optimizer"] += stage.optimizer_bytes / run.optimizer_shards
        if run.training and run.gradient_accumulation > 1 and not offload.accumulators:
            row["accumulators"] += stage.weight_bytes
        depth = stash_depth(k, len(stages), run)
        if offload.activations:
            depth = min(depth, 1)
        if recomputes(run, depth):
            # Each micro-batch in flight keeps its input and checkpoints; the one
            # being backpropagated also holds one recomputed segment.
            inputs = work.input_bytes if k == 0 else stages[k - 1].activation_bytes
            kept = inputs + stage.checkpoint_bytes
            row["stash"] += kept * (depth - 1) + stage.recompute_stash_bytes
        else:
            row["stash"] += stage.stash_bytes * max(depth, 1)
        row["code"] += model.code_bytes_per_op * (stage.forward.ops + stage.backward.ops)
    if run.execution.phased:  # one phase's state on chip at a time
        for stage in stages:
            row = rows[stage.ipu]
            row["weights"] = max(row["weights"], stage.weight_bytes + stage.optimizer_bytes)
        if run.training and run.stash_off_chip:  # and one phase's stash
            for ipu, row in rows.items():
                row["stash"] = max((stage.stash_bytes for stage in stages
                                    if stage.ipu == ipu), default=0)
    table = pd.DataFrame.from_dict(rows, orient="index")
    table["code"] += model.code_bytes_per_tile * spec.ipu.tiles
    data = table[list(DATA_PARTS)].sum(axis=1)
    table["exchange"] = data * model.exchange_fraction
    table["total"] = table.sum(axis=1)
    table["capacity"] = float(run.compute_ipu(spec.ipu).sram_bytes)  # I/O tiles hold buffers
    table.index.name = "ipu"
    return table


def fits(table: pd.DataFrame) -> bool:
    """Whether every IPU of a :func:`memory_per_ipu` table holds what it needs."""
    return bool((table["total"] <= table["capacity"]).all())


def check_fits(table: pd.DataFrame, stages: tuple[Stage, ...] = (),
               names: SettingNames | None = None, training: bool = True) -> None:
    """Raise :class:`OutOfMemoryError` for the first IPU that does not fit: its model
    stages (of ``stages``, the plan's), what its bytes are, and what would help,
    worded by ``names`` (recomputation and the optimizer state only in training)."""
    for ipu, row in table.iterrows():
        if row["total"] > row["capacity"]:
            raise OutOfMemoryError(
                out_of_memory_message(ipu, row, stages, names, training), table)


def excess(table: pd.DataFrame) -> str | None:
    """How far the fullest IPU of a :func:`memory_per_ipu` table is over its SRAM, in
    words (None when every IPU fits): what every output of a run that does not fit
    says first."""
    if fits(table):
        return None
    shares = table["total"] / table["capacity"]
    ipu = int(shares.idxmax())
    over = table.loc[ipu, "total"] - table.loc[ipu, "capacity"]
    return (f"Does not fit: IPU {ipu} needs {table.loc[ipu, 'total'] / MB:,.1f} MB of its "
            f"{table.loc[ipu, 'capacity'] / MB:,.1f} MB ({shares[ipu]:.0%}, "
            f"{over / MB:,.1f} MB over).")


def out_of_memory_message(ipu: int, row: pd.Series, stages: tuple[Stage, ...] = (),
                          names: SettingNames | None = None, training: bool = True) -> str:
    """Why IPU ``ipu`` (a row of :func:`memory_per_ipu`) does not fit, and what would help."""
    names = names or SettingNames()
    held = [stage.name for stage in stages if stage.ipu == ipu]
    where = f" (model stage{'s' if len(held) > 1 else ''} {', '.join(held)})" if held else ""
    parts = ", ".join(f"{name} {row[name] / MB:,.1f} MB" for name in MEMORY_PARTS if row[name])
    over = row["total"] / row["capacity"]
    helps = ([f"recomputation ({names.word('recompute')})",
              f"the optimizer state off chip ({names.word('optimizer_location')})"]
             if training else [])
    helps += [f"more pipeline stages ({names.word('stage_placement')})",
              f"a smaller micro-batch ({names.word('micro_batch')})"]
    return (f"Out of memory on IPU {ipu}{where}: it needs {row['total'] / MB:,.1f} MB "
            f"({parts}) but has {row['capacity'] / MB:,.1f} MB of SRAM ({over:.0%}). "
            f"Try {', '.join(helps[:-1])} or {helps[-1]}; {names.word('allow_out_of_memory')} "
            "simulates it anyway and reports by how much it does not fit.")
