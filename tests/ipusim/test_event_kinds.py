"""The one table of event kinds: every view of a kind reads it, and the per-IPU figures and
the utilisation chart group the kinds the same way."""
import pandas as pd
import pytest

from ipusim.analysis import metrics
from ipusim.engine.event_kinds import COUNTED, EVENT_KINDS, IO_TILES_TIME, KINDS, LANES, kinds_of
from ipusim.engine.recorder import Recorder
from ipusim.report import lanes


def test_every_kind_has_one_row_a_lane_and_a_category_that_is_counted_or_overlapped():
    assert len(set(KINDS)) == len(EVENT_KINDS)
    for kind in EVENT_KINDS:
        assert kind.lane in LANES
        assert kind.category in COUNTED or kind.category is IO_TILES_TIME
        assert bool(kind.letter) == kind.compute  # only compute boxes carry a letter
    assert sum(len(kinds_of(category)) for category in COUNTED + (IO_TILES_TIME,)) == len(KINDS)


def test_the_views_in_the_reports_are_the_table():
    for kind in EVENT_KINDS:
        assert (lanes.LANE_OF[kind.name], lanes.CATEGORY_OF[kind.name], lanes.COLOURS[kind.name],
                lanes.NAMES[kind.name]) == (kind.lane, kind.category.name, kind.colour,
                                            kind.label)


@pytest.fixture
def events() -> pd.DataFrame:
    """One event of every kind on IPU 0, of duration 10 * (its position + 1) ps, and one on
    IPU 1 all along: the span, 1050 ps."""
    recorder = Recorder()
    for position, kind in enumerate(KINDS):
        start = 10 * position * (position + 1) // 2
        recorder.record(start, start + 10 * (position + 1), 0, kind, step=0)
    recorder.record(0, 1050, 1, "forward", step=0)
    return recorder.to_frame()


def test_per_ipu_and_the_utilisation_chart_group_the_kinds_alike(events):
    span = metrics.span_ps(events)
    assert span == 1050
    per_ipu = metrics.per_ipu(events, 2)
    shares = metrics.category_times(events, 2)
    for category in COUNTED:
        expected = sum(10 * (KINDS.index(kind) + 1) for kind in kinds_of(category))
        assert per_ipu.loc[0, category.column] * 1e6 == pytest.approx(expected)
        assert shares.loc[0, category.name] == pytest.approx(expected / span)
    # the copies on the I/O tiles overlap the compute tiles' time: in neither
    overlapped = 10 * (KINDS.index("io_tiles_copy") + 1)
    assert shares.loc[0].drop("idle").sum() * span == pytest.approx(
        sum(10 * (k + 1) for k in range(len(KINDS))) - overlapped)
    assert shares.loc[1, "compute"] == 1.0 and shares.loc[1, "idle"] == 0.0
    assert list(shares.columns) == list(lanes.CATEGORIES)
