"""The report's operators: the table adds up to the breakdown, shares of the step are the
timeline's, the treemap holds every operator, and a roofline stage is named, not empty."""
import re
from html.parser import HTMLParser

import numpy as np
import pandas as pd
import pytest

from ipusim import (
    Cost,
    Execution,
    Kernel,
    KernelKind,
    RunConfig,
    Stage,
    Work,
    simulate,
    system_spec,
)
from ipusim.engine.recorder import COMPUTE_KINDS
from ipusim.report import render_html
from ipusim.report.autoreport import load_autoreport, write_autoreport
from ipusim.report.chrome_trace import operator_layout
from ipusim.report.figures import HOVER_COLUMNS, timeline_figure
from ipusim.report.operators import (
    COLUMNS,
    TERMS,
    operator_table_html,
    operator_treemap,
    operators_section,
    roofline_passes,
    top_operators,
)

from report_timelines import operator_pipeline_run

PS_PER_US = 1e6


class Cells(HTMLParser):
    """The operator table's headers and each row's attributes and cells' sort keys."""

    def __init__(self):
        super().__init__()
        self.headers, self.rows = [], []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "th":
            self.headers.append(attrs)
        elif tag == "tr" and "data-stage" in attrs:
            self.rows.append((attrs, []))
        elif tag == "td":
            self.rows[-1][1].append(attrs.get("data-sort"))


def table_cells(shares: pd.DataFrame) -> Cells:
    parser = Cells()
    parser.feed(operator_table_html(shares))
    return parser


def column(name: str) -> int:
    return [header for header, *_ in COLUMNS].index(name)


def test_the_table_rows_add_up_to_the_breakdown(operator_timeline):
    breakdown = operator_timeline.operator_breakdown()
    shares = operator_timeline.operator_shares()
    pd.testing.assert_frame_equal(shares[breakdown.columns], breakdown)
    cells = table_cells(shares)
    # per stage: 4 forward operators, 4 backward and the accumulators' add, SGD's 2 updates,
    # the learning rate's negation and the accumulators' zeroing
    assert len(cells.rows) == len(breakdown) == 4 * (4 + 5 + 4)
    for term, name, _ in TERMS:
        shown = sum(float(row[column(name)]) for _, row in cells.rows)
        assert shown == pytest.approx(breakdown[term].sum())
    micro_batch = sum(float(row[column("µs / micro-batch")]) for _, row in cells.rows)
    assert micro_batch == pytest.approx(breakdown["time_us"].sum())
    # every row names its stage and pass, for the timeline's click to find
    assert {(int(attrs["data-stage"]), attrs["data-pass"]) for attrs, _ in cells.rows} == set(
        zip(breakdown["stage_index"], breakdown["pass"]))


def test_every_cell_has_a_sort_key_of_its_column_type(operator_timeline):
    cells = table_cells(operator_timeline.operator_shares())
    assert [header["data-type"] for header in cells.headers] == [
        "number" if numeric else "text" for *_, numeric in COLUMNS]
    assert [h.get("aria-sort") for h in cells.headers].count("descending") == 1
    for _, row in cells.rows:
        assert len(row) == len(COLUMNS) and None not in row
        for (_, _, numeric), key in zip(COLUMNS, row):
            if numeric:
                float(key)
    # the first order: most of the step first
    shares = [float(row[column("% of step")]) for _, row in cells.rows]
    assert shares == sorted(shares, reverse=True)


def test_shares_are_the_operators_time_in_a_step_over_the_step(operator_timeline):
    shares = operator_timeline.operator_shares()
    events = operator_timeline.events
    step_us = (events["end_ps"].max() - events["start_ps"].min()) / PS_PER_US  # one step
    runs = {"forward": 8, "backward": 8, "weight_update": 1}  # G = 8, one update a step
    assert list(shares["runs_per_step"]) == [runs[p] for p in shares["pass"]]
    assert np.allclose(shares["us_per_step"], shares["time_us"] * shares["runs_per_step"])
    assert np.allclose(shares["step_share"], shares["us_per_step"] / step_us)
    # Every compute box is priced by its operators: they add up to the IPU's compute time.
    compute = events[events["kind"].isin(COMPUTE_KINDS)]
    per_ipu = (compute["end_ps"] - compute["start_ps"]).groupby(compute["ipu"]).sum() / PS_PER_US
    operators = shares.groupby("ipu")["us_per_step"].sum()
    np.testing.assert_allclose(operators.to_numpy(), per_ipu.to_numpy(), rtol=1e-6)
    assert shares["compute_share"].sum() == pytest.approx(1.0)
    np.testing.assert_allclose(shares.groupby("ipu")["step_share"].sum().to_numpy(),
                               operator_timeline.category_times()["compute"].to_numpy(),
                               rtol=1e-6)


def test_the_top_operators_are_called_out_with_their_share(operator_timeline):
    shares = operator_timeline.operator_shares()
    page = operators_section(operator_timeline, {})
    callout = re.search(r'<div class="top-operators">.*?</div>', page, re.S).group(0)
    assert "The 5 operators that take the most of the step" in callout
    shown = [float(value) / 100 for value in re.findall(r'class="share">([\d.]+)%', callout)]
    top = top_operators(shares)
    assert len(shown) == 5
    assert shown == pytest.approx(list(top["step_share"]), abs=5e-4)
    assert shown == sorted(shown, reverse=True)
    assert top["step_share"].min() >= shares["step_share"].drop(top.index).max()
    compute = operator_timeline.category_times()["compute"]  # every box has its operators
    assert (f"IPU {compute.idxmax()} spends the most of the step in operators: "
            f"{compute.max():.1%};") in page


def test_the_treemap_holds_every_operator_under_its_stage_and_ipu(operator_timeline):
    shares = operator_timeline.operator_shares()
    passes = operator_timeline.pass_shares()
    treemap = operator_treemap(shares, passes).data[0]
    ids, parents = list(treemap.ids), list(treemap.parents)
    assert set(parents) - {""} <= set(ids)
    leaves = [i for i, id_ in enumerate(ids) if id_ not in set(parents)]
    assert len(leaves) == len(shares)
    assert sum(treemap.values[i] for i in leaves) == pytest.approx(shares["us_per_step"].sum())
    by_id = dict(zip(ids, parents))
    for position, row in shares.iterrows():  # operator → stage → IPU
        stage = by_id[f"o{position}"]
        assert stage == f"s{row['stage_index']}" and by_id[stage] == f"ipu{row['ipu']}"
    for hover in treemap.hovertext:
        assert all(name in hover for _, name, _ in TERMS) and "µs of operators per step" in hover


def test_a_stage_priced_by_the_roofline_is_named_not_an_empty_table():
    timeline = operator_pipeline_run(roofline=(1,))
    shares = timeline.operator_shares()
    passes = timeline.pass_shares()
    assert 1 not in set(shares["stage_index"])
    roofline = passes[~passes["operators"]]
    assert set(roofline["stage"]) == {"layer1"}
    assert set(roofline["pass"]) == {"forward", "backward", "weight_update"}
    page = operators_section(timeline, {})
    assert "Priced by the roofline, so no operators to list" in page
    assert page.count("layer1 (IPU 1)") == 3
    treemap = operator_treemap(shares, passes).data[0]
    assert [label for label in treemap.labels if label.endswith("roofline")] == [
        "backward: roofline", "forward: roofline", "weight update: roofline"]


def test_a_pass_that_lists_no_operators_and_takes_no_time_is_not_called_roofline():
    """The weight update of a stage without weights (one holding only the loss) takes no
    time: the section does not say the roofline priced it."""
    def cost(kernel):
        return Cost(kernels=((kernel, 1),), ops=1)

    matmul = Kernel(KernelKind.MATMUL, 2, m=512, k=1024, n=1024, op="aten::addmm")
    loss = Kernel(KernelKind.ELEMENTWISE, 2, elements=1 << 12, op="aten::nll_loss_forward")
    stages = (Stage("s0", 0, cost(matmul), cost(matmul), activation_bytes=1 << 20,
                    weight_bytes=1 << 21),
              Stage("loss", 1, cost(loss), cost(loss), activation_bytes=1 << 20))
    timeline = simulate(Work(stages, micro_batch_size=8, input_bytes_per_sample=4096),
                        RunConfig(gradient_accumulation=6, execution=Execution.PIPELINED),
                        system_spec("mk2", 2))
    passes = timeline.pass_shares().set_index(["stage", "pass"])
    assert passes.at[("loss", "weight_update"), "us_per_step"] == 0
    assert not passes.at[("loss", "weight_update"), "operators"]
    assert roofline_passes(timeline.pass_shares()).empty
    page = operators_section(timeline, {})
    assert "Priced by the roofline" not in page and "roofline" not in "".join(
        operator_treemap(timeline.operator_shares(), timeline.pass_shares()).data[0].labels)

def test_a_run_with_no_operators_says_so(pipeline_timeline):
    assert pipeline_timeline.operator_shares().empty
    page = render_html(pipeline_timeline)
    assert "No stage of this run lists its operators" in page
    assert 'id="operator-table"' not in page and 'id="operator-treemap"' not in page


def test_an_inference_pipeline_runs_its_forward_once_a_micro_batch():
    timeline = operator_pipeline_run(training=False, micro_batches=6)
    shares = timeline.operator_shares()
    assert set(shares["pass"]) == {"forward"} and set(shares["runs_per_step"]) == {6}


def test_shares_are_one_replicas():
    one, two = operator_pipeline_run(), operator_pipeline_run(replicas=2)
    assert set(two.operator_shares()["ipu"]) == {0, 1, 2, 3}
    np.testing.assert_allclose(two.operator_shares()["runs_per_step"],
                               one.operator_shares()["runs_per_step"])
    assert "each of the 2 replicas runs the same" in operators_section(two, {})


def test_a_saved_report_shows_the_operators(tmp_path, operator_timeline):
    write_autoreport(tmp_path, operator_timeline)
    loaded = load_autoreport(tmp_path)
    pd.testing.assert_frame_equal(loaded.operator_shares(), operator_timeline.operator_shares())
    page = render_html(loaded)
    assert page.count("<tr data-stage=") == len(operator_timeline.operator_breakdown())
    assert 'id="operator-treemap"' in (tmp_path / "report.html").read_text(encoding="utf-8")


@pytest.mark.parametrize("run", ["pipelined", "replicated", "operators"])
def test_the_hover_says_only_what_applies(run, pipeline_timeline, replicated_timeline,
                                          operator_timeline):
    timeline = {"pipelined": pipeline_timeline, "replicated": replicated_timeline,
                "operators": operator_timeline}[run]
    names = {stage.name for stage in timeline.plan.stages}
    fig = timeline_figure(timeline)
    boxes = 0
    for trace in fig.data:
        if trace.type != "bar" or trace.hovertemplate is None:
            continue
        template, custom = trace.hovertemplate, np.asarray(trace.customdata)
        boxes += len(custom)
        # each field the hover reads is there (never -1) for every box of the trace
        for index in map(int, re.findall(r"customdata\[(\d)\]", template)):
            assert (custom[:, index] >= 0).all(), (trace.name, HOVER_COLUMNS[index])
        assert "-1" not in template
        assert "duration %{x:,.3f} µs" in template
        stages = set(custom[:, HOVER_COLUMNS.index("stage")].astype(int))
        if stages == {-1}:
            assert "stage" not in template
        else:  # one stage a trace, by its name
            (stage,) = stages
            assert f"stage {timeline.plan.stages[stage].name}<" in template \
                or f"stage {timeline.plan.stages[stage].name}," in template
        micro = custom[:, HOVER_COLUMNS.index("micro_batch")]
        assert ("micro-batch" in template) == bool((micro >= 0).all())
        for field, word in (("bytes", "bytes"), ("flops", "FLOP")):
            values = custom[:, HOVER_COLUMNS.index(field)]
            assert (word in template) == bool((values > 0).all()), (trace.name, field)
    assert boxes == len(timeline.events)
    assert names


def test_the_hover_duration_is_the_boxes_length(pipeline_timeline):
    events = pipeline_timeline.events
    sync = events[events["kind"] == "sync_wait"]
    traces = [t for t in timeline_figure(pipeline_timeline).data if t.name == "sync wait"]
    drawn = np.sort(np.concatenate([np.asarray(t.x, dtype=float) for t in traces]))
    np.testing.assert_allclose(drawn, np.sort((sync["end_ps"] - sync["start_ps"]) / PS_PER_US),
                               rtol=1e-6)


def test_a_pass_the_schedule_never_runs_is_not_listed():
    """With recompute on, a pipeline recomputes every stage but the last (its backward
    follows its forward at once): the last stage's recompute is no row of the operators,
    the passes, the table, or the traces' operator layouts."""
    timeline = operator_pipeline_run(recompute=True)
    last = len(timeline.plan.stages) - 1
    ran = set(zip(timeline.events["stage"], timeline.events["kind"].astype(str)))
    assert (last, "recompute") not in ran and (0, "recompute") in ran
    breakdown = timeline.operator_breakdown()
    assert (last, "recompute") in set(zip(breakdown["stage_index"], breakdown["pass"]))
    shares = timeline.operator_shares()
    listed = set(zip(shares["stage_index"], shares["pass"]))
    assert listed == {key for key in ran if key[0] >= 0 and key[1] in COMPUTE_KINDS}
    assert (shares["runs_per_step"] > 0).all()
    passes = timeline.pass_shares()
    assert (passes["runs_per_step"] > 0).all()
    assert set(zip(passes["stage_index"], passes["pass"])) == listed
    assert table_cells(shares).rows and len(table_cells(shares).rows) == len(shares)
    assert set(operator_layout(timeline)) == listed


def test_the_table_sorts_by_the_pages_shared_script_from_a_button_per_heading(operator_timeline):
    """The operator table is sorted as the sweep's tables are (one script), by a button in
    each heading, so the keyboard reaches it."""
    table = operator_table_html(operator_timeline.operator_shares())
    assert 'class="operators sortable"' in table
    assert table.count('<button type="button">') == table.count("<th ") == len(COLUMNS)
    page = render_html(operator_timeline)
    assert page.count("window.ipusimSortTable = sort") == 1


def test_a_report_works_the_step_times_out_once(monkeypatch):
    """The pass and operator shares (the page, and a trace's operator layout) read one
    :meth:`Timeline.step_times`: it groups every compute event, slow at pod scale."""
    from ipusim.analysis import timeline as timeline_module

    calls = []
    real = timeline_module.step_times
    monkeypatch.setattr(timeline_module, "step_times",
                        lambda events: calls.append(len(events)) or real(events))
    timeline = operator_pipeline_run(recompute=True)
    render_html(timeline)
    operator_layout(timeline)
    assert len(calls) == 1
    assert timeline.pass_shares()["runs_per_step"].sum() == pytest.approx(
        timeline.step_times().runs.sum())
