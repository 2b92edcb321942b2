"""``ipusim compare A B``: the comparison's numbers, its text and page, and its errors.

The step-time parts of each run add up to its step time, so their differences add
up to the difference of the step times (the waterfall closes); the throughput ratio
is the runs' own; the settings that differ are named as the profile names them.
"""
import dataclasses
import json
import shutil
from pathlib import Path

import pytest

from ipusim import Cost, RunConfig, Stage, Work, simulate, system_spec
from ipusim.analysis.comparison import ComparedRun, compare
from ipusim.analysis.step_time import STEP_PARTS
from ipusim.cli import main
from ipusim.cost.cost_model import PS_PER_US
from ipusim.cost.work import Kernel, KernelKind
from ipusim.plan.memory import OutOfMemoryError, check_fits, memory_per_ipu
from ipusim.plan.setting_names import SettingNames
from ipusim.report import write_autoreport, write_out_of_memory_report
from ipusim.report.compare import (
    baseline_pairs,
    comparison_text,
    load_run,
    operator_table,
    per_ipu_basis,
    per_ipu_table,
    render_comparison_html,
    waterfall_figure,
)
from ipusim.report.compare import (
    speed as comparison_speed,
)

from report_timelines import pipeline_run, replicated_run

NAMES = SettingNames(columns={"gradient_accumulation": "Training.gradientAccumulation",
                              "replicas": "replicationFactor"})


def run(name, timeline, options=None):
    return ComparedRun(name, timeline, options or {}, NAMES)


@pytest.fixture(scope="module")
def accumulation(pipeline_timeline):
    """The Fig 4.1 pipeline against the same with twice the gradient accumulation."""
    return compare(run("g8", pipeline_timeline, {"Training.gradientAccumulation": 8}),
                   run("g16", pipeline_run(micro_batches=16),
                       {"Training.gradientAccumulation": 16}))


def closes(comparison) -> None:
    """Each run's parts add up to its step time, the differences to theirs."""
    parts = comparison.parts
    for side, figures in (("a_us", comparison.a), ("b_us", comparison.b)):
        assert parts[side].sum() == pytest.approx(figures.step_time_ps / PS_PER_US, rel=1e-12)
    assert parts["delta_us"].sum() == pytest.approx(comparison.step_time_delta_us, rel=1e-9,
                                                    abs=1e-9)


def test_the_waterfall_closes_and_the_ratios_are_the_runs_own(accumulation, pipeline_timeline):
    closes(accumulation)
    longer = pipeline_run(micro_batches=16)
    assert accumulation.throughput_ratio == pytest.approx(
        longer.throughput() / pipeline_timeline.throughput(), rel=1e-12)
    assert accumulation.step_time_ratio == pytest.approx(
        longer.duration_ps / pipeline_timeline.duration_ps, rel=1e-12)  # one step each
    shown = list(accumulation.parts.index)
    assert shown[:7] == ["compute", "exchange", "host_io", "sync_wait", "pipeline_bubble",
                         "host_round_trip", "idle"]
    # The bubble's time does not change with G; compute doubles but for the update.
    delta = accumulation.parts["delta_us"]
    assert delta["pipeline_bubble"] == pytest.approx(0, abs=1e-9)
    assert delta["compute"] > 0 and delta["host_round_trip"] == pytest.approx(0, abs=1e-9)
    assert accumulation.throughput_ratio > 1


def test_every_pair_of_runs_closes(pipeline_timeline, replicated_timeline):
    one_replica = simulate(replicated_timeline.work,
                           dataclasses.replace(replicated_timeline.run, replicas=1),
                           system_spec("mk2", 4), steps=2)
    for a, b in ((pipeline_timeline, replicated_timeline), (one_replica, replicated_timeline),
                 (replicated_timeline, pipeline_timeline)):
        comparison = compare(run("a", a), run("b", b))
        closes(comparison)
        assert comparison.throughput_ratio == pytest.approx(b.throughput() / a.throughput())
        # Parts zero in both runs and marked optional are left out.
        for part in STEP_PARTS:
            if part.optional and part.name not in comparison.parts.index:
                assert not a.step_time_by_ipu()[part.name].any()


def test_per_ipu_ipu_by_ipu_when_the_runs_have_as_many(accumulation, pipeline_timeline):
    table = per_ipu_table(accumulation)
    assert accumulation.per_ipu_match == "ipu"
    assert per_ipu_basis(accumulation) == "IPU by IPU (4 each)"
    assert list(dict.fromkeys(table["ipu"])) == ["IPU 0", "IPU 1", "IPU 2", "IPU 3"]
    ipu3 = table[table["ipu"] == "IPU 3"].set_index("part")["a_us"]
    expected = pipeline_timeline.step_time_by_ipu().loc[3] / PS_PER_US
    assert ipu3.to_dict() == pytest.approx(expected[ipu3.index].to_dict())
    per_ipu = table.groupby("ipu")["delta_us"].sum()
    assert per_ipu.mean() == pytest.approx(accumulation.step_time_delta_us)


def test_per_ipu_by_place_in_the_replica_when_the_replicas_differ(pipeline_timeline):
    two = pipeline_run(replicas=2)
    comparison = compare(run("one", pipeline_timeline), run("two", two))
    assert comparison.per_ipu_match == "place"
    assert "A has 4 IPUs (1 replica), B has 8 IPUs (2 replicas)" in per_ipu_basis(comparison)
    table = per_ipu_table(comparison)
    assert list(dict.fromkeys(table["ipu"])) == [f"IPU {k} of each replica" for k in range(4)]
    # Each place is the mean of that IPU over B's two replicas.
    times = two.step_time_by_ipu()
    first = table[table["ipu"] == "IPU 0 of each replica"]
    compute = first.set_index("part").at["compute", "b_us"]
    assert compute == pytest.approx((times.at[0, "compute"] + times.at[4, "compute"]) / 2
                                    / PS_PER_US)


def test_per_ipu_as_the_mean_ipu_when_the_replicas_do_not_correspond(
        pipeline_timeline, replicated_timeline):
    comparison = compare(run("pipeline", pipeline_timeline), run("replicas", replicated_timeline))
    assert comparison.per_ipu_match == "mean"
    assert "the IPUs do not correspond" in per_ipu_basis(comparison)
    mean = per_ipu_table(comparison).groupby("ipu")[["a_us", "b_us"]].sum()
    assert list(mean.index) == ["mean IPU"]
    assert mean.at["mean IPU", "b_us"] == pytest.approx(comparison.b.step_time_ps / PS_PER_US)


def test_the_settings_that_differ_by_the_profiles_words(accumulation, pipeline_timeline):
    rows = {row.setting: (row.a, row.b) for row in accumulation.options.itertuples()}
    # The script's option says it; the run setting it makes is not said twice.
    assert rows == {"Training.gradientAccumulation": (8, 16)}
    wider = pipeline_run(micro_batches=16, replicas=2)
    without_options = compare(ComparedRun("a", pipeline_timeline, {}, NAMES),
                              ComparedRun("b", wider, {}, NAMES))
    rows = {row.setting: (row.a, row.b) for row in without_options.options.itertuples()}
    assert rows["Training.gradientAccumulation (gradient_accumulation)"] == (8, 16)
    assert rows["replicationFactor (replicas)"] == (1, 2)
    assert rows["system: num_ipus"] == (4, 8)
    same = compare(run("a", pipeline_timeline), run("b", pipeline_timeline))
    assert same.options.empty and "Settings: the same in both runs" in comparison_text(same)
    assert (same.parts["delta_us"] == 0).all() and same.throughput_ratio == 1


def operator_run(m: int, system: str = "mk2"):
    matmul = Kernel(KernelKind.MATMUL, 2, m=m, k=256, n=256)
    norm = Kernel(KernelKind.NORMALISE, 2, elements=4096)
    cost = Cost(2 * m * 256 * 256, 1e6, 2, kernels=((matmul, 2), (norm, 1)))
    work = Work((Stage("body", 0, cost, cost),), 4, 1024, 16)
    return simulate(work, RunConfig(device_iterations=2), system_spec(system, 1))


def test_operators_match_by_stage_pass_kind_and_shape():
    comparison = compare(run("mk2", operator_run(64)), run("bow", operator_run(64, "bow")))
    operators = comparison.operators
    assert set(operators["status"]) == {"changed"}  # the same operators, a faster clock
    assert (operators["delta_us"] < 0).all()
    assert sorted(operators["pass"]) == ["backward"] * 2 + ["forward"] * 2
    text = comparison_text(comparison)
    assert "system: ipu.clock_hz: 1,330,000,000 → 1,850,000,000" in text
    assert "Operators that differ, per micro-batch" in comparison_text(comparison)
    resized = compare(run("m64", operator_run(64)), run("m128", operator_run(128)))
    status = operator_table(resized).set_index(["pass", "shape"])["status"]
    assert status[("forward", "64 × 256 × 256 fp16")] == "only in A"
    assert status[("forward", "128 × 256 × 256 fp16")] == "only in B"
    assert status[("forward", "4,096 elements fp16")] == "same"
    same = compare(run("a", operator_run(64)), run("b", operator_run(64)))
    assert "Operators: the same in both runs" in comparison_text(same)


def test_runs_without_operators_say_so(accumulation):
    assert accumulation.operators is None
    assert "neither run records its operators" in comparison_text(accumulation)


def test_the_text_gives_the_figures_and_why(accumulation):
    text = comparison_text(accumulation)
    a, b = accumulation.a, accumulation.b
    assert f"{a.items_per_s:,.0f} items/s" in text and f"{b.items_per_s:,.0f} items/s" in text
    assert f"{accumulation.throughput_ratio:.2f}×" in text
    assert "Training.gradientAccumulation: 8 → 16" in text
    assert "Step time by part" in text and "Per IPU, B − A per step" in text
    largest = accumulation.largest_parts(1).iloc[0]
    assert f"mostly {largest['label']}" in text


def test_the_page_is_self_contained_with_a_waterfall_that_closes(accumulation):
    page = render_comparison_html(accumulation)
    assert "<script src" not in page and 'id="render-check"' in page
    assert "ipusim report — g8 → g16" in page
    assert page.count('"type":"waterfall"') == 1 and 'id="per-ipu"' in page
    (trace,) = waterfall_figure(accumulation).data
    assert trace.measure[0] == "absolute" and trace.measure[-1] == "total"
    assert set(trace.measure[1:-1]) == {"relative"}
    assert trace.y[0] + sum(trace.y[1:-1]) == pytest.approx(trace.y[-1], rel=1e-12)
    assert list(trace.x[1:-1]) == [part.short for part in STEP_PARTS
                                   if part.name in accumulation.parts.index]


# -- the command ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def saved(tmp_path_factory, pipeline_timeline):
    """Two saved runs: Fig 4.1's pipeline with G = 8 (A) and 16 (B)."""
    root = tmp_path_factory.mktemp("compare")
    a = write_autoreport(root / "a" / "training", pipeline_timeline,
                         options={"Training.gradientAccumulation": 8}, names=NAMES)
    b = write_autoreport(root / "b" / "training", pipeline_run(micro_batches=16),
                         options={"Training.gradientAccumulation": 16}, names=NAMES)
    return a, b


def test_compare_prints_the_comparison_and_writes_the_page(saved, capsys):
    a, b = saved
    assert main(["compare", str(a), str(b / "profile.json")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ipusim comparison") and "  A: a/training" in out
    assert "Training.gradientAccumulation: 8 → 16" in out
    assert out.rstrip().endswith(f"Page: {b / 'compare.html'}")
    assert "ipusim report — a/training → b/training" in (b / "compare.html").read_text()
    expected = comparison_text(compare(load_run(a), load_run(b)))
    assert out.startswith(expected)


def test_compare_writes_where_it_is_told(saved, tmp_path, capsys):
    output = tmp_path / "deep" / "c.html"
    assert main(["compare", str(saved[0]), str(saved[1]), "-o", str(output)]) == 0
    assert output.is_file() and f"Page: {output}" in capsys.readouterr().out


def test_the_pages_verdict_is_coloured_by_what_it_says(saved):
    """Green for faster, red for slower, grey for about as fast, each its own class."""
    a, b = (load_run(path) for path in saved)
    for one, other, word in ((a, b, None), (b, a, None), (a, a, "about-as-fast")):
        comparison = compare(one, other)
        kind = word or comparison_speed(comparison)
        page = render_comparison_html(comparison)
        assert f'<div class="verdict {kind}">' in page and f".verdict.{kind} {{" in page
        assert 'class="verdict compute"' not in page
    assert {comparison_speed(compare(a, b)), comparison_speed(compare(b, a))} == {
        "faster", "slower"}


def test_compare_into_a_folder_writes_compare_html_there(saved, tmp_path, capsys):
    folder = tmp_path / "pages"
    folder.mkdir()
    assert main(["compare", str(saved[0]), str(saved[1]), "-o", str(folder)]) == 0
    assert (folder / "compare.html").is_file()
    assert f"Page: {folder / 'compare.html'}" in capsys.readouterr().out


def bad_inputs(tmp_path: Path, good: Path) -> dict[str, tuple[Path, str]]:
    """Each bad input, and the words its error must have."""
    empty = tmp_path / "empty"
    empty.mkdir()
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / "profile.json").write_text("{not json")
    other = tmp_path / "other"
    other.mkdir()
    (other / "profile.json").write_text(json.dumps({"format": "something-else"}))
    no_events = tmp_path / "graph-only"
    write_autoreport(no_events, replicated_run(), outputs={"profile.json"})
    big = Work((Stage("big", 0, Cost(ops=1), Cost(ops=1), weight_bytes=2 << 30),), 4, 16, 16)
    with pytest.raises(OutOfMemoryError) as error:
        check_fits(memory_per_ipu(big, RunConfig(), system_spec("mk2", 1)))
    out_of_memory = write_out_of_memory_report(tmp_path / "oom", error.value)
    damaged_events = Path(shutil.copytree(good, tmp_path / "damaged-events"))
    (damaged_events / "events.csv.gz").write_bytes(b"not gzip")
    damaged_options = Path(shutil.copytree(good, tmp_path / "damaged-options"))
    profile = json.loads((good / "profile.json").read_text())
    (damaged_options / "profile.json").write_text(json.dumps({**profile, "options": [1]}))
    damaged_run = Path(shutil.copytree(good, tmp_path / "damaged-run"))
    (damaged_run / "profile.json").write_text(json.dumps({**profile, "run": {"replicas": 0}}))
    root = good.parent
    not_profile = tmp_path / "notes.txt"
    not_profile.write_text("x")
    return {
        "missing": (tmp_path / "nowhere", "does not exist"),
        "no profile.json": (empty, "No profile.json in"),
        "unreadable JSON": (garbage, "it is not JSON"),
        "another format": (other, "is not an ipusim profile"),
        "no events": (no_events, "No events.csv.gz in"),
        "out of memory": (out_of_memory, "did not fit in memory"),
        "damaged events": (damaged_events, "events.csv.gz is damaged"),
        "damaged options": (damaged_options, "profile.json is damaged: its options are list"),
        "damaged run": (damaged_run, "profile.json is damaged: replicas must be a positive"),
        "a report directory": (root, "name one of them"),
        "another file": (not_profile, "is not an autoReport folder nor its profile.json"),
    }


def test_bad_input_is_a_clear_error_naming_the_path(saved, tmp_path, capsys):
    for case, (path, words) in bad_inputs(tmp_path, saved[0]).items():
        for argv, label in (([str(path), str(saved[1])], "A"), ([str(saved[0]), str(path)], "B")):
            assert main(["compare", *argv]) == 2, case
            err = capsys.readouterr().err
            assert err.startswith(f"ipusim compare: error: {label}: "), (case, err)
            assert words in err and str(path) in err, (case, err)
            assert "Traceback" not in err and len(err.strip().splitlines()) == 1, (case, err)


def test_which_earlier_report_a_run_is_compared_with(saved, tmp_path):
    a, b = saved
    other = tmp_path / "other"
    # A report folder: the written report of its name, or the only one written.
    assert baseline_pairs(a, [b]) == ([(a, b)], [])
    assert baseline_pairs(a, [other, b]) == ([(a, b)], [])
    pairs, notes = baseline_pairs(a, [other, tmp_path / "inference"])
    assert pairs == [] and "no report of this run is named training" in notes[0]
    assert "it wrote: other, inference" in notes[0]
    # A report directory: each written report with the folder of its name.
    pairs, notes = baseline_pairs(a.parent, [b, other])
    assert pairs == [(a, b)]
    assert notes == [f"{a.parent} holds no report named other to compare {other} with"]
    assert baseline_pairs(a.parent, [])[1] == ["the run wrote no report to compare with"]
