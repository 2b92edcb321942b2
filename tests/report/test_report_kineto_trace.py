"""The PyTorch profiler (Kineto) traces, one per IPU: what HolisticTraceAnalysis needs, and
its temporal breakdown against ipusim's own shares."""
import json
from collections import Counter

import pytest

from ipusim.cli import main
from ipusim.engine.event_kinds import COMPUTE_KINDS
from ipusim.report import write_autoreport
from ipusim.report.detail import Detail
from ipusim.report.kineto_trace import LEFT_OUT, kineto_traces, write_kineto_traces

from report_timelines import operator_run, pipeline_run


def kernels(trace: dict) -> list[dict]:
    """The GPU-side slices: those on a stream."""
    return [e for e in trace["traceEvents"] if e["ph"] == "X" and "stream" in e.get("args", {})]


def test_a_file_per_ipu_names_its_rank_and_holds_its_events(tmp_path, replicated_timeline):
    paths = write_kineto_traces(replicated_timeline, tmp_path)
    events = replicated_timeline.events
    assert [p.name for p in paths] == [f"rank-{k}.json" for k in range(4)]
    for rank, path in enumerate(paths):
        text = path.read_text()
        assert f'"rank": {rank},' in text  # how HTA finds a file's rank
        trace = json.loads(text)
        assert trace["distributedInfo"] == {"backend": "ipusim", "rank": rank, "world_size": 4}
        assert trace["deviceProperties"][0]["id"] == rank
        mine = events[(events["ipu"] == rank) & ~events["kind"].isin(LEFT_OUT)]
        on_streams = kernels(trace)
        assert len(on_streams) == len(mine)  # no operators in a hand-written cost
        assert {e["args"]["device"] for e in on_streams} == {rank}
        for e in on_streams:
            assert type(e["ts"]) is int and type(e["dur"]) is int and e["dur"] >= 0
        assert Counter(e["cat"] for e in on_streams) == Counter(
            {"kernel": int(mine["kind"].isin(COMPUTE_KINDS + ("all_reduce",)).sum()),
             "gpu_memcpy": int(mine["kind"].isin(("host_to_device", "device_to_host",
                                                  "host_link_wait")).sum()),
             "cuda_sync": int(mine["kind"].isin(("sync_wait", "host_call")).sum())})
        calls = [e for e in trace["traceEvents"] if e.get("cat") == "user_annotation"]
        assert [e["args"]["step"] for e in calls] == [0, 1, 2]
        assert not any("ProfilerStep" in e["name"] for e in trace["traceEvents"])
    correlations = [e["args"]["correlation"] for p in paths for e in kernels(json.loads(
        p.read_text()))]
    assert len(set(correlations)) == len(correlations) and min(correlations) > 0


def test_end_to_end_events_stay_so_in_whole_microseconds(pipeline_timeline):
    """Each end rounded to the nearest µs: an event's end is its successor's start."""
    events = pipeline_timeline.events
    for rank, trace in kineto_traces(pipeline_timeline).items():
        compute = sorted((e for e in kernels(trace) if e["args"]["stream"] == 1),
                         key=lambda e: e["ts"])
        rows = events[(events["ipu"] == rank) & events["kind"].isin(COMPUTE_KINDS)]
        assert len(compute) == len(rows)
        assert sum(e["dur"] for e in compute) == pytest.approx(
            (rows["end_ps"] - rows["start_ps"]).sum() / 1e6, abs=len(rows))
        for e, start in zip(compute, sorted(rows["start_ps"])):
            assert e["ts"] == (start + 500_000) // 10**6


def test_operators_are_the_kernels_when_they_all_fit():
    timeline = operator_run()
    names = Counter(e["name"] for trace in kineto_traces(timeline).values()
                    for e in kernels(trace) if e["cat"] == "kernel")
    assert {"aten::addmm", "aten::relu", "aten::mm"} <= set(names)
    capped = Counter(e["name"] for trace in kineto_traces(
        timeline, Detail(operators_up_to=10)).values() for e in kernels(trace)
        if e["cat"] == "kernel")
    assert set(capped) == {"forward", "backward", "weight update"}  # one per pass instead


def test_rank_files_of_a_larger_system_are_removed(tmp_path, pipeline_timeline):
    (tmp_path / "rank-9.json").write_text("{}")
    (tmp_path / "notes.json").write_text("{}")
    write_kineto_traces(pipeline_timeline, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "notes.json", "rank-0.json", "rank-1.json", "rank-2.json", "rank-3.json"]


def test_ipusim_trace_writes_them_with_hta(tmp_path, pipeline_timeline, capsys):
    profile = write_autoreport(tmp_path / "training", pipeline_timeline)
    assert main(["trace", str(profile), "--hta", str(tmp_path / "hta")]) == 0
    assert "(4 rank files)" in capsys.readouterr().out
    assert sorted(p.name for p in (tmp_path / "hta").iterdir()) == [
        f"rank-{k}.json" for k in range(4)]


def test_ipusim_trace_hta_into_a_file_says_a_folder_is_needed(tmp_path, pipeline_timeline,
                                                              capsys):
    profile = write_autoreport(tmp_path / "training", pipeline_timeline)
    taken = tmp_path / "hta.json"
    taken.write_text("{}")
    with pytest.raises(SystemExit) as refused:
        main(["trace", str(profile), "--hta", str(taken), "-o", str(tmp_path / "t.json")])
    assert refused.value.code == 1
    err = capsys.readouterr().err
    assert "--hta needs a folder" in err and f"{taken} is a file" in err
    assert taken.read_text() == "{}" and not (tmp_path / "t.json").exists()


@pytest.mark.parametrize("timeline", [
    pytest.param(lambda: pipeline_run(micro_batches=8, recompute=True), id="pipelined"),
    pytest.param(lambda: operator_run(), id="operators")])
def test_holistic_trace_analysis_finds_ipusim_s_idle_and_compute_shares(tmp_path, timeline):
    """HTA's temporal breakdown of the files, per rank, is ipusim's category_times to
    within a percentage point."""
    from hta.trace_analysis import TraceAnalysis  # the test extra's HolisticTraceAnalysis
    timeline = timeline()
    write_kineto_traces(timeline, tmp_path)
    breakdown = TraceAnalysis(trace_dir=str(tmp_path)).get_temporal_breakdown(
        visualize=False).set_index("rank").sort_index()
    shares = timeline.category_times()
    assert breakdown.index.tolist() == list(range(timeline.num_ipus))
    assert breakdown["idle_time_pctg"].to_numpy() == pytest.approx(
        100 * shares["idle"].to_numpy(), abs=1.0)
    assert breakdown["compute_time_pctg"].to_numpy() == pytest.approx(
        100 * shares["compute"].to_numpy(), abs=1.0)
    assert breakdown["kernel_time(us)"].to_numpy() == pytest.approx(
        timeline.duration_ps / 1e6, abs=1.0)
