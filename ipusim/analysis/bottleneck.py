"""What limits a run: each overhead's score against its limit, and the largest one over.

Every score is a headline figure (:func:`ipusim.analysis.headline.headline_figures`), a
share of the simulated span: the busiest host link's occupancy (or the IPUs'
share of time in stream copies), the IPUs' wait for the host's round trip
between calls, the pipeline bubble and the time IPUs wait in syncs beyond the
bubble (IPUs idle through a pipeline's bubble at its exchange syncs). The
largest score at or above its limit is the bottleneck; a data loader slower
than the simulated device beats them all (the data-loading tutorial: compare the loader's
throughput with the model's), and with no score over its limit the run is
compute-bound. Reached through :meth:`ipusim.Timeline.bottleneck`; the report's
verdict (:mod:`ipusim.report.verdict`) words it and adds the tutorial's advice.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from ipusim.analysis.timeline_view import TimelineView

BOTTLENECKS = ("data_loader", "host_link", "host_round_trip", "sync", "compute",
               "pipeline_bubble")
# What the diagnosis (ipusim.explore.diagnosis) can name besides: the limits a
# what-if proves that no threshold here scores.
DIAGNOSED = BOTTLENECKS + ("imbalance", "step_overhead", "optimizer_state", "unused_ipus",
                           "ipu_links")
HOST_LINK_THRESHOLD = 0.25   # busiest host link occupied (or IPUs copying) a quarter of the time
ROUND_TRIP_THRESHOLD = 0.25  # IPUs waiting for the host between calls a quarter of the time
BUBBLE_THRESHOLD = 0.2       # a fifth of the pipeline's (stage, cycle) slots idle
SYNC_THRESHOLD = 0.25        # IPUs waiting in syncs a quarter of the time
BALANCED_RATIO = 1.1         # slowest / fastest stage time below which stages count as balanced


class Score(NamedTuple):
    """An overhead's score (a share of the span) and the limit from which it limits the run."""

    score: float
    limit: float

    @property
    def over(self) -> bool:
        return self.score >= self.limit


@dataclass(frozen=True)
class Bottleneck:
    """What limits the run (one of :data:`BOTTLENECKS`) and the figures that decided it."""

    kind: str
    device_items_per_s: float
    loader_items_per_s: float | None
    utilisation: float
    host_io_share: float
    host_link_occupancy: float
    host_call_share: float
    sync_wait_share: float
    bubble_fraction: float

    @property
    def scores(self) -> dict[str, Score]:
        """Each overhead's score and limit (the data loader and compute have none)."""
        return {
            "host_link": Score(max(self.host_link_occupancy, self.host_io_share),
                               HOST_LINK_THRESHOLD),
            "host_round_trip": Score(self.host_call_share, ROUND_TRIP_THRESHOLD),
            "pipeline_bubble": Score(self.bubble_fraction, BUBBLE_THRESHOLD),
            # In a pipeline the IPUs idle through the bubble at the exchange syncs:
            # only the waits the bubble does not explain point at the sync pattern.
            "sync": Score(self.sync_wait_share - self.bubble_fraction, SYNC_THRESHOLD),
        }


def find_bottleneck(timeline: TimelineView, loader_items_per_s: float | None = None) -> Bottleneck:
    """What limits ``timeline``; ``loader_items_per_s`` is the data loader's own throughput."""
    if loader_items_per_s is not None and not loader_items_per_s > 0:
        raise ValueError(f"loader_items_per_s must be a positive number of items per second, "
                         f"got {loader_items_per_s!r}; leave it None when unknown")
    figures = timeline.figures()
    found = Bottleneck(
        kind="compute",
        device_items_per_s=figures["throughput(items/s)"], loader_items_per_s=loader_items_per_s,
        utilisation=figures["utilisation"], host_io_share=figures["host_io_share"],
        host_link_occupancy=figures["host_link_occupancy"],
        host_call_share=figures["host_round_trip_share"],
        sync_wait_share=figures["sync_wait_share"], bubble_fraction=figures["bubble_fraction"])
    if loader_items_per_s is not None and loader_items_per_s < found.device_items_per_s:
        return replace(found, kind="data_loader")
    over = {name: score.score for name, score in found.scores.items() if score.over}
    return replace(found, kind=max(over, key=over.get)) if over else found


class StageBalance(NamedTuple):
    """The slowest and the fastest stage by compute time per micro-batch."""

    slowest: int
    fastest: int
    slowest_us: float
    ratio: float  # slowest / fastest

    @property
    def balanced(self) -> bool:
        """Within :data:`BALANCED_RATIO`: moving layers between stages would not help."""
        return self.ratio < BALANCED_RATIO


def stage_balance(timeline: TimelineView) -> StageBalance | None:
    """How far apart the stages' compute times per micro-batch are (None for one stage)."""
    times = timeline.stage_times_us()
    if len(times) < 2:
        return None
    slowest, fastest = max(times, key=times.get), min(times, key=times.get)
    return StageBalance(slowest, fastest, times[slowest],
                        times[slowest] / max(times[fastest], 1e-9))
