"""One point of a design-space sweep: a work description run one way, and its figures.

A sweep simulates many ways of running the same measured work. This module
is what each of them costs: simulate the point's calls, then read the
figures off the :class:`Timeline` and the memory table, never computing
them a second way. It needs no torch, so a sweep's workers import only
ipusim.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass

import pandas as pd

from ipusim.cost.cost_model import CostModel
from ipusim.cost.work import Work
from ipusim.hardware import SystemSpec
from ipusim.hardware.specs import check_amount, check_type
from ipusim.plan.memory import MB, fits
from ipusim.plan.run_config import RunConfig
from ipusim.simulation import Simulation, Timeline

# The figures of a point, in the order a results table shows them.
FIGURES = ("ipus", "pipeline_stages", "throughput(items/s)", "step(ms)", "latency(ms)",
           "utilisation", "utilisation_per_ipu", "bubble_fraction", "host_io_share",
           "sync_wait_share", "memory_max(MB)", "memory_per_ipu(MB)", "capacity(MB)", "fits")


@dataclass(frozen=True)
class DesignPoint:
    """Everything a worker needs to simulate one point: the (shared) work and
    how this point runs it."""

    work: Work
    run: RunConfig
    system: SystemSpec
    cost_model: CostModel
    steps: int = 1

    def __post_init__(self) -> None:
        for name, kind in (("work", Work), ("run", RunConfig), ("system", SystemSpec),
                           ("cost_model", CostModel)):
            check_type("DesignPoint.", name, getattr(self, name), kind)
        check_amount("DesignPoint.", "steps", self.steps, integer=True, positive=True)


def simulate_point(point: DesignPoint) -> Timeline:
    """The timeline of the point's calls."""
    simulation = Simulation(point.work, point.run, point.system, point.cost_model)
    return simulation.run_steps(point.steps)


def figures(point: DesignPoint, timeline: Timeline | None = None) -> dict:
    """The point's figures (see :data:`FIGURES`): the timeline's summary, the
    pipeline's stages P (0 when not pipelined), each IPU's utilisation and the
    memory each IPU of a replica needs against its SRAM. Lists are JSON text so
    the row is flat whatever the IPU count."""
    timeline = timeline if timeline is not None else simulate_point(point)
    summary = timeline.summary()
    memory = timeline.memory_per_ipu()
    return {
        "ipus": timeline.num_ipus,
        "pipeline_stages": timeline.plan.pipeline_depth,
        "throughput(items/s)": summary["throughput(items/s)"],
        "step(ms)": summary["duration(ms)"] / point.steps,
        "latency(ms)": summary["latency(us)"] / 1e3,
        "utilisation": summary["utilisation"],
        "utilisation_per_ipu": json.dumps([round(float(u), 6) for u in timeline.utilisation()]),
        "bubble_fraction": summary["bubble_fraction"],
        "host_io_share": summary["host_io_share"],
        "sync_wait_share": summary["sync_wait_share"],
        "memory_max(MB)": float(memory["total"].max()) / MB,
        "memory_per_ipu(MB)": json.dumps([round(float(m) / MB, 3) for m in memory["total"]]),
        "capacity(MB)": float(memory["capacity"].min()) / MB,
        "fits": fits(memory),
    }


def evaluate(point: DesignPoint) -> tuple[dict, float]:
    """The point's figures, or ``{"error": ...}`` when it cannot run, and the
    wall seconds it took: what a sweep worker sends back."""
    start = time.perf_counter()
    try:
        row = {**figures(point), "error": None}
    except Exception as error:  # recorded against the point, not fatal to the sweep
        row = {"error": f"{type(error).__name__}: {error}"}
    return row, time.perf_counter() - start


def evaluate_parts(work: Work, run: RunConfig, system: SystemSpec, cost_model: CostModel,
                   steps: int) -> tuple[dict, float]:
    """:func:`evaluate` with the work passed on its own, so a cluster can hold
    it once (Ray's object store) and hand it to every point that shares it."""
    return evaluate(DesignPoint(work, run, system, cost_model, steps))


def accepted(table: pd.DataFrame) -> pd.Series:
    """Which rows of a sweep's results table PopTorch would run: no error (its
    checks passed and the point simulated) and every IPU fits its SRAM."""
    return table["error"].isna() & table["fits"].fillna(False).astype(bool)


def outcomes(table: pd.DataFrame) -> dict[str, int]:
    """How many points of a sweep's results table fit, do not fit, or were refused
    (an error: PopTorch's checks, or a failed simulation)."""
    valid, fits = table["error"].isna(), accepted(table)
    return {"fit": int(fits.sum()), "do not fit": int((valid & ~fits).sum()),
            "invalid": int((~valid).sum())}


# Why a point is refused (:func:`refusals`).
REFUSED_OPTIONS, OUT_OF_MEMORY = "options refused", "out of memory"


def refusals(table: pd.DataFrame) -> pd.DataFrame:
    """The rows of a sweep's results table that PopTorch would refuse, with why
    (``refusal``: :data:`REFUSED_OPTIONS` or :data:`OUT_OF_MEMORY`) and the reason
    in words (``reason``): the error its checks (or the simulation) gave, or the
    fullest IPU's memory against its SRAM, which PopTorch refuses to compile
    unless told to allow out-of-memory models."""
    rows = {}
    for index, row in table[~accepted(table)].iterrows():
        if isinstance(row["error"], str):
            rows[index] = (REFUSED_OPTIONS, row["error"])
        else:
            rows[index] = (OUT_OF_MEMORY, _over_memory(row))
    return pd.DataFrame.from_dict(rows, orient="index", columns=["refusal", "reason"]) \
        .reindex([index for index in table.index if index in rows])


def _over_memory(row: pd.Series) -> str:
    """The fullest IPU of a point that does not fit, against its SRAM, in words."""
    capacity = row["capacity(MB)"]
    per_ipu = json.loads(row["memory_per_ipu(MB)"]) if isinstance(
        row.get("memory_per_ipu(MB)"), str) else [row["memory_max(MB)"]]
    ipu = max(range(len(per_ipu)), key=per_ipu.__getitem__)
    over = [number for number, needed in enumerate(per_ipu) if needed > capacity]
    others = f"; {len(over)} of its {len(per_ipu)} IPUs do not fit" if len(over) > 1 else ""
    return (f"IPU {ipu} needs {per_ipu[ipu]:,.1f} MB of its {capacity:,.1f} MB of SRAM "
            f"({per_ipu[ipu] / capacity:.0%}){others}")


def pareto_front(table: pd.DataFrame) -> pd.Index:
    """The rows of a sweep's results table (a row per point, as :func:`evaluate` gives
    them) that PopTorch would run (:func:`accepted`: no error, fits in memory) and
    that no other such row beats on both throughput (higher) and memory (lower):
    the choices worth making."""
    throughput, memory = "throughput(items/s)", "memory_max(MB)"
    valid = table[accepted(table) & table[throughput].notna()]
    ordered = valid.sort_values([memory, throughput], ascending=[True, False], kind="stable")
    front, best = [], float("-inf")
    for index, row in ordered.iterrows():
        if row[throughput] > best:
            front.append(index)
            best = row[throughput]
    return pd.Index(front)
