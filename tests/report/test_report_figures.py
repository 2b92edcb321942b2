"""The plotly figures: boxes per kind, ramp bands on cycle boundaries, latency, windows."""
import dataclasses
from functools import partial

import numpy as np
import plotly.graph_objects as go
import pytest

from ipusim import Cost, Execution, RunConfig, Stage, Work, simulate, system_spec
from ipusim.cost.cost_model import CALIBRATED_MK2
from ipusim.engine.recorder import COMPUTE_KINDS, KINDS
from ipusim.plan.memory import memory_per_ipu
from ipusim.report import lanes
from ipusim.report.figures import (
    MIN_LABELLED_SHARE,
    RUN_MARGIN,
    initial_view,
    memory_axis_top,
    memory_figure,
    plotted_window,
    timeline_figure,
    utilisation_figure,
)

from report_timelines import US, pipeline_run, stages

# The hand-written runs here are built to show one bottleneck; a short host round
# trip per call (instead of the calibrated one) keeps it from masking that one.
QUICK_CALLS = dataclasses.replace(CALIBRATED_MK2, engine_run_ps=250 * 10**6)  # a 0.3 ms host call
simulate = partial(simulate, cost_model=QUICK_CALLS)


PS_PER_US = 1e6


def bars_by_name(fig):
    """Each kind's boxes as one trace: its traces (one for each hover template) put together."""
    merged = {}
    for trace in fig.data:
        if trace.type != "bar":
            continue
        if trace.name not in merged:
            merged[trace.name] = go.Bar(trace)
            continue
        bar = merged[trace.name]
        for field in ("x", "y", "base", "text", "customdata"):
            if getattr(trace, field) is not None:
                setattr(bar, field, np.concatenate([getattr(bar, field), getattr(trace, field)]))
    return merged


def test_one_box_per_event_and_one_legend_entry_per_kind(pipeline_timeline):
    events = pipeline_timeline.events
    bars = bars_by_name(timeline_figure(pipeline_timeline))
    for kind, count in events["kind"].astype(str).value_counts().items():
        if count:
            assert len(bars[lanes.NAMES[kind]].x) == count, kind
    forward = bars["forward"]
    assert len(forward.x) == 4 * 8  # 4 stages x 8 micro-batches
    assert sorted(set(forward.text)) == [f"F{m}" for m in range(8)]
    assert set(bars["weight update"].text) == {"U"}
    fig = timeline_figure(pipeline_timeline)
    legend = [t.name for t in fig.data if t.type == "bar" and t.showlegend is not False]
    assert sorted(legend) == sorted(set(legend)) == sorted(bars)


def test_boxes_sit_at_their_events_times(pipeline_timeline):
    events = pipeline_timeline.events
    backward = events[events["kind"] == "backward"]
    trace = bars_by_name(timeline_figure(pipeline_timeline))["backward"]
    order = np.argsort(np.asarray(trace.base, dtype=float), kind="stable")
    backward = backward.sort_values("start_ps", kind="stable")
    np.testing.assert_allclose(np.asarray(trace.base, dtype=float)[order],
                               backward["start_ps"] / PS_PER_US, atol=1e-3)
    np.testing.assert_allclose(np.asarray(trace.x)[order],
                               (backward["end_ps"] - backward["start_ps"]) / PS_PER_US, rtol=1e-6)
    assert trace.orientation == "h"


def test_rows_are_ipus_with_their_lanes(pipeline_timeline):
    fig = timeline_figure(pipeline_timeline)
    names = list(fig.layout.yaxis.ticktext)
    assert [name for name in names if name.startswith("<b>")] == [
        f"<b>IPU {ipu}</b>" for ipu in range(4)]
    forward = bars_by_name(fig)["forward"]
    ipus = np.asarray(forward.customdata)[:, 0].astype(int)
    # every forward box sits on its IPU's compute row
    assert all(names[row] == f"<b>IPU {ipu}</b>" for row, ipu in zip(forward.y, ipus))


def test_ramp_bands_sit_on_the_cycle_boundaries_of_a_4_stage_pipeline_with_g8():
    timeline = pipeline_run(micro_batches=8, synthetic_data=True)
    phases = timeline.pipeline_phases()
    # P = 2 x 4 - 1 = 7 pipeline stages, 8 + 7 - 1 = 14 cycles
    assert list(zip(phases["phase"], phases["first_pipeline_cycle"],
                    phases["last_pipeline_cycle"])) == [
        ("ramp-up", 0, 5), ("main", 6, 7), ("ramp-down", 8, 13)]
    events = timeline.events
    compute = events[events["kind"].isin(("forward", "backward"))]
    first = compute.groupby("pipeline_cycle")["start_ps"].min()
    assert list(phases["start_ps"]) == [first[0], first[6], first[8]]
    assert list(phases["end_ps"][:2]) == [first[6], first[8]]
    assert phases["end_ps"].iloc[2] == compute.loc[compute["pipeline_cycle"] == 13, "end_ps"].max()
    # the main phase starts with micro-batch 6 entering stage 0
    entering = compute[(compute["kind"] == "forward") & (compute["stage"] == 0)
                       & (compute["micro_batch"] == 6)]
    assert entering["start_ps"].iloc[0] == phases["start_ps"].iloc[1]

    fig = timeline_figure(timeline)
    rects = [s for s in fig.layout.shapes if s.type == "rect"]
    np.testing.assert_allclose([(r.x0, r.x1) for r in rects],
                               np.c_[phases["start_ps"], phases["end_ps"]] / PS_PER_US)
    labels = [a.text for a in fig.layout.annotations if a.text and "cycles" in a.text]
    # The main phase, two cycles of fourteen, is too narrow for its label: it is shaded only.
    assert labels == ["ramp-up<br>pipeline cycles 0-5", "ramp-down<br>pipeline cycles 8-13"]


@pytest.mark.parametrize("micro_batches, steps", [(8, 1), (10, 2), (16, 2), (64, 1)])
def test_phase_labels_never_print_over_each_other(micro_batches, steps):
    timeline = pipeline_run(micro_batches=micro_batches, steps=steps)
    fig = timeline_figure(timeline)
    view = fig.layout.xaxis.range or (timeline.events["start_ps"].min() / PS_PER_US,
                                      timeline.events["end_ps"].max() / PS_PER_US)
    centres = sorted(a.x for a in fig.layout.annotations if a.text and "cycles" in a.text)
    assert centres
    # Each label is centred on a phase at least a sixth of the view wide, so two labels'
    # centres are a sixth of the view apart: wider than a label on a plot of 700 px.
    gaps = np.diff(centres)
    assert (gaps >= MIN_LABELLED_SHARE * (view[1] - view[0]) - 1e-9).all()


def test_every_pass_lies_in_the_band_of_its_cycle():
    timeline = pipeline_run(micro_batches=10, steps=2)
    phases = timeline.pipeline_phases()
    assert len(phases) == 2 * 3
    events = timeline.events
    compute = events[events["kind"].isin(("forward", "backward"))]
    for row in phases.itertuples():
        mine = compute[(compute["step"] == row.step)
                       & compute["pipeline_cycle"].between(row.first_pipeline_cycle,
                                                           row.last_pipeline_cycle)]
        assert (mine["start_ps"] >= row.start_ps).all() and (mine["end_ps"] <= row.end_ps).all()


def test_inference_pipeline_has_p_equal_to_the_stage_count():
    work = Work(stages(3), micro_batch_size=2, input_bytes_per_sample=64)
    run = RunConfig(training=False, device_iterations=5, execution=Execution.PIPELINED)
    phases = simulate(work, run, system_spec("mk2", 3)).pipeline_phases()
    assert list(zip(phases["phase"], phases["first_pipeline_cycle"],
                    phases["last_pipeline_cycle"])) == [
        ("ramp-up", 0, 1), ("main", 2, 4), ("ramp-down", 5, 6)]


def test_sharded_runs_have_no_bands(replicated_timeline):
    assert replicated_timeline.pipeline_phases().empty
    fig = timeline_figure(replicated_timeline)
    assert not [s for s in fig.layout.shapes if s.type == "rect"]


def test_latency_of_one_micro_batch_is_marked(pipeline_timeline):
    path = pipeline_timeline.latency_path()
    assert (path.replica, path.step, path.micro_batch) == (0, 0, 6)  # P - 1
    events = pipeline_timeline.events
    mine = events[events["micro_batch"] == 6]
    assert (path.start_ps, path.end_ps) == (mine["start_ps"].min(), mine["end_ps"].max())
    fig = timeline_figure(pipeline_timeline)
    arrow = next(a for a in fig.layout.annotations if a.showarrow)
    assert arrow.ax == pytest.approx(path.start_ps / PS_PER_US)
    assert arrow.x == pytest.approx(path.end_ps / PS_PER_US)
    assert any(a.text == f"latency of micro-batch 6: {path.latency_ps / PS_PER_US:,.1f} µs"
               for a in fig.layout.annotations)
    outline = bars_by_name(fig)["micro-batch 6 (latency path)"]
    assert len(outline.x) == 8  # its forward and backward on each of the 4 stages


def test_long_runs_are_drawn_as_whole_steps_within_the_lane_limit():
    timeline = pipeline_run(micro_batches=8, steps=6)
    events = timeline.events
    lane = events["kind"].astype(str).map(lanes.LANE_OF)
    per_step_lane = events[events["step"] == 0].groupby([events["ipu"], lane]).size().max()
    window = plotted_window(timeline, max_events_per_lane=int(2.5 * per_step_lane))
    assert set(window.events["step"]) == {0, 1}
    assert "the first 2 of 6 steps" in window.note
    fig = timeline_figure(timeline, max_events_per_lane=int(2.5 * per_step_lane))
    assert "the first 2 of 6 steps" in fig.layout.title.text
    assert sum(len(t.x) for t in fig.data if t.type == "bar" and "latency" not in t.name) == len(
        window.events)


def test_a_step_too_long_for_the_limit_is_cut_in_time():
    timeline = pipeline_run(micro_batches=8)
    window = plotted_window(timeline, max_events_per_lane=10)
    lane = window.events["kind"].astype(str).map(lanes.LANE_OF)
    assert window.events.groupby([window.events["ipu"], lane]).size().max() <= 10
    assert "µs of step 0" in window.note


def test_a_pipeline_opens_on_its_first_run():
    small = pipeline_run(micro_batches=8)  # one run: it is all in view already
    assert initial_view(small, small.events) is None
    assert timeline_figure(small).layout.xaxis.range is None
    big = pipeline_run(micro_batches=16, steps=2, device_iterations=4)
    x0, x1, note = initial_view(big, big.events)
    assert note == "the first pipeline run"
    compute = big.events[big.events["kind"].isin(COMPUTE_KINDS)]
    first_run = (compute["step"] == 0) & compute["micro_batch"].between(0, 15)
    # every box of the first run in view, from shortly before its first; no box of another
    begin = big.pipeline_phases()["start_ps"].min() / PS_PER_US  # its first pipeline cycle
    assert begin <= compute.loc[first_run, "start_ps"].min() / PS_PER_US
    assert x0 == pytest.approx(max(big.events["start_ps"].min() / PS_PER_US,
                                   begin - RUN_MARGIN * (x1 - begin)))
    assert (compute.loc[first_run, "end_ps"] <= x1 * PS_PER_US).all()
    assert (compute.loc[~first_run & (compute["micro_batch"] >= 0), "start_ps"]
            >= x1 * PS_PER_US).all()
    assert tuple(timeline_figure(big).layout.xaxis.range) == pytest.approx((x0, x1))
    assert "opens on the first pipeline run" in timeline_figure(big).layout.title.text


def test_a_long_step_off_the_pipeline_opens_on_boxes_wide_enough_to_label():
    work = Work(stages(1), micro_batch_size=4, input_bytes_per_sample=64)
    timeline = simulate(work, RunConfig(device_iterations=50), system_spec("mk2", 1))
    x0, x1, note = initial_view(timeline, timeline.events)
    compute = timeline.events[timeline.events["kind"].isin(COMPUTE_KINDS)]
    in_view = compute[compute["start_ps"] < x1 * PS_PER_US]
    assert 0 < len(in_view) <= 32 and note == f"{x1 - x0:,.0f} µs from the first box"
    lengths = (compute["end_ps"] - compute["start_ps"]) / PS_PER_US
    assert lengths.median() >= (x1 - x0) / 40  # a median box is a fortieth of the view
    short = simulate(work, RunConfig(device_iterations=5), system_spec("mk2", 1), steps=8)
    x0, x1, note = initial_view(short, short.events)
    step_ends = short.events.groupby("step")["end_ps"].max() / PS_PER_US
    assert x1 in set(step_ends) and note == f"the first {(step_ends <= x1).sum()} step(s)"


def test_short_boxes_after_a_long_round_trip_open_where_they_start():
    work = Work(stages(2, forward_us=1, backward_us=1), micro_batch_size=4)
    timeline = simulate(work, RunConfig(device_iterations=100, synthetic_data=True),
                        system_spec("mk2", 2))
    x0, x1, note = initial_view(timeline, timeline.events)
    compute = timeline.events[timeline.events["kind"].isin(COMPUTE_KINDS)]
    in_view = compute[compute["start_ps"].between(x0 * PS_PER_US, x1 * PS_PER_US,
                                                  inclusive="left")]
    assert in_view.groupby("ipu").size().max() <= 32
    # the view starts two median boxes before the first box, after the call's host round trip
    median = ((compute["end_ps"] - compute["start_ps"]).median()) / PS_PER_US
    assert x0 == pytest.approx(compute["start_ps"].min() / PS_PER_US - 2 * median)
    assert x1 - x0 <= 40 * median and note == f"{x1 - x0:,.0f} µs from the first box"


def test_sync_waits_are_thin_and_faint_beside_the_boxes(pipeline_timeline):
    bars = bars_by_name(timeline_figure(pipeline_timeline))
    sync, forward = bars["sync wait"], bars["forward"]
    assert sync.width < forward.width / 2 and sync.opacity <= 0.5 and forward.opacity == 1
    assert sync.marker.line.width == 0


def test_the_latency_label_stays_in_the_opening_view():
    for timeline in (pipeline_run(micro_batches=8),
                     pipeline_run(micro_batches=16, steps=2, device_iterations=4)):
        fig = timeline_figure(timeline)
        x0, x1 = fig.layout.xaxis.range or (timeline.events["start_ps"].min() / PS_PER_US,
                                            timeline.events["end_ps"].max() / PS_PER_US)
        label = next(a for a in fig.layout.annotations if a.text.startswith("latency of"))
        assert x0 <= label.x <= x1
        # it reads away from the nearer edge of the view
        assert label.xanchor == ("left" if label.x - x0 <= x1 - label.x else "right")


def test_utilisation_stacks_to_the_whole_span(replicated_timeline):
    fig = utilisation_figure(replicated_timeline)
    total = np.sum([trace.y for trace in fig.data], axis=0)
    np.testing.assert_allclose(total, 100.0)
    compute = next(t for t in fig.data if t.name == "compute").y
    np.testing.assert_allclose(compute / 100, replicated_timeline.utilisation(), rtol=1e-9)


def test_memory_bars_match_the_memory_model_on_an_axis_scaled_to_them(pipeline_timeline):
    fig = memory_figure(pipeline_timeline)
    table = memory_per_ipu(pipeline_timeline.work, pipeline_timeline.run, pipeline_timeline.system)
    stacked = np.sum([trace.y for trace in fig.data if trace.type == "bar"], axis=0)
    np.testing.assert_allclose(stacked, table["total"] / 1e6)
    shares = next(trace for trace in fig.data if trace.type == "scatter")
    assert list(shares.text) == [f"{s:.0%}" for s in table["total"] / table["capacity"]]
    assert set(shares.textfont.color) == {"#444"}  # none over its SRAM
    most, capacity = stacked.max(), pipeline_timeline.system.ipu.sram_bytes / 1e6
    assert most < capacity / 10
    top = fig.layout.yaxis.range[1]
    assert most < top <= 1.25 * most  # the fullest bar fills most of the axis
    assert not fig.layout.shapes  # the capacity line is off the scale, and said so
    assert f"of its {capacity:,.0f} MB SRAM (the capacity is off this scale)" in \
        fig.layout.title.text


def test_memory_near_the_capacity_shows_the_capacity_line():
    assert memory_axis_top(600.0, 900.0) == (pytest.approx(972.0),
                                             "Memory per IPU (each replica holds the same)")
    assert memory_axis_top(950.0, 900.0)[0] == pytest.approx(1026.0)  # out of memory: all shown
    heavy = Work(tuple(Stage(f"s{k}", k, Cost(time_ps=US), weight_bytes=600 << 20)
                       for k in range(2)), micro_batch_size=1)
    timeline = simulate(heavy, RunConfig(synthetic_data=True), system_spec("mk2", 2))
    fig = memory_figure(timeline)
    line = fig.layout.shapes[0]
    assert line.y0 == pytest.approx(timeline.system.ipu.sram_bytes / 1e6)
    assert fig.layout.yaxis.range[1] > line.y0


def test_a_window_cut_inside_a_run_opens_on_its_first_boxes():
    timeline = pipeline_run(micro_batches=64)
    window = plotted_window(timeline, max_events_per_lane=60)
    assert "µs of step 0" in window.note
    x0, x1, note = initial_view(timeline, window.events, max_boxes_per_row=12)
    assert note == f"{x1 - x0:,.0f} µs from the first box"
    compute = window.events[window.events["kind"].isin(COMPUTE_KINDS)]
    in_view = compute[compute["start_ps"] < x1 * PS_PER_US].groupby("ipu").size()
    assert in_view.max() == 12


def test_every_kind_of_event_has_a_lane_a_category_a_colour_and_a_name():
    for table in (lanes.LANE_OF, lanes.CATEGORY_OF, lanes.COLOURS, lanes.NAMES):
        assert set(table) == set(KINDS)
    assert set(lanes.LANE_OF.values()) == set(lanes.LANES)
    assert set(lanes.CATEGORY_OF.values()) | {"idle"} == \
        set(lanes.CATEGORIES) | {"I/O tiles (overlapped)"}
