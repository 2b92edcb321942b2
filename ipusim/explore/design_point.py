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
FIGURES = ("ipus", "throughput(items/s)", "step(ms)", "latency(ms)", "utilisation",
           "utilisation_per_ipu", "bubble_fraction", "host_io_share", "sync_wait_share",
           "memory_max(MB)", "memory_per_ipu(MB)", "capacity(MB)", "fits")


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
    """The point's figures (see :data:`FIGURES`): the timeline's summary, each
    IPU's utilisation and the memory each IPU of a replica needs against its
    SRAM. Lists are JSON text so the row is flat whatever the IPU count."""
    timeline = timeline if timeline is not None else simulate_point(point)
    summary = timeline.summary()
    memory = timeline.memory_per_ipu()
    return {
        "ipus": timeline.num_ipus,
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


def outcomes(table: pd.DataFrame) -> dict[str, int]:
    """How many points of a sweep's results table fit, do not fit, or were refused
    (an error: PopTorch's checks, or a failed simulation)."""
    valid = table["error"].isna()
    fits = valid & table["fits"].fillna(False).astype(bool)
    return {"fit": int(fits.sum()), "do not fit": int((valid & ~fits).sum()),
            "invalid": int((~valid).sum())}


def pareto_front(table: pd.DataFrame) -> pd.Index:
    """The rows of a sweep's results table (a row per point, as :func:`evaluate` gives
    them) that no other valid row beats on both throughput (higher) and memory (lower):
    the choices worth making. Rows with an error are out."""
    throughput, memory = "throughput(items/s)", "memory_max(MB)"
    valid = table[table["error"].isna() & table[throughput].notna()]
    ordered = valid.sort_values([memory, throughput], ascending=[True, False], kind="stable")
    front, best = [], float("-inf")
    for index, row in ordered.iterrows():
        if row[throughput] > best:
            front.append(index)
            best = row[throughput]
    return pd.Index(front)
