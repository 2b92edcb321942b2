"""The timeline: a simulation's events and every figure read off them.

:class:`Timeline` is what the analyses of this layer are about and how a
caller reaches them (``timeline.figures()``, ``bottleneck()``,
``pipeline_phases()``...); each figure is computed once, in its own module,
from the event table, the work and the engine plan. A distributed job's
instances are put together by :func:`job_timeline`.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import cached_property

import numpy as np
import pandas as pd

from ipusim.analysis import bottleneck as bottlenecks
from ipusim.analysis import headline, metrics, over_time, step_time
from ipusim.analysis import pipeline_phases as phases
from ipusim.analysis.bottleneck import Bottleneck, StageBalance
from ipusim.analysis.graph_profile import GraphProfile, graph_profile
from ipusim.analysis.operator_breakdown import (
    StepTimes,
    operator_breakdown,
    operator_shares,
    pass_shares,
    step_times,
)
from ipusim.analysis.pipeline_phases import LatencyPath
from ipusim.cost.work import Work
from ipusim.hardware import SystemSpec
from ipusim.plan.engine_plan import EnginePlan
from ipusim.plan.run_config import RunConfig


@dataclass(frozen=True)
class Timeline:
    """The events of a simulation and the figures derived from them.

    ``plan`` is the engine's (see :class:`ipusim.plan.engine_plan.EnginePlan`); left out,
    it is worked out from ``work``, ``run`` and ``system`` (its stages priced
    with the default cost model: the figures read only its shape).
    """

    events: pd.DataFrame
    work: Work
    run: RunConfig
    system: SystemSpec
    steps: int
    instance: int = 0
    plan: EnginePlan | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.plan is None:
            object.__setattr__(self, "plan", EnginePlan.build(self.work, self.run, self.system))

    @property
    def num_ipus(self) -> int:
        """IPUs the engine uses (replicas x IPUs per replica)."""
        return self.plan.num_ipus

    @property
    def items(self) -> int:
        """Samples processed over all calls and replicas."""
        return self.steps * self.plan.items_per_call

    @property
    def duration_ps(self) -> int:
        return metrics.span_ps(self.events)

    def throughput(self) -> float:
        """Items per simulated second."""
        return metrics.throughput(self.events, self.items)

    def per_ipu(self) -> pd.DataFrame:
        return metrics.per_ipu(self.events, self.num_ipus)

    def utilisation(self) -> pd.Series:
        return metrics.utilisation(self.events, self.num_ipus)

    def host_io_share(self) -> float:
        return metrics.host_io_share(self.events, self.num_ipus)

    def sync_wait_share(self) -> float:
        return metrics.sync_wait_share(self.events, self.num_ipus)

    def bubble_fraction(self) -> float:
        """Pipeline bubble (0 when the execution is not pipelined)."""
        plan = self.plan
        if not plan.pipeline:
            return 0.0
        return float(metrics.bubble_fraction(self.events, plan.pipeline_depth,
                                             plan.micro_batches_per_run))

    def pipeline_slots(self) -> pd.DataFrame:
        """The occupied (pipeline stage, cycle) slots of every pipeline run (empty unless
        pipelined; see :func:`ipusim.analysis.metrics.pipeline_slots`)."""
        return metrics.pipeline_slots(self.events, self.plan.pipeline_depth,
                                      self.plan.micro_batches_per_run)

    def latency_ps(self) -> float:
        return metrics.latency_ps(self.events)

    def summary(self) -> dict[str, float]:
        """The headline figures, in the units a person reads them."""
        figures = self.figures()
        return {name: figures[name] for name in headline.SUMMARY_FIGURES}

    # The analyses of ipusim.analysis.headline, each computed there once.
    def figures(self) -> dict[str, float]:
        """Every headline figure: those of :meth:`summary`, host-link occupancy, the host
        round trip's share and the steps (see :func:`ipusim.analysis.headline.headline_figures`),
        worked out once: the verdict, the profile, the HTML and the text summary all read
        them (each call gets its own copy)."""
        return dict(self._figures)

    @cached_property
    def _figures(self) -> dict[str, float]:
        return headline.headline_figures(self)

    def category_times(self) -> pd.DataFrame:
        """Share of the span each IPU spends in each category of time, idle included."""
        return metrics.category_times(self.events, self.num_ipus)

    def step_time_by_ipu(self) -> pd.DataFrame:
        """Picoseconds each IPU spends in each part of the step time (compute, exchange,
        host I/O, sync wait, pipeline bubble, host round trip...), each row adding up to
        the span (see :mod:`ipusim.analysis.step_time`)."""
        return step_time.step_time_by_ipu(self)

    def category_shares_over_time(self, windows: int = 200) -> pd.DataFrame:
        """Each IPU's share of each of ``windows`` equal windows of the span in each category
        of time (see :func:`ipusim.analysis.over_time.category_shares_over_time`)."""
        return over_time.category_shares_over_time(self.events, self.num_ipus, windows)

    def host_link_busy_over_time(self, windows: int = 200) -> pd.DataFrame:
        """Each host link's busy share and bytes moved, per direction, in each of ``windows``
        equal windows of the span (see :mod:`ipusim.analysis.over_time`)."""
        links = self.system.host_link_of(np.arange(self.num_ipus))
        return over_time.host_link_busy_over_time(self.events, np.asarray(links),
                                                  self.system.num_host_links, windows)

    def host_link_occupancy(self) -> float:
        """The busiest host link's share of the span spent moving data."""
        return headline.host_link_occupancy(self)

    def host_round_trip_share(self) -> float:
        """The IPUs' mean share of the span spent waiting for the host between calls."""
        return headline.host_round_trip_share(self)

    def stage_times_us(self) -> dict[int, float]:
        """Mean compute time of each stage per micro-batch, in µs."""
        return headline.stage_times_us(self)

    def to_cycles(self, ps: float) -> int:
        """Simulated picoseconds as cycles of the IPU clock."""
        return headline.to_cycles(ps, self)

    def step_cycles(self) -> pd.DataFrame:
        """Cycles of every program step (call), in all and per kind of event."""
        return headline.step_cycles(self)

    def micro_batch_io(self, step: int | None = None) -> pd.DataFrame:
        """When each micro-batch of ``step`` (default: the last) of replica 0 came in, was
        ready and reached the host, and whether its outputs return."""
        return headline.micro_batch_io(self, step)

    def memory_per_ipu(self) -> pd.DataFrame:
        """Bytes each IPU of one replica needs, by category, against its capacity, and the
        share of it used."""
        return headline.memory_per_ipu(self)

    def memory_per_stage(self) -> pd.DataFrame:
        """Bytes each (merged) stage needs, by category, without the runtime code."""
        return headline.memory_per_stage(self)

    # What limits the run, of ipusim.analysis.bottleneck.
    def bottleneck(self, loader_items_per_s: float | None = None) -> Bottleneck:
        """What limits the run, and the figures that decided it (``loader_items_per_s``: the
        data loader's own throughput, when known)."""
        return bottlenecks.find_bottleneck(self, loader_items_per_s)

    def stage_balance(self) -> StageBalance | None:
        """The slowest and fastest stage per micro-batch (None with one stage)."""
        return bottlenecks.stage_balance(self)

    def operator_breakdown(self) -> pd.DataFrame:
        """Each stage's operators for one micro-batch, their cycles split into AMP,
        exchange, compute-set syncs and vector work (see
        :mod:`ipusim.analysis.operator_breakdown`)."""
        return operator_breakdown(self.plan, self.run.compute_ipu(self.system.ipu))

    def operator_shares(self) -> pd.DataFrame:
        """:meth:`operator_breakdown` with each operator's time in a step and its share
        of the step and of the compute (see :func:`~ipusim.analysis.operator_breakdown.
        operator_shares`)."""
        return operator_shares(self.operator_breakdown(), self.step_times())

    def pass_shares(self) -> pd.DataFrame:
        """Each stage's passes in a step: runs, time, shares, and whether they list
        operators (see :func:`~ipusim.analysis.operator_breakdown.pass_shares`)."""
        return pass_shares(self.step_times(), self.plan)

    def step_times(self) -> StepTimes:
        """One replica's step as its compute events show it (see :func:`~ipusim.analysis.
        operator_breakdown.step_times`), worked out once: the operator and pass shares,
        the report and the traces read it."""
        return self._step_times

    @cached_property
    def _step_times(self) -> StepTimes:
        return step_times(self.events)

    def graph_profile(self, named: tuple = ()) -> GraphProfile:
        """The last step as Poplar's program steps, the variables on each tile and their
        liveness (see :mod:`ipusim.analysis.graph_profile`); ``named``: the model's parameter
        tensors as :class:`~ipusim.analysis.tile_memory.Variable` s, when known."""
        return graph_profile(self, named)

    # The pipeline's phases, of ipusim.analysis.pipeline_phases.

    def pipeline_cycle_times(self) -> pd.DataFrame:
        """Start and end of every pipeline cycle (columns step, run, cycle, start_ps, end_ps)."""
        return phases.pipeline_cycle_times(self)

    def pipeline_phases(self) -> pd.DataFrame:
        """Ramp-up, main and ramp-down of every pipeline run: their cycles and times (empty
        unless pipelined)."""
        return phases.pipeline_phases(self)

    def latency_path(self, step: int | None = None) -> LatencyPath | None:
        """The micro-batch whose latency Fig 4.1 marks, in ``step`` (default: the first)."""
        return phases.latency_path(self, step)


def job_timeline(timelines: list[Timeline]) -> Timeline:
    """The timelines of a distributed job's instances (poprun) as one: each
    instance's IPUs and replicas numbered after the previous instance's, on
    a system wide enough for all of them."""
    ordered = sorted(timelines, key=lambda timeline: timeline.instance)
    first, count = ordered[0], len(ordered)
    run = replace(first.run, replicas=first.run.replicas * count, instances=1)
    system = replace(first.system, num_ipus=max(first.system.num_ipus, first.num_ipus * count))
    plan = EnginePlan.build(first.work, run, system, first.plan.cost)
    frames = []
    for position, timeline in enumerate(ordered):
        events = timeline.events.copy()
        events["ipu"] += position * first.num_ipus
        events["replica"] = plan.replica_of(events["ipu"])
        frames.append(events)
    events = pd.concat(frames, ignore_index=True).sort_values(
        ["start_ps", "ipu"], kind="stable", ignore_index=True)
    return Timeline(events, first.work, run, system, first.steps, instance=0, plan=plan)
