"""The diagnosis of a run: what limits it, proven by simulating the run without it.

The limit is the change of :mod:`ipusim.explore.what_if` a user can make that
speeds the run up most, when it speeds it up by at least
:data:`SIGNIFICANT_SPEEDUP`; otherwise the physical limit that no setting
lifts (the compute, or the IPU-Links), the largest of those what-ifs. The
figures behind it (:class:`~ipusim.analysis.bottleneck.Bottleneck`) come with
it, for the words and the reports.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ipusim.analysis.bottleneck import Bottleneck
from ipusim.analysis.timeline import Timeline
from ipusim.explore.what_if import WhatIf, WhatIfs, what_ifs

# A change that gains less than this is within what a model of the machine can tell apart.
SIGNIFICANT_SPEEDUP = 1.05


@dataclass(frozen=True)
class Diagnosis:
    """What limits the run (``figures.kind``), the change that proves it, and every
    change tried."""

    figures: Bottleneck
    what_ifs: WhatIfs

    @property
    def kind(self) -> str:
        return self.figures.kind

    @property
    def proof(self) -> WhatIf | None:
        """The what-if of the limit: the run simulated without it (None when nothing
        was tried)."""
        return next((w for w in self.what_ifs.tried if w.limit == self.kind), None)


def limit(found: WhatIfs) -> str:
    """The limit :func:`diagnose` names for the changes ``found``.

    The changes a user can make to how the model runs come first. Twice the
    replicas on IPUs the run leaves idle names the limit only when none of them
    gains :data:`SIGNIFICANT_SPEEDUP`: it says how the system is used, not what
    limits the model. Four times the gradient accumulation also runs four times
    the samples per call, as four times the device iterations does while keeping
    the batch: where the change of the batch gains no more than
    :data:`SIGNIFICANT_SPEEDUP` beyond what the one that keeps it gains, the host
    round trip both spread is the limit, not the pipeline's bubble or the step's
    own fixed costs.
    """
    own = [w for w in found.tried if w.actionable and w.limit != "unused_ipus"]
    best = own[0] if own else None
    if best is not None and not best.keeps_batch and best.samples_per_call > 1:
        # The change that runs as many more samples a call and keeps the batch.
        calls = next((w for w in own if w.keeps_batch
                      and w.samples_per_call == best.samples_per_call), None)
        if calls is not None and calls.speedup >= SIGNIFICANT_SPEEDUP and \
                best.speedup < calls.speedup * SIGNIFICANT_SPEEDUP:
            best = calls
    if best is not None and best.speedup >= SIGNIFICANT_SPEEDUP:
        return best.limit
    spare = found.best(actionable=True)
    if spare is not None and spare.speedup >= SIGNIFICANT_SPEEDUP:
        return spare.limit
    physical = [w for w in found.tried if not w.actionable]
    return max(physical, key=lambda w: w.speedup).limit if physical else "compute"


def diagnose(timeline: Timeline, loader_items_per_s: float | None = None) -> Diagnosis:
    """Simulate ``timeline``'s calls once per change and name what limits them."""
    figures = timeline.bottleneck(loader_items_per_s)  # checks the loader's rate first
    found = what_ifs(timeline, loader_items_per_s)
    return Diagnosis(replace(figures, kind=limit(found)), found)
