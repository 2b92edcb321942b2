"""Where a model's compute time goes, operator by operator.

Each stage's passes (forward, backward, recompute, weight update) list their
operators as :class:`~ipusim.cost.work.Kernel` s; this prices each with the plan's
cost model and splits its cycles into the AMP, exchange, compute-set syncs and
vector work (:class:`~ipusim.cost.operator_model.OperatorCycles`), so a user can see
why a stage takes the time it does.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import pandas as pd

from ipusim.cost.operator_model import operator_cycles
from ipusim.engine.event_kinds import BACKWARD, FORWARD, RECOMPUTE, WEIGHT_UPDATE

if TYPE_CHECKING:
    from ipusim.hardware import IPUSpec
    from ipusim.plan.engine_plan import EnginePlan

COLUMNS = ("stage", "ipu", "pass", "op", "kind", "width", "m", "k", "n", "groups", "elements",
           "count", "amp_cycles", "exchange_cycles", "sync_cycles", "vector_cycles",
           "compute_sets", "total_cycles", "time_us")


def operator_breakdown(plan: EnginePlan, ipu: IPUSpec) -> pd.DataFrame:
    """One row per operator of each stage's passes (the forward, and in training the
    backward, recompute and weight update), for one micro-batch on ``ipu`` (the
    compute tiles): the framework operator it comes from (``op``, empty if unknown), its
    shape, how many times it runs, and its cycles by term (all
    runs together). A pass priced by the roofline (no operators) has no rows."""
    rows = []
    for stage, prices in zip(plan.stages, plan.prices):
        passes = {FORWARD: prices.forward}
        if plan.run.training:
            passes.update({BACKWARD: prices.backward, WEIGHT_UPDATE: prices.update})
        if plan.run.training and plan.run.recompute:
            passes[RECOMPUTE] = prices.recompute
        for name, cost in passes.items():
            for kernel, count in cost.kernels:
                cycles = operator_cycles(kernel, ipu, plan.cost).times(count)
                rows.append((stage.name, stage.ipu, name, kernel.op, kernel.kind.value,
                             kernel.width, kernel.m, kernel.k, kernel.n, kernel.groups,
                             kernel.elements, count,
                             cycles.amp, cycles.exchange, cycles.sync, cycles.vector,
                             cycles.compute_sets, cycles.total, cycles.total / ipu.clock_hz * 1e6))
    return pd.DataFrame(rows, columns=list(COLUMNS))
