"""The Chrome trace: the structure Perfetto's JSON importer needs, and what it says."""
import json
from collections import Counter, defaultdict

import pytest

from ipusim.engine.recorder import COMPUTE_KINDS
from ipusim.report import chrome_trace, write_chrome_trace
from ipusim.report.chrome_trace import HOST_PID, ipu_pid

from report_timelines import pipeline_run

REQUIRED = {
    "X": {"name", "ph", "ts", "dur", "pid", "tid"},
    "M": {"name", "ph", "pid", "tid", "args"},
    "s": {"name", "cat", "ph", "id", "ts", "pid", "tid"},
    "f": {"name", "cat", "ph", "id", "ts", "pid", "tid", "bp"},
}
METADATA = {"process_name": "name", "thread_name": "name",
            "process_sort_index": "sort_index", "thread_sort_index": "sort_index"}


@pytest.fixture(scope="module", params=["pipelined", "replicated"])
def timeline(request):
    """A replicated pipeline with recomputation, and replicated single-IPU models."""
    if request.param == "pipelined":
        return pipeline_run(micro_batches=8, replicas=2, recompute=True)
    return request.getfixturevalue("replicated_timeline")


def check_structure(trace: dict) -> None:
    """What Perfetto's JSON importer relies on."""
    assert set(trace) >= {"traceEvents", "displayTimeUnit"}
    assert trace["displayTimeUnit"] in ("ns", "ms")
    named_processes, named_threads, used = set(), set(), set()
    for event in trace["traceEvents"]:
        ph = event["ph"]
        assert REQUIRED[ph] <= set(event), event
        assert type(event["pid"]) is int and type(event["tid"]) is int
        if ph == "M":
            assert event["name"] in METADATA
            assert METADATA[event["name"]] in event["args"]
            if event["name"] == "process_name":
                named_processes.add(event["pid"])
            elif event["name"] == "thread_name":
                named_threads.add((event["pid"], event["tid"]))
            continue
        assert isinstance(event["ts"], float) and event["ts"] >= 0
        if ph == "X":
            assert isinstance(event["dur"], float) and event["dur"] >= 0
        used.add((event["pid"], event["tid"]))
    assert {pid for pid, _ in used} <= named_processes
    assert used <= named_threads


def test_structure_for_perfetto(timeline):
    trace = chrome_trace(timeline)
    check_structure(trace)
    json.dumps(trace, allow_nan=False)


def test_one_complete_event_per_simulated_event(timeline):
    trace = chrome_trace(timeline)
    on_ipus = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["pid"] != HOST_PID]
    assert len(on_ipus) == len(timeline.events)
    assert Counter(e["cat"] for e in on_ipus) == Counter(timeline.events["kind"].astype(str))
    compute = [e for e in on_ipus if e["cat"] in COMPUTE_KINDS]
    assert {e["tid"] for e in compute} == {1}
    first = timeline.events.iloc[0]
    x = next(e for e in on_ipus if e["ts"] == first["start_ps"] / 1e6
             and e["pid"] == ipu_pid(first["ipu"]))
    assert x["dur"] == pytest.approx((first["end_ps"] - first["start_ps"]) / 1e6)
    assert set(x["args"]) >= {"stage", "micro_batch", "step", "bytes", "flops", "replica"}


def test_slices_on_a_thread_never_overlap(timeline):
    """Perfetto needs the slices of a thread properly nested; ours follow each other."""
    by_thread = defaultdict(list)
    for e in chrome_trace(timeline)["traceEvents"]:
        if e["ph"] == "X":
            by_thread[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    for thread, slices in by_thread.items():
        slices.sort()
        for (_, end), (start, _) in zip(slices, slices[1:]):
            assert start >= end - 1e-6, thread


def test_flows_link_a_forward_to_the_next_stage_on_another_ipu():
    timeline = pipeline_run(micro_batches=8)
    events = chrome_trace(timeline)["traceEvents"]
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    finishes = {e["id"]: e for e in events if e["ph"] == "f"}
    assert starts.keys() == finishes.keys()
    assert Counter(e["ph"] for e in events if e["ph"] in "sf") == {"s": 48, "f": 48}
    slices = [e for e in events if e["ph"] == "X"]

    def enclosing(point):
        return [e for e in slices if (e["pid"], e["tid"]) == (point["pid"], point["tid"])
                and e["ts"] <= point["ts"] <= e["ts"] + e["dur"]]

    activations = 0
    for flow_id, start in starts.items():
        finish = finishes[flow_id]
        assert finish["bp"] == "e" and start["name"] == finish["name"]
        assert start["pid"] != finish["pid"] and start["ts"] <= finish["ts"]
        (source,), (target,) = enclosing(start), enclosing(finish)
        assert source["args"]["micro_batch"] == target["args"]["micro_batch"]
        if start["name"] == "activation":
            activations += 1
            assert source["cat"] == target["cat"] == "forward"
            assert target["args"]["stage"] == source["args"]["stage"] + 1
        else:
            assert source["cat"] == target["cat"] == "backward"
            assert target["args"]["stage"] == source["args"]["stage"] - 1
    assert activations == 8 * 3  # 8 micro-batches over 3 stage boundaries


def test_host_process_shows_steps_and_host_links(replicated_timeline):
    events = chrome_trace(replicated_timeline)["traceEvents"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "thread_name"}
    steps = [e for e in events if e["ph"] == "X" and e["cat"] == "step"]
    assert [e["name"] for e in steps] == ["step 0", "step 1", "step 2"]
    assert names[(HOST_PID, steps[0]["tid"])].startswith("calls")
    copies = [e for e in events if e["ph"] == "X" and e["pid"] == HOST_PID
              and e["cat"] == "host_to_device"]
    kinds = replicated_timeline.events["kind"]
    assert len(copies) == (kinds == "host_to_device").sum()
    assert {names[(HOST_PID, e["tid"])] for e in copies} == {"host link 0: host → device"}


def test_written_file_is_the_same_json(tmp_path, pipeline_timeline):
    path = write_chrome_trace(pipeline_timeline, tmp_path / "deep" / "trace.json")
    assert json.loads(path.read_text()) == json.loads(json.dumps(chrome_trace(pipeline_timeline)))
