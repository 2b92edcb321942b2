"""Replaying a call: from an idle system, every call of an engine unfolds the same way.

Each call of a compiled model runs the same per-IPU programs (only the step
index in them differs), and the simulation is deterministic with integer
times. A call that starts with the system idle (no SimPy event pending,
every host link free) therefore records exactly the events of the last call
that started idle, shifted in time, and leaves the host links the same way.
:class:`StepReplay` keeps that call as a :class:`StepTemplate` and appends
the shifted copy instead of building the programs and simulating them again
(the recorder writes the copy out only when its rows are read): what makes a
shim call cheap. Anything else (the first call, a call after an
instance's clock alignment left an event pending) is simulated.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ipusim.engine.recorder import FIELD
from ipusim.engine.system import System

_STEP = FIELD["step"]  # the step's place among a row's int32 fields


@dataclass(frozen=True)
class StepTemplate:
    """One call as simulated from an idle system, its times relative to the call's start."""

    # Each IPU's rows of the call as the recorder packs them: (start, end) int64
    # relative to the call's start, and (label, micro_batch, step, cycle) int32.
    rows: dict[int, tuple[np.ndarray, np.ndarray]]
    duration_ps: int
    # Where the call left each host link's (to-device, to-host) free time, relative
    # to the call's start; None for a direction the call did not use.
    links: tuple[tuple[int | None, int | None], ...]

    @classmethod
    def capture(cls, system: System, mark: tuple[int, ...], start_ps: int,
                step: int) -> StepTemplate | None:
        """The call that started at ``start_ps`` and recorded rows after ``mark``;
        None if a row is not the call's own (its step index is another)."""
        rows = system.recorder.since(mark)
        if any((fields[:, _STEP] != step).any() for _, fields in rows.values()):
            return None

        def relative(free_at: int) -> int | None:
            return free_at - start_ps if free_at > start_ps else None

        return cls(
            rows={ipu: (times - start_ps, fields) for ipu, (times, fields) in rows.items()},
            duration_ps=system.now_ps - start_ps,
            links=tuple((relative(link.h2d_free_at), relative(link.d2h_free_at))
                        for link in system.host_links))

    def replay(self, system: System, step: int) -> None:
        """Record this call again as call ``step`` from now, and move the clock past it."""
        start = system.now_ps
        for ipu, (times, fields) in self.rows.items():
            system.recorder.columns(ipu).append_shifted(times, fields, start, step)
        if self.duration_ps:  # the system is idle: nothing to run on the way
            system.env.idle_until(start + self.duration_ps)
        for link, (h2d, d2h) in zip(system.host_links, self.links):
            if h2d is not None:
                link.h2d_free_at = start + h2d
            if d2h is not None:
                link.d2h_free_at = start + d2h


class StepReplay:
    """Runs the calls of one engine on ``system``, replaying those that start idle.

    ``enabled=False`` simulates every call (the reference that replay must
    match exactly).
    """

    def __init__(self, system: System, enabled: bool = True):
        self.system = system
        self.enabled = enabled
        self.template: StepTemplate | None = None

    def run(self, simulate: Callable[[], object], step: int) -> None:
        """Run call ``step``: replay the template if the system is idle, else
        ``simulate()`` it (and keep it as the template if it started idle)."""
        idle = self._settle()
        if idle and self.enabled and self.template is not None:
            self.template.replay(self.system, step)
            return
        keep = idle and self.enabled
        mark, start = (self.system.recorder.mark() if keep else ()), self.system.now_ps
        simulate()
        if keep and self._settle():
            self.template = StepTemplate.capture(self.system, mark, start, step)

    def _settle(self) -> bool:
        """Process the events due now, then whether nothing is pending and
        every host link is free: the system is idle.

        Events due now run before anything the next call schedules (SimPy
        orders them by time, then priority, then creation, and the next call
        only adds normal-priority events), so processing them here changes
        nothing. What is left from a finished call is the event its run
        stopped at, rescheduled by SimPy with nothing left to do.
        """
        env = self.system.env
        while env.peek() == env.now:
            env.step()
        if env.peek() != math.inf:
            return False
        now = env.now
        for link in self.system.host_links:
            if link.h2d_free_at > now or link.d2h_free_at > now:
                return False
        return True
