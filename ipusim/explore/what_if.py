"""What-if analysis: the recorded step simulated again with one thing changed.

A profiler shows where the time went; a simulator can try the fix. Each
:class:`Change` rewrites the run's work, run configuration, system or cost
model in one way (an infinitely fast host link, balanced pipeline stages,
four times the gradient accumulation...), and :func:`what_ifs` simulates the
same calls again with it. The stages are already measured and planned, so a
change costs one simulation of the recorded calls, and its throughput is
exactly what a run made with that change gives.

A change the run cannot make (balancing a model of one stage, twice the
replicas on a system without the IPUs for them, a change that does not fit
in memory) is left out, with the reason. Each change tried names every setting
it changes: its own, and those the run's configuration shows it changed besides
(pipelined execution raising the device iterations to fill the pipeline).

A run whose calls each need the previous call's outputs (``RunConfig.autoregressive``:
a generation loop on the host) cannot run more of them per call as device
iterations; its lever is running the loop's steps on the device
(``on_device_loop``), which the IPUs run as the device iterations of one call.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from statistics import fmean
from typing import NamedTuple

from ipusim.analysis.headline import delivered_items_per_s
from ipusim.analysis.metrics import time_by_category_ps
from ipusim.analysis.timeline import Timeline
from ipusim.cost.cost_model import CostModel
from ipusim.cost.work import Cost, Execution, Work
from ipusim.engine.event_kinds import COMPUTE_TIME, IPU_COPY_TIME
from ipusim.engine.sync_groups import SyncPattern
from ipusim.hardware import SystemSpec
from ipusim.plan.engine_plan import EnginePlan
from ipusim.plan.memory import MB, fits, memory_per_ipu
from ipusim.plan.pipeline_stages import pipeline_depth
from ipusim.plan.run_config import RunConfig
from ipusim.simulation import Simulation

# A rate no link reaches, standing in for "infinitely fast" where a figure must be finite.
UNLIMITED_BYTES_PER_S = 1e30


class Setup(NamedTuple):
    """What a simulation is made of: the work as planned, how it runs, where, at what cost."""

    work: Work
    run: RunConfig
    system: SystemSpec
    cost: CostModel


@dataclass(frozen=True)
class Change:
    """One change to try: its words, the setting that makes it (ipusim's name,
    worded for the user by the caller; None when no setting does) and the value it
    gives that setting, the limit it lifts (a verdict kind), and how it rewrites a
    setup (or why it cannot)."""

    change: str
    setting: str | None
    limit: str
    apply: Callable[[Setup, EnginePlan], Setup | str]
    actionable: bool = True
    # False for a change of the samples per weight update (more accumulation, more
    # replicas): faster, but the training converges differently.
    keeps_batch: bool = True
    value: object = None  # what ``setting`` becomes (None where the change sets none)
    samples_per_call: int = 1  # times the samples each call runs
    # The RunConfig fields ``setting`` itself makes (those of the same name by default):
    # any other field the change alters is named as a setting it changes besides.
    covers: tuple[str, ...] = ()


def _setting(change: str, setting: str, value: object, limit: str,
             apply: Callable[[Setup, EnginePlan, object], Setup | str], **more) -> Change:
    """A change made by giving ``setting`` the ``value`` that ``apply`` sets."""
    return Change(change, setting, limit, partial(apply, value=value), value=value, **more)


@dataclass(frozen=True)
class WhatIf:
    """The simulated figures of one change, and its speed-up over the run as recorded."""

    change: str
    setting: str | None
    value: object  # what the change sets ``setting`` to (None where it sets none)
    limit: str
    actionable: bool
    keeps_batch: bool
    samples_per_call: int  # times the samples each call runs
    items_per_s: float
    step_time_ms: float
    speedup: float
    # The settings it changes besides its own: (setting, value) pairs, value None
    # where the setting is a strategy rather than a number.
    also: tuple[tuple[str, object], ...] = ()


class LeftOut(NamedTuple):
    """A change the run cannot make, and why."""

    change: str
    reason: str


@dataclass(frozen=True)
class WhatIfs:
    """Every change tried, fastest first, those left out, and the run as recorded."""

    tried: tuple[WhatIf, ...]
    left_out: tuple[LeftOut, ...]
    items_per_s: float      # the run as recorded (the loader's rate included)
    step_time_ms: float

    def best(self, actionable: bool = True) -> WhatIf | None:
        """The change with the largest speed-up (among those a user can make)."""
        return next((w for w in self.tried if w.actionable or not actionable), None)


# The changes -----------------------------------------------------------------

def _host_link(setup: Setup, plan: EnginePlan) -> Setup | str:
    if setup.run.synthetic_data and not setup.work.output_bytes_per_sample:
        return "no data crosses the host link (synthetic data, no outputs)"
    system = replace(setup.system, **{name: UNLIMITED_BYTES_PER_S for name in (
        "host_link_bandwidth", "host_to_gateway_bandwidth", "gateway_to_ipu_bandwidth",
        "gateway_to_host_bandwidth", "ipu_to_gateway_bandwidth")})
    return setup._replace(system=system, cost=replace(setup.cost, host_transfer_latency_ps=0))


def _syncs(setup: Setup, plan: EnginePlan) -> Setup:
    return setup._replace(cost=replace(setup.cost, ipu_sync_hop_ps=0, host_sync_ps=0))


def _ipu_links(setup: Setup, plan: EnginePlan) -> Setup | str:
    if plan.num_ipus == 1:
        return "one IPU: nothing crosses the IPU-Links"
    ipu = replace(setup.system.ipu, ipu_link_bandwidth=UNLIMITED_BYTES_PER_S)
    return setup._replace(system=replace(setup.system, ipu=ipu))


def _fixed_compute(setup: Setup, plan: EnginePlan,
                   times: Callable[[list[int]], list[int]]) -> Work:
    """The planned stages with each pass's compute a fixed time: ``times`` maps the
    stages' priced times of one pass (forward, backward, recompute, the weight
    update, the accumulators' adds) to new ones."""
    passes = {name: [getattr(p, f"{name}_ps") for p in plan.prices]
              for name in ("forward", "backward", "recompute", "update", "accumulate")}
    # The backward's time holds the accumulators' adds: they become a given time of
    # their own, so that pricing the stage again adds them once.
    passes["backward"] = [ps - p.accumulate_ps for ps, p in zip(passes["backward"], plan.prices)]
    passes = {name: times(ps) for name, ps in passes.items()}
    # A given update is divided among the optimizer's shards when priced: undo that here.
    shards = setup.run.optimizer_shards
    stages = tuple(
        replace(stage, forward=Cost(time_ps=passes["forward"][k]),
                backward=Cost(time_ps=passes["backward"][k]),
                recompute=Cost(time_ps=passes["recompute"][k]),
                update=Cost(time_ps=passes["update"][k] * shards),
                accumulate=Cost(time_ps=passes["accumulate"][k]))
        for k, stage in enumerate(plan.stages))
    return replace(plan.work, stages=stages)


def _balanced(setup: Setup, plan: EnginePlan, steps: dict[int, IPUStep]) -> Setup | str:
    """Every IPU's whole step brought to the IPUs' mean: the compute each IPU ran
    (forward, recompute, backward, weight update: ``steps``, per call as recorded)
    scaled by one factor per IPU, so that with its copies to the other IPUs it
    takes the mean step. A pass that only some IPUs run (recomputation: the last
    stage recomputes nothing) thus weighs on the IPUs that run it."""
    if len(plan.stages) < 2:
        return "one model stage: nothing to balance"
    if setup.run.execution is not Execution.PIPELINED:
        return (f"{setup.run.execution.value} execution runs one stage at a time: balancing "
                "the stages changes nothing")
    mean = fmean(step.compute_ps + step.copies_ps for step in steps.values())
    factor = {ipu: max(mean - step.copies_ps, 0.0) / step.compute_ps if step.compute_ps
              else 1.0 for ipu, step in steps.items()}
    ipus = [stage.ipu for stage in plan.stages]

    def at_mean(times: list[int]) -> list[int]:
        return [round(t * factor.get(ipu, 1.0)) for t, ipu in zip(times, ipus)]

    return setup._replace(work=_fixed_compute(setup, plan, at_mean))


def _compute_twice_as_fast(setup: Setup, plan: EnginePlan) -> Setup:
    return setup._replace(work=_fixed_compute(setup, plan, lambda ts: [t // 2 for t in ts]))


def _accumulation(setup: Setup, plan: EnginePlan, value: int) -> Setup | str:
    if not setup.run.training:
        return "an inference model accumulates no gradients"
    return setup._replace(run=replace(setup.run, gradient_accumulation=value))


def _device_iterations(setup: Setup, plan: EnginePlan, value: int) -> Setup:
    return setup._replace(run=replace(setup.run, device_iterations=value))


def _optimizer_location(setup: Setup, plan: EnginePlan) -> Setup | str:
    if not setup.run.training or not any(s.optimizer_bytes for s in plan.stages):
        return "the model keeps no optimizer state"
    offload = setup.run.offload
    return setup._replace(run=replace(setup.run,
                                      offload=replace(offload, optimizer=not offload.optimizer)))


def _replicas(setup: Setup, plan: EnginePlan, value: int) -> Setup | str:  # twice as many
    needed = value * plan.ipus_per_replica
    if needed > setup.system.num_ipus:
        return (f"twice the replicas need {needed} IPUs; the system has "
                f"{setup.system.num_ipus}")
    return setup._replace(run=replace(setup.run, replicas=value))


def _sync_pattern(setup: Setup, plan: EnginePlan, value: SyncPattern) -> Setup | str:
    if setup.run.sync_pattern is not SyncPattern.FULL:
        return f"the run already syncs as {setup.run.sync_pattern.value}"
    return setup._replace(run=replace(setup.run, sync_pattern=value))


def _pipelined(setup: Setup, plan: EnginePlan) -> Setup | str:
    if plan.ipus_per_replica < 2:
        return "one IPU per replica: nothing to pipeline"
    if setup.run.execution is not Execution.SHARDED:
        return f"the run is {setup.run.execution.value} already"
    run = setup.run
    depth = pipeline_depth(len(plan.stages), run.training)  # the fewest micro-batches a run takes
    run = (replace(run, execution=Execution.PIPELINED,
                   gradient_accumulation=max(run.gradient_accumulation, depth))
           if run.training else
           replace(run, execution=Execution.PIPELINED,
                   device_iterations=max(run.device_iterations, depth)))
    return setup._replace(run=run)


def _parallel_phased(setup: Setup, plan: EnginePlan) -> Setup | str:
    if setup.run.execution is not Execution.PHASED:
        return "the run has no serial phases to run in parallel"
    return setup._replace(run=replace(setup.run, execution=Execution.PARALLEL_PHASED,
                                      sync_pattern=SyncPattern.REPLICA_AND_LADDER))


def _loader(setup: Setup, plan: EnginePlan) -> Setup:
    return setup  # the loader is not simulated: the device's own rate is the change


class IPUStep(NamedTuple):
    """An IPU's time per call in compute (every pass and the weight update) and in
    copies to the other IPUs (activations, the all-reduce), as recorded."""

    compute_ps: float
    copies_ps: float


def changes(run: RunConfig, round_trip_over_bubble: bool = False,
            steps: dict[int, IPUStep] | None = None) -> tuple[Change, ...]:
    """The changes :func:`what_ifs` tries on ``run``, in the order it tries them.

    More device iterations shrink an inference pipeline's bubble and spread its host
    round trip alike: the limit they lift is the one the run's figures show larger
    (``round_trip_over_bubble``: the host round trip's share of the time over the
    bubble's). An autoregressive run gets four times the steps of its loop run on
    the device per call instead. ``steps``: each IPU's step as recorded, which
    balancing the IPUs weighs."""
    optimizer = "on chip" if run.offload.optimizer else "off chip"
    more_calls_limit = ("pipeline_bubble" if run.execution is Execution.PIPELINED
                        and not run.training and not round_trip_over_bubble
                        else "host_round_trip")
    more_per_call = (
        _setting("four times the loop's steps run on the device per call", "on_device_loop",
                 run.device_iterations * 4, more_calls_limit, _device_iterations,
                 samples_per_call=4, covers=("device_iterations",))
        if run.autoregressive else
        # An inference pipeline runs a call's micro-batches through one fill and drain.
        _setting("four times the device iterations", "device_iterations",
                 run.device_iterations * 4, more_calls_limit, _device_iterations,
                 samples_per_call=4))
    return (
        Change("an infinitely fast host link", None, "host_link", _host_link),
        Change("an infinitely fast data loader", "async_loader", "data_loader", _loader),
        Change("syncs that cost nothing", None, "sync", _syncs),
        Change("balanced stages, every IPU's whole step at the mean", "stage_placement",
               "imbalance", partial(_balanced, steps=steps or {})),
        # A pipeline's bubble shrinks with more micro-batches per run; elsewhere more
        # accumulation spreads the weight update, the all-reduce and streamed phases.
        _setting("four times the gradient accumulation", "gradient_accumulation",
                 run.gradient_accumulation * 4,
                 "pipeline_bubble" if run.execution is Execution.PIPELINED else "step_overhead",
                 _accumulation, keeps_batch=not run.training, samples_per_call=4),
        more_per_call,
        Change(f"the optimizer state {optimizer}", "optimizer_location", "optimizer_state",
               _optimizer_location),
        _setting("twice the replicas", "replicas", run.replicas * 2, "unused_ipus", _replicas,
                 keeps_batch=not run.training, samples_per_call=2),
        _setting("the SinglePipeline sync pattern", "sync_pattern", SyncPattern.SINGLE_PIPELINE,
                 "sync", _sync_pattern),
        Change("pipelined execution", "pipelined", "sync", _pipelined, covers=("execution",)),
        Change("parallel phased execution", "parallel_phased", "sync", _parallel_phased,
               covers=("execution",)),
        Change("inter-IPU copies that cost nothing", None, "ipu_links", _ipu_links,
               actionable=False),
        Change("compute twice as fast", None, "compute", _compute_twice_as_fast,
               actionable=False),
    )


# Trying them -----------------------------------------------------------------

def _simulate(setup: Setup, steps: int) -> Simulation:
    """``steps`` calls of ``setup`` simulated; only their throughput is read, so the
    event table is never built."""
    return Simulation(setup.work, setup.run, setup.system, setup.cost).advance(steps)


def what_ifs(timeline: Timeline, loader_items_per_s: float | None = None,
             steps: int = 1) -> WhatIfs:
    """Simulate ``steps`` calls of ``timeline``'s run once per change.

    The speed-up of a change is its throughput over the run's as recorded:
    the simulated throughput, or the data loader's rate where that is lower
    (the IPUs then wait for data, whatever else changes). A change the run
    cannot make, or that would not fit in memory where the run does, is left
    out with the reason.
    """
    plan = timeline.plan
    setup = Setup(plan.work, timeline.run, timeline.system, plan.cost)
    base = _simulate(setup, steps)
    fitted = _does_not_fit(setup) is None

    def delivered(simulated: Simulation, loader: bool = True) -> tuple[float, float]:
        rate = delivered_items_per_s(simulated.throughput(),
                                     loader_items_per_s if loader else None)
        return rate, simulated.plan.items_per_call / rate * 1e3

    recorded, recorded_ms = delivered(base)
    tried, left_out = [], []
    round_trip_over_bubble = timeline.host_round_trip_share() > timeline.bubble_fraction()
    for change in changes(timeline.run, round_trip_over_bubble, _ipu_steps(timeline)):
        if change.limit == "data_loader" and loader_items_per_s is None:
            left_out.append(LeftOut(change.change, "the data loader's rate was not measured"))
            continue
        made = change.apply(setup, plan)
        reason = made if isinstance(made, str) else (_does_not_fit(made) if fitted else None)
        if not reason:
            try:
                changed = base if made is setup else _simulate(made, steps)
            except ValueError as refused:  # the run's own checks: e.g. the phases' IPUs
                reason = f"refused: {refused}"
        if reason:
            left_out.append(LeftOut(change.change, reason))
            continue
        rate, step_ms = delivered(changed, loader=change.limit != "data_loader")
        tried.append(WhatIf(change.change, change.setting, change.value, change.limit,
                            change.actionable, change.keeps_batch, change.samples_per_call,
                            rate, step_ms, rate / recorded,
                            also=_changed_besides(change, setup.run, made.run)))
    tried.sort(key=lambda w: -w.speedup)
    return WhatIfs(tuple(tried), tuple(left_out), recorded, recorded_ms)


def _ipu_steps(timeline: Timeline) -> dict[int, IPUStep]:
    """Each IPU of the first replica's step as recorded, per call."""
    times = time_by_category_ps(timeline.events, timeline.num_ipus,
                                (COMPUTE_TIME, IPU_COPY_TIME)) / max(timeline.steps, 1)
    return {int(ipu): IPUStep(float(row[COMPUTE_TIME.name]), float(row[IPU_COPY_TIME.name]))
            for ipu, row in times.iterrows() if ipu < timeline.plan.ipus_per_replica}


# The RunConfig fields a change may alter that a setting of the same name makes, and
# the strategy setting of each execution a change may turn to.
_SETTING_FIELDS = ("device_iterations", "gradient_accumulation", "replicas", "sync_pattern")
_EXECUTION_SETTINGS = {Execution.PIPELINED: "pipelined",
                       Execution.PARALLEL_PHASED: "parallel_phased"}


def _changed_besides(change: Change, before: RunConfig,
                     after: RunConfig) -> tuple[tuple[str, object], ...]:
    """The settings ``change`` alters beyond its own (``change.covers``, else the field
    of its setting's name), as (setting, value): what a user must set besides to make
    it. An autoregressive run's device iterations are the steps of its loop run on
    the device."""
    covered = change.covers or (change.setting,)
    also = []
    for name in _SETTING_FIELDS:
        value = getattr(after, name)
        if name in covered or value == getattr(before, name):
            continue
        also.append(("on_device_loop" if name == "device_iterations" and before.autoregressive
                     else name, value))
    if "execution" not in covered and after.execution is not before.execution:
        also.append((_EXECUTION_SETTINGS[after.execution], None))
    if after.offload.optimizer != before.offload.optimizer and change.setting != \
            "optimizer_location":
        also.append(("optimizer_location", None))
    return tuple(also)


def _does_not_fit(setup: Setup) -> str | None:
    """Why ``setup`` does not fit in the IPUs' memory, or None if it does."""
    table = memory_per_ipu(setup.work, setup.run, setup.system)
    if fits(table):
        return None
    worst = table["total"].idxmax()
    return (f"does not fit: IPU {worst} would need {table.loc[worst, 'total'] / MB:,.0f} MB "
            f"of {table.loc[worst, 'capacity'] / MB:,.0f} MB")
