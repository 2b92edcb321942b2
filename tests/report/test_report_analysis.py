"""Every figure has one home: the timeline computes it, the reports only show it."""
import json
import re
import types

import pytest

import ipusim.report
from ipusim.analysis import headline
from ipusim.report import bottleneck, write_autoreport
from ipusim.report.summary import text_summary


def test_no_name_in_the_report_package_shadows_one_of_its_modules():
    assert isinstance(ipusim.report.figures, types.ModuleType)
    assert ipusim.report.figures.__name__ == "ipusim.report.figures"


def test_the_summary_the_verdict_and_the_reports_read_the_one_dict_of_figures(
        replicated_timeline, tmp_path):
    figures = replicated_timeline.figures()
    assert replicated_timeline.summary() == {name: figures[name]
                                             for name in headline.SUMMARY_FIGURES}
    verdict = bottleneck(replicated_timeline)
    assert (verdict.device_items_per_s, verdict.utilisation, verdict.host_io_share,
            verdict.host_link_occupancy, verdict.host_call_share, verdict.sync_wait_share,
            verdict.bubble_fraction) == (
        figures["throughput(items/s)"], figures["utilisation"], figures["host_io_share"],
        figures["host_link_occupancy"], figures["host_round_trip_share"],
        figures["sync_wait_share"], figures["bubble_fraction"])
    assert figures["host_round_trip_share"] > 0  # the replicated run waits for the host
    assert figures["host_round_trip_share"] == \
        replicated_timeline.category_times()["host call"].mean()
    shown = f"{figures['host_round_trip_share']:.1%}"
    assert re.search(rf"Host round trip share: +{re.escape(shown)}\n",
                     text_summary(replicated_timeline))
    write_autoreport(tmp_path, replicated_timeline, outputs={"profile.json"})
    profile = json.loads(next(tmp_path.rglob("profile.json")).read_text())
    assert profile["figures"] == {name: pytest.approx(float(figures[name]))
                                  for name in headline.REPORTED_FIGURES}


def test_the_timeline_reaches_every_analysis(pipeline_timeline):
    steps = pipeline_timeline.step_cycles()
    assert steps["cycles"].sum() == pytest.approx(
        pipeline_timeline.to_cycles(pipeline_timeline.duration_ps), abs=len(steps))
    stages = pipeline_timeline.memory_per_stage()
    assert list(stages["ipu"]) == [0, 1, 2, 3]
    shares = pipeline_timeline.category_times()
    assert shares.sum(axis=1).round(9).eq(1.0).all()
    assert set(pipeline_timeline.stage_times_us()) == {0, 1, 2, 3}
