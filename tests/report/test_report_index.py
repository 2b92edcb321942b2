"""The index page of a folder of reports: every autoReport directory, its figures and a link."""
import html
import json
import re
import shutil
from urllib.parse import unquote

import pytest

from ipusim import Cost, RunConfig, Stage, Work, system_spec
from ipusim.cli import main
from ipusim.plan.memory import OutOfMemoryError, check_fits, memory_per_ipu
from ipusim.report import write_autoreport, write_out_of_memory_report
from ipusim.report.index_page import INDEX, index_entries, render_index, write_index
from ipusim.report.verdict import bottleneck


@pytest.fixture(scope="module")
def folder(tmp_path_factory, pipeline_timeline, replicated_timeline):
    """Two scenarios' reports, one with every file and one with its profile and summary
    only, as two runs of `ipusim run --report` leave them."""
    root = tmp_path_factory.mktemp("reports")
    write_autoreport(root / "pipelined" / "training", pipeline_timeline)
    write_autoreport(root / "replicated" / "inference", replicated_timeline,
                     outputs={"profile.json", "summary.txt"})
    return root


def rows(page: str) -> dict[str, list[str]]:
    """The index's rows by link: the text of each cell, tags removed."""
    found = {}
    for row in re.findall(r"<tr>(.*?)</tr>", page, re.S):
        link = re.search(r'href="([^"]+)"', row)
        if link:
            cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
            found[link.group(1)] = [re.sub(r"<[^>]+>", "", cell) for cell in cells]
    return found


def test_the_index_lists_every_report_with_its_figures_and_a_link_to_it(
        folder, pipeline_timeline, replicated_timeline):
    page = write_index(folder)
    assert page == folder / INDEX
    listed = rows(page.read_text())
    assert set(listed) == {"pipelined/training/report.html", "replicated/inference/summary.txt"}
    assert all((folder / link).is_file() for link in listed)
    for link, timeline in (("pipelined/training/report.html", pipeline_timeline),
                           ("replicated/inference/summary.txt", replicated_timeline)):
        name, throughput, step_ms, ipus, verdict = listed[link]
        figures = timeline.figures()
        found = bottleneck(timeline)
        assert name == link.split("/")[1]
        assert throughput == f"{figures['throughput(items/s)']:,.0f}"
        assert step_ms == f"{figures['duration(ms)'] / timeline.steps:,.3f}"
        assert ipus == str(timeline.num_ipus) == "4"
        assert html.unescape(verdict) == found.kind + found.headline
    # The replicated run simulated three steps: its step time is a third of its span.
    assert replicated_timeline.steps == 3
    assert replicated_timeline.figures()["step_time(ms)"] == pytest.approx(
        replicated_timeline.figures()["duration(ms)"] / 3)


def test_the_entries_read_each_profile(folder, pipeline_timeline):
    entries = {str(entry.path): entry for entry in index_entries(folder)}
    assert list(entries) == ["pipelined/training", "replicated/inference"]
    profile = json.loads((folder / "pipelined/training/profile.json").read_text())
    entry = entries["pipelined/training"]
    assert entry.throughput == profile["figures"]["throughput(items/s)"]
    assert entry.step_time_ms == profile["figures"]["step_time(ms)"]
    assert (entry.ipus, entry.verdict_kind) == (4, profile["verdict"]["kind"])


def test_a_model_that_does_not_fit_and_a_damaged_profile_are_listed_with_why(tmp_path):
    work = Work((Stage("huge", 0, Cost(time_ps=1), Cost(time_ps=1),
                       weight_bytes=4 * 10**9),), micro_batch_size=1)
    run = RunConfig()
    memory = memory_per_ipu(work, run, system_spec("mk2", 1))
    with pytest.raises(OutOfMemoryError) as error:
        check_fits(memory, work.stages)
    write_out_of_memory_report(tmp_path / "big", error.value)
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "profile.json").write_text("{not json")
    (tmp_path / "odd").mkdir()  # an ipusim profile whose figures are not numbers
    (tmp_path / "odd" / "profile.json").write_text(json.dumps(
        {"format": "ipusim-profile", "figures": {"throughput(items/s)": "fast", "ipus": None},
         "verdict": ["compute"]}))
    entries = {str(entry.path): entry for entry in index_entries(tmp_path)}
    assert entries["big"].verdict_kind == "out_of_memory"
    assert entries["big"].throughput is None
    assert str(error.value).splitlines()[0] == entries["big"].verdict_headline
    assert entries["broken"].verdict_kind == "unreadable"
    assert "not JSON" in entries["broken"].verdict_headline
    listed = rows(render_index(tmp_path))
    assert listed["big/report.html"][1:4] == ["—", "—", "—"]
    assert listed["broken/profile.json"][4].startswith("unreadable")
    assert listed["odd/profile.json"][1:] == ["—", "—", "—", ""]


def test_an_empty_folder_says_so_and_a_missing_one_is_an_error(tmp_path):
    assert "No reports here yet" in render_index(tmp_path)
    assert "0 reports" in render_index(tmp_path)
    with pytest.raises(FileNotFoundError, match="No folder .*nowhere to index"):
        index_entries(tmp_path / "nowhere")


def test_the_page_is_text_and_tables_without_plotly(folder):
    page = render_index(folder)
    assert "plotly" not in page.lower() and "render-check" not in page
    assert "<title>ipusim report — index of" in page


def test_ipusim_report_index_writes_the_page_into_the_folder(folder, capsys):
    assert main(["report", "--index", str(folder)]) == 0
    assert capsys.readouterr().out.strip() == str(folder / INDEX)
    assert set(rows((folder / INDEX).read_text())) == {
        "pipelined/training/report.html", "replicated/inference/summary.txt"}
    with pytest.raises(SystemExit) as refused:
        main(["report", "--index", str(folder), "--output", "elsewhere.html"])
    assert refused.value.code == 1
    assert "leave out --output (elsewhere.html)" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["report", "--index", str(folder / "nowhere")])
    assert "No folder" in capsys.readouterr().err


@pytest.mark.parametrize("options", [["--full-detail"], ["--max-events-per-lane", "5"],
                                     ["--window", "0", "1"]])
def test_ipusim_report_index_refuses_the_timelines_options(folder, capsys, options):
    """The index draws no timeline: an option about one is named, not silently ignored."""
    (folder / INDEX).unlink(missing_ok=True)
    with pytest.raises(SystemExit) as refused:
        main(["report", "--index", str(folder), *options])
    assert refused.value.code == 1
    err = capsys.readouterr().err
    assert f"{options[0]} would change nothing" in err and "no timeline" in err
    assert not (folder / INDEX).exists()


def test_a_report_folder_indexed_itself_is_listed_by_a_link_with_a_name(tmp_path,
                                                                         pipeline_timeline):
    write_autoreport(tmp_path / "training", pipeline_timeline)
    page = render_index(tmp_path / "training")
    assert set(rows(page)) == {"report.html"}
    assert '<a href="report.html">report.html</a>' in page


@pytest.mark.parametrize("value", ["NaN", "Infinity"])
def test_a_figure_that_is_not_finite_lists_its_profile_as_unreadable(tmp_path, folder, value,
                                                                     capsys):
    shutil.copytree(folder / "pipelined", tmp_path / "good")
    damaged = tmp_path / "bad" / "training"
    shutil.copytree(folder / "pipelined" / "training", damaged)
    text = (damaged / "profile.json").read_text()
    (damaged / "profile.json").write_text(re.sub(r'"ipus": [\d.]+', f'"ipus": {value}', text))
    assert main(["report", "--index", str(tmp_path)]) == 0
    listed = rows((tmp_path / INDEX).read_text())
    assert listed["good/training/report.html"][3] == "4"
    assert listed["bad/training/report.html"][4] == (
        f"unreadable{damaged / 'profile.json'} is damaged: figures.ipus is "
        f"{float(value)}")


def test_a_link_to_a_model_named_with_hash_or_question_mark_leads_to_it(tmp_path,
                                                                       pipeline_timeline):
    write_autoreport(tmp_path / "v1#2?x" / "training", pipeline_timeline)
    (link,) = rows(render_index(tmp_path))
    assert link == "v1%232%3Fx/training/report.html"
    assert (tmp_path / unquote(link)).is_file()
