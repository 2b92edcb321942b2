"""Where a model's compute time goes, operator by operator.

Each stage's passes (forward, backward, recompute, weight update) list their
operators as :class:`~ipusim.cost.work.Kernel` s; this prices each with the plan's
cost model as its program steps (:class:`~ipusim.cost.program.OperatorCycles`) and
splits its cycles into the AMP, exchange, compute-set syncs and vector work, and
into its own vertices and the glue around them, so a user can see why a stage
takes the time it does; with the timeline's compute events, how much of
a step each operator and each pass takes (:func:`operator_shares`, :func:`pass_shares`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import pandas as pd

from ipusim.analysis.metrics import step_spans
from ipusim.cost.cost_model import PS_PER_US
from ipusim.cost.operator_model import operator_cycles
from ipusim.cost.program import Role
from ipusim.engine.event_kinds import BACKWARD, COMPUTE_KINDS, FORWARD, RECOMPUTE, WEIGHT_UPDATE

if TYPE_CHECKING:
    from ipusim.hardware import IPUSpec
    from ipusim.plan.engine_plan import EnginePlan

COLUMNS = ("stage", "stage_index", "ipu", "pass", "op", "kind", "width", "m", "k", "n",
           "groups", "elements", "count", "amp_cycles", "exchange_cycles", "sync_cycles",
           "vector_cycles", "vertex_cycles", "glue_cycles", "compute_sets", "total_cycles",
           "time_us", "steps")


def operator_breakdown(plan: EnginePlan, ipu: IPUSpec) -> pd.DataFrame:
    """One row per operator of each stage's passes (the forward, and in training the
    backward, recompute and weight update), for one micro-batch on ``ipu`` (the
    compute tiles): the framework operator it comes from (``op``, empty if unknown), its
    shape, how many times it runs, and its cycles by term (all runs together): by the
    tile's unit (AMP, exchange, sync, vector) and by what they do (``vertex_cycles``
    the operator's own vertices, ``glue_cycles`` the copies, transposes,
    rearrangements, reductions and casts PopLibs builds around them). ``steps`` lists
    its program steps as (program, name, role, cycles of all runs) tuples.
    ``stage_index`` is the stage's number in the event table. A pass priced by the
    roofline (no operators) has no rows."""
    rows = []
    for index, (stage, prices) in enumerate(zip(plan.stages, plan.prices)):
        passes = {FORWARD: prices.forward}
        if plan.run.training:
            passes.update({BACKWARD: prices.backward, WEIGHT_UPDATE: prices.update})
        if plan.run.training and plan.run.recompute:
            passes[RECOMPUTE] = prices.recompute
        for name, cost in passes.items():
            for kernel, count in cost.kernels:
                cycles = operator_cycles(kernel, ipu, plan.cost.on_ipu(stage.ipu)).times(count)
                roles = cycles.by_role()
                steps = tuple((step.program.value, step.name, step.role.value, step.total)
                              for step in cycles.steps)
                rows.append((stage.name, index, stage.ipu, name, kernel.op, kernel.kind.value,
                             kernel.width, kernel.m, kernel.k, kernel.n, kernel.groups,
                             kernel.elements, count,
                             cycles.amp, cycles.exchange, cycles.sync, cycles.vector,
                             roles[Role.VERTEX], roles[Role.GLUE],
                             cycles.compute_sets, cycles.total, cycles.total / ipu.clock_hz * 1e6,
                             steps))
    return pd.DataFrame(rows, columns=list(COLUMNS))



PASS_COLUMNS = ("stage", "stage_index", "ipu", "pass", "runs_per_step", "us_per_run",
                "us_per_step", "step_share", "compute_share", "operators")


class StepTimes(NamedTuple):
    """One replica's step as the compute events show it: the mean step span, the
    compute time in a step, and each (stage, pass)'s runs and time in a step."""

    step_ps: float
    compute_ps: float
    runs: pd.Series      # by (stage index, pass)
    pass_ps: pd.Series   # by (stage index, pass)

    def share(self, ps: float | pd.Series, of: str) -> float | pd.Series:
        """``ps`` of one step as a share of the step (``of="step"``) or of its compute."""
        whole = self.step_ps if of == "step" else self.compute_ps
        return ps / whole if whole else ps * 0.0


def step_times(events: pd.DataFrame) -> StepTimes:
    """:class:`StepTimes` of an event table: compute events of every replica and step,
    counted and summed per replica and step (the mean over them)."""
    compute = events[events["kind"].isin(COMPUTE_KINDS) & (events["stage"] >= 0)]
    duration = compute["end_ps"] - compute["start_ps"]
    replica_steps = max(compute.groupby(["replica", "step"]).ngroups, 1)
    grouped = duration.groupby([compute["stage"], compute["kind"].astype(str)])
    spans = step_spans(events)
    step_ps = float((spans["end_ps"] - spans["start_ps"]).mean()) if len(spans) else 0.0
    return StepTimes(step_ps, float(duration.sum()) / replica_steps,
                     grouped.size() / replica_steps, grouped.sum() / replica_steps)


def pass_shares(times: StepTimes, plan: EnginePlan) -> pd.DataFrame:
    """Each stage's passes as a step runs them, one replica's: how many times each
    runs in a step, its mean time per run and its time per step, and that time's
    share of the step (the mean step span: the part of the step its IPU spends in the
    pass; IPUs that run at once overlap) and of the replica's compute time in a step.
    ``operators`` says whether the pass lists its operators (else the roofline priced
    it: its FLOPs and bytes, or a fixed time). ``times``: :func:`step_times` of the
    timeline's events."""
    rows = []
    for (index, name), count in times.runs.items():
        stage, prices = plan.stages[index], plan.prices[index]
        cost = {FORWARD: prices.forward, BACKWARD: prices.backward,
                RECOMPUTE: prices.recompute, WEIGHT_UPDATE: prices.update}[name]
        per_step = float(times.pass_ps[index, name])
        rows.append((stage.name, int(index), stage.ipu, name, float(count),
                     per_step / count / PS_PER_US, per_step / PS_PER_US,
                     times.share(per_step, "step"), times.share(per_step, "compute"),
                     bool(cost.kernels)))
    return pd.DataFrame(rows, columns=list(PASS_COLUMNS))


def operator_shares(breakdown: pd.DataFrame, times: StepTimes) -> pd.DataFrame:
    """:func:`operator_breakdown` with how many times each operator's pass runs in a
    step (``runs_per_step``, one replica's), the operator's time in a step
    (``us_per_step``) and that time's share of the step and of the replica's compute
    (``step_share``, ``compute_share``, as :func:`pass_shares` defines them). The
    operators of a pass the timeline never runs (a pipeline's last stage is not
    recomputed) are left out. ``times``: :func:`step_times` of the timeline's events."""
    keys = pd.MultiIndex.from_arrays([breakdown["stage_index"], breakdown["pass"]])
    runs = times.runs.reindex(keys, fill_value=0.0).to_numpy(dtype=float)
    breakdown, runs = breakdown[runs > 0].reset_index(drop=True), runs[runs > 0]
    us_per_step = breakdown["time_us"] * runs
    return breakdown.assign(runs_per_step=runs, us_per_step=us_per_step,
                            step_share=times.share(us_per_step * PS_PER_US, "step"),
                            compute_share=times.share(us_per_step * PS_PER_US, "compute"))


# An element width in bytes, as its precision is named.
_PRECISION = {1: "8-bit", 2: "fp16", 4: "fp32", 8: "64-bit"}


def precision(width: int) -> str:
    """An element width in bytes as its precision (2: fp16, 4: fp32)."""
    return _PRECISION.get(int(width), f"{int(width)}-byte")
