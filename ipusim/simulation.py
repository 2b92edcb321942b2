"""The facade: a work description run on a system, call after call.

A :class:`Simulation` plans the run once, runs the engine step by step and
hands back a :class:`~ipusim.analysis.timeline.Timeline` of its events.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from functools import cached_property

from tqdm import tqdm

from ipusim.analysis import metrics
from ipusim.analysis.timeline import Timeline, job_timeline
from ipusim.cost.cost_model import DEFAULT, CostModel
from ipusim.cost.work import Work
from ipusim.engine.recorder import Recorder
from ipusim.engine.step_replay import StepReplay
from ipusim.engine.system import System
from ipusim.hardware import SystemSpec
from ipusim.plan.engine_plan import EnginePlan
from ipusim.plan.folding import fold_blocker, folding_enabled
from ipusim.plan.run_config import RunConfig
from ipusim.plan.schedule import build_host_write, build_step

__all__ = ["Simulation", "Timeline", "job_timeline", "simulate"]


class Simulation:
    """An engine (one compiled model) on a simulated system; each call is a step.

    A call that starts with the system idle is replayed from the last one that
    did (see :mod:`ipusim.engine.step_replay`); ``replay_steps=False`` simulates each.
    """

    def __init__(self, work: Work, run: RunConfig = RunConfig(),
                 system: SystemSpec = SystemSpec(), cost_model: CostModel = DEFAULT,
                 instance: int = 0, fold_replicas: bool | None = None,
                 replay_steps: bool = True):
        """``fold_replicas``: simulate one replica for all where that is exact (see
        :mod:`ipusim.plan.folding`); None: on unless ``IPUSIM_FOLD_REPLICAS=0``.
        ``replay_steps``: record a call that starts idle as the last such call,
        shifted in time (see :mod:`ipusim.engine.step_replay`); False simulates each."""
        self.work, self.run, self.spec, self.cost_model = work, run, system, cost_model
        self.plan = EnginePlan.build(work, run, system, cost_model)
        run.validate(work, system.num_ipus, scheduled=self.plan.work)  # merged once, above
        self.instance = instance
        self.folded = folding_enabled(fold_replicas) and fold_blocker(work, run, system) is None
        self.recorder = Recorder()
        simulated = replace(system, num_ipus=work.ipus_per_replica) if self.folded else system
        self.system = System(simulated, self.recorder)
        self._replay = StepReplay(self.system, enabled=replay_steps)
        self.steps = 0

    @property
    def simulated_ipus(self) -> int:
        """IPUs the SimPy model runs: one replica's when folded, else the engine's."""
        return self.plan.ipus_per_replica if self.folded else self.plan.num_ipus

    @property
    def now_ps(self) -> int:
        """The simulated clock: the end of the last call, or of the idling since."""
        return self.system.now_ps

    def step(self) -> int:
        """Simulate one call to the model; returns its simulated duration in ps."""
        start = self.system.now_ps
        step = self.steps
        self._replay.run(
            lambda: self.system.run(build_step(self.plan, self.spec, step, self.folded)), step)
        self.steps += 1
        self.__dict__.pop("timeline", None)
        return self.system.now_ps - start

    def write_from_host(self, nbytes_by_ipu: Sequence[int]) -> int:
        """Stream tensors from the host into the engine between calls (a copy of
        weights or named buffers to the device): ``nbytes_by_ipu[i]`` to logical IPU
        ``i`` of every replica, recorded as host-to-device copies of the next call.
        Returns the write's simulated duration in ps."""
        if len(nbytes_by_ipu) > self.plan.ipus_per_replica:
            raise ValueError(f"a write to {len(nbytes_by_ipu)} IPUs of a replica of "
                             f"{self.plan.ipus_per_replica}")
        start = self.system.now_ps
        self.system.run(build_host_write(self.plan, self.spec, self.steps, nbytes_by_ipu,
                                         self.folded))
        self.__dict__.pop("timeline", None)
        return self.system.now_ps - start

    def wait_until(self, time_ps: int) -> None:
        """Let the engine's IPUs idle until ``time_ps`` (e.g. for other instances)."""
        self.system.wait_until(time_ps, range(self.simulated_ipus), max(self.steps - 1, 0))
        self.__dict__.pop("timeline", None)

    def run_steps(self, steps: int, progress: bool = False) -> Timeline:
        """Simulate ``steps`` calls and return the timeline so far.

        ``progress=True`` shows a tqdm progress bar (on stderr) over the steps.
        """
        return self.advance(steps, progress).timeline

    def advance(self, steps: int, progress: bool = False) -> Simulation:
        """Simulate ``steps`` calls; this simulation, its event table not built (see
        :meth:`run_steps`)."""
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
            raise ValueError(f"steps must be a positive integer, got {steps!r}")
        for _ in tqdm(range(steps), desc="simulating", unit="step", disable=not progress):
            self.step()
        return self

    def throughput(self) -> float:
        """Items per simulated second over the calls so far: what ``timeline.throughput()``
        gives, without building (or, folded, expanding to every replica) the event table,
        for callers that need only this figure (the what-if analysis simulates ten runs)."""
        return metrics.rate(self.steps * self.plan.items_per_call, self.recorder.span_ps())

    @cached_property
    def timeline(self) -> Timeline:
        """The events so far, as a :class:`Timeline`."""
        copies = self.run.replicas if self.folded else 1
        events = self.recorder.to_frame(self.plan.ipus_per_replica, self.instance, copies)
        return Timeline(events, self.work, self.run, self.spec, self.steps, self.instance,
                        self.plan)


def simulate(work: Work, run: RunConfig = RunConfig(), system: SystemSpec = SystemSpec(),
             cost_model: CostModel = DEFAULT, steps: int = 1,
             fold_replicas: bool | None = None) -> Timeline:
    """Simulate ``steps`` calls of ``work`` run as ``run`` on ``system`` (``fold_replicas``:
    see :class:`Simulation`)."""
    return Simulation(work, run, system, cost_model,
                      fold_replicas=fold_replicas).run_steps(steps)
