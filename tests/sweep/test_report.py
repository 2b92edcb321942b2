"""The sweep report: a page to choose from, with only the points PopTorch would run on its front.

A point that PopTorch refuses (its checks, or a model that does not fit the
SRAM) is never on the Pareto front and is listed apart with its reason; a
figure is drawn only where its axes change over the sweep (no bubble where
nothing is pipelined); every link of the page leads to a file that exists.
"""
import html
import json
import re

import pytest

from ipusim.explore.design_point import OUT_OF_MEMORY, REFUSED_OPTIONS, pareto_front, refusals
from ipusim.report.sweep import figures, left_out, render_sweep_html
from poptorch_shim._core.option_names import REPORT_NAMES
from poptorch_shim.commands import main as ipusim_main
from poptorch_shim.sweep import InProcess, ModelSource, SweepSpec, sweep

GA = "Training.gradientAccumulation"
# 25,550 bytes a tile (37.6 MB an IPU): micro-batches of 4 and 16 fit, of 256 (the fastest) not.
MIXED = SweepSpec(model=ModelSource(factory="sweep_models:pipelined",
                                    kwargs={"width": 128, "sram_per_tile_bytes": 25_550}),
                  space={"replicationFactor": [1, 2], GA: [2, 8, 32], "micro_batch": [4, 16, 256]})


@pytest.fixture(scope="module")
def mixed():
    """18 points: 6 refused by PopTorch's checks (GA 2), 4 out of memory, 8 that run."""
    return sweep(MIXED, backend=InProcess())


def _check(page: str) -> dict:
    return json.loads(html.unescape(page.split('<pre id="sweep-check" hidden>')[1]
                                    .split("</pre>")[0]))


def _ids(page: str, table: str) -> list[str]:
    """The point ids of a table of the page, in its order."""
    part = page.split(f'<table class="points sortable" data-sort-bodies id="{table}">')[1]\
        .split("</table>")[0]
    return re.findall(r'<tbody id="point-(\w+)"', part)


def test_the_pareto_front_holds_only_points_that_fit_and_poptorch_accepts(mixed):
    ran = mixed[mixed["error"].isna()]
    assert (~ran["fits"]).sum() == 4 and ran["fits"].sum() == 8
    # Out of memory, the largest micro-batch is faster than anything that fits: not a choice.
    assert ran.loc[~ran["fits"], "throughput(items/s)"].max() > \
        ran.loc[ran["fits"], "throughput(items/s)"].max()
    front = mixed.loc[pareto_front(mixed)]
    assert len(front) and front["fits"].all() and front["error"].isna().all()
    fitting = mixed[mixed["fits"].fillna(False).astype(bool)]
    for _, point in fitting.iterrows():  # each point that fits is matched by one on the front
        assert ((front["throughput(items/s)"] >= point["throughput(items/s)"])
                & (front["memory_max(MB)"] <= point["memory_max(MB)"])).any()


def test_refused_points_are_listed_apart_with_their_reasons(mixed):
    refused = refusals(mixed)
    by_checks = refused[refused["refusal"] == REFUSED_OPTIONS]
    assert set(by_checks.index) == set(mixed.index[mixed[GA] == 2])
    assert by_checks["reason"].str.contains("gradientAccumulation must be greater than or equal "
                                            "to the number of pipeline stages").all()
    memory = refused[refused["refusal"] == OUT_OF_MEMORY]
    assert set(memory.index) == set(mixed.index[mixed["error"].isna() & ~mixed["fits"]])
    for index, reason in memory["reason"].items():
        per_ipu = json.loads(mixed.at[index, "memory_per_ipu(MB)"])
        fullest = max(range(len(per_ipu)), key=per_ipu.__getitem__)
        assert reason.startswith(f"IPU {fullest} needs {per_ipu[fullest]:,.1f} MB of its "
                                 f"{mixed.at[index, 'capacity(MB)']:,.1f} MB of SRAM (")
    page = render_sweep_html(mixed, names=REPORT_NAMES)
    ids = dict(zip(mixed["point_id"], mixed.index))
    assert sorted(ids[key] for key in _ids(page, "refused")) == sorted(refused.index)
    assert {ids[key] for key in _ids(page, "points")} == set(mixed.index) - set(refused.index)
    assert _check(page)["refused"] == 10 and _check(page)["runs"] == 8
    assert "4 out of memory, 6 by PopTorch&#x27;s checks" in page


def test_the_points_table_is_sorted_by_throughput_and_marks_the_front(mixed):
    page = render_sweep_html(mixed, names=REPORT_NAMES)
    shown = mixed.set_index("point_id").loc[_ids(page, "points"), "throughput(items/s)"]
    assert list(shown) == sorted(shown, reverse=True)
    front = set(mixed.loc[pareto_front(mixed), "point_id"])
    marked = set(re.findall(r'<tbody id="point-(\w+)" class="pareto"', page))
    assert marked == front
    # Each cell carries the value it sorts by; each heading, the kind of sort.
    first = mixed.set_index("point_id").loc[_ids(page, "points")[0]]
    assert f'data-sort="{first["throughput(items/s)"]}"' in page
    assert page.count('data-type="number" aria-sort="descending"') == 1


def test_the_table_shows_the_settings_that_change_and_says_once_those_that_do_not(mixed):
    table = mixed.assign(**{"Simulation.system": '["mk2", 8]'})
    table = table[["point", "point_id", "Simulation.system"]
                  + [c for c in mixed.columns if c not in ("point", "point_id")]]
    page = render_sweep_html(table, names=REPORT_NAMES)
    assert "Every point: <code>Simulation.system = [&quot;mk2&quot;, 8]</code>" in page
    assert "Simulation.<wbr>system</button>" not in page
    assert "Training.<wbr>gradient<wbr>Accumulation</button>" in page  # wraps between words


def test_a_sweep_of_a_model_that_is_not_pipelined_draws_no_bubble_and_says_why():
    spec = SweepSpec(model=ModelSource(factory="sweep_models:one_ipu"),
                     space={"replicationFactor": [1, 2], GA: [4, 16], "micro_batch": [4, 16]})
    table = sweep(spec, backend=InProcess())
    assert (table["pipeline_stages"] == 0).all() and (table["bubble_fraction"] == 0).all()
    drawn = figures(table, {}, REPORT_NAMES)
    assert "bubble_vs_ga" not in drawn and {"pareto", "throughput_vs_ipus"} <= set(drawn)
    assert left_out(table, REPORT_NAMES) == {
        "bubble_vs_ga": "no point is pipelined, so none has a pipeline bubble"}
    # A results file of before the pipeline's stages were recorded: the bubble says the same.
    assert left_out(table.drop(columns="pipeline_stages"), REPORT_NAMES) == left_out(
        table, REPORT_NAMES)
    page = render_sweep_html(table, names=REPORT_NAMES)
    assert 'id="bubble_vs_ga"' not in page and "pipeline bubble</button>" not in page
    assert "Pipeline bubble against gradient accumulation: no point is pipelined" in page


def test_a_figure_whose_axis_does_not_change_is_left_out(mixed):
    one_replica = mixed[mixed["replicationFactor"] == 1]
    reasons = left_out(one_replica, REPORT_NAMES)
    assert reasons == {"throughput_vs_ipus": "every point has the same number of IPUs: 2"}
    assert set(figures(one_replica, {}, REPORT_NAMES)) == {"pareto", "bubble_vs_ga"}
    one_ga = mixed[mixed[GA] == 8]
    assert left_out(one_ga, REPORT_NAMES) == {
        "bubble_vs_ga": "every point has the same gradient accumulation: 8"}
    # The bubble figure holds only pipelined points, on a log axis ticked at the values swept.
    bubble = figures(mixed, {}, REPORT_NAMES)["bubble_vs_ga"]
    assert list(bubble.layout.xaxis.tickvals) == [8.0, 32.0]
    assert "bubble_vs_ga" in figures(mixed.drop(columns="pipeline_stages"), {}, REPORT_NAMES)
    nothing_ran = mixed[mixed[GA] == 2]
    assert set(left_out(nothing_ran, REPORT_NAMES)) == {"pareto", "throughput_vs_ipus",
                                                         "bubble_vs_ga"}
    assert "None: every point is refused" in render_sweep_html(nothing_ran, names=REPORT_NAMES)


def test_every_link_of_the_report_leads_to_a_file_and_every_point_has_details(tmp_path, capsys):
    spec_path = tmp_path / "mixed.toml"
    spec_path.write_text('[model]\nfactory = "sweep_models:pipelined"\n'
                         'kwargs = { width = 128, sram_per_tile_bytes = 25550 }\n'
                         '[space]\n"Training.gradientAccumulation" = [2, 8]\n'
                         'replicationFactor = [1, 2]\nmicro_batch = [4, 256]\n')
    directory = tmp_path / "report"
    assert ipusim_main(["sweep", str(spec_path), "--workers", "0", "--no-progress",
                        "--report", str(directory), "--report-points", "all"]) == 0
    page = (directory / "sweep.html").read_text()
    links = re.findall(r'<a href="([^"]+)"', page.split("<body>")[1])
    assert links and all((directory / link).is_file() for link in links)
    check = _check(page)
    written = sorted((directory / "points").glob("*.html"))
    # A timeline report for each point that ran, out of memory too (its memory shows why).
    assert check["links"] == len(written) == check["runs"] + 2 == 4
    assert {f"points/{path.name}" for path in written} <= set(links)
    # Every point has a details row: its settings as PopTorch code, and its report or how to
    # write one.
    assert page.count('<tr class="details">') == check["points"] == 8
    assert page.count("opts.Training.gradientAccumulation(") == 8
    assert page.count("--report-points all</code> writes one") == 8 - len(written)
    assert "Traceback" not in capsys.readouterr().err
