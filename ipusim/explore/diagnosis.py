"""The diagnosis of a run: what limits it, proven by simulating the run without it.

The limit is the change of :mod:`ipusim.explore.what_if` a user can make that
speeds the run up most, when it speeds it up by at least
:data:`SIGNIFICANT_SPEEDUP`; otherwise the physical limit that no setting
lifts (the compute, or the IPU-Links), the largest of those what-ifs where it
gains as much. Where no change gains it, the run is balanced at its limit, and
the limit named is what bounds it: the data loader where the IPUs wait for it,
else the largest share of the IPUs' time the events show (the host's round
trip, host I/O, syncs or compute), never a cause with no events behind it. The
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
    # No change tried gains SIGNIFICANT_SPEEDUP: the run is balanced at its limit.
    balanced: bool = False

    @property
    def kind(self) -> str:
        return self.figures.kind

    @property
    def proof(self) -> WhatIf | None:
        """The what-if of the limit: the run simulated without it (None when nothing
        was tried)."""
        return next((w for w in self.what_ifs.tried if w.limit == self.kind), None)


def limit(found: WhatIfs, figures: Bottleneck) -> tuple[str, bool]:
    """The limit :func:`diagnose` names for the changes ``found`` and the run's
    ``figures``, and whether the run is balanced at it (no change gains
    :data:`SIGNIFICANT_SPEEDUP`).

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
        return best.limit, False
    spare = found.best(actionable=True)
    if spare is not None and spare.speedup >= SIGNIFICANT_SPEEDUP:
        return spare.limit, False
    physical = [w for w in found.tried if not w.actionable]
    if physical:
        fastest = max(physical, key=lambda w: w.speedup)
        if fastest.speedup >= SIGNIFICANT_SPEEDUP:
            return fastest.limit, False
    return bound(figures), True


def bound(figures: Bottleneck) -> str:
    """What bounds a run that no change speeds up: the data loader where it is no
    faster than the IPUs, else the largest share of the IPUs' time (the host's round
    trip between calls, host I/O, waits in syncs, compute)."""
    loader = figures.loader_items_per_s
    if loader is not None and loader <= figures.device_items_per_s:
        return "data_loader"
    shares = {"host_round_trip": figures.host_call_share, "host_link": figures.host_io_share,
              "sync": figures.sync_wait_share, "compute": figures.utilisation}
    return max(shares, key=shares.get)


def diagnose(timeline: Timeline, loader_items_per_s: float | None = None) -> Diagnosis:
    """Simulate ``timeline``'s calls once per change and name what limits them."""
    figures = timeline.bottleneck(loader_items_per_s)  # checks the loader's rate first
    found = what_ifs(timeline, loader_items_per_s)
    kind, balanced = limit(found, figures)
    return Diagnosis(replace(figures, kind=kind), found, balanced)
