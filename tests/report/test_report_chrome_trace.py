"""The Chrome trace: the structure Perfetto's JSON importer needs, and what it says."""
import json
from collections import Counter, defaultdict
from numbers import Number

import pytest
from support.intervals import covered_ps

from ipusim.cli import main
from ipusim.engine.recorder import COMPUTE_KINDS
from ipusim.report import chrome_trace, write_autoreport, write_chrome_trace
from ipusim.report.chrome_trace import (
    HOST_PID,
    SLICE_NAMES,
    HostSlice,
    add_host_slices,
    host_slices_in,
    ipu_pid,
)
from ipusim.report.detail import Detail

from report_timelines import operator_run, pipeline_run

REQUIRED = {
    "X": {"name", "ph", "ts", "dur", "pid", "tid"},
    "M": {"name", "ph", "pid", "tid", "args"},
    "s": {"name", "cat", "ph", "id", "ts", "pid", "tid"},
    "f": {"name", "cat", "ph", "id", "ts", "pid", "tid", "bp"},
    "C": {"name", "ph", "ts", "pid", "args"},
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
        assert isinstance(event["name"], str) and event["name"]
        assert type(event["pid"]) is int
        if ph == "C":  # a counter: numbers only, on a named process
            assert event["args"] and all(isinstance(v, Number) and not isinstance(v, bool)
                                         for v in event["args"].values()), event
            assert isinstance(event["ts"], float) and event["ts"] >= 0
            used.add((event["pid"], None))
            continue
        assert type(event["tid"]) is int
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
    assert {(pid, tid) for pid, tid in used if tid is not None} <= named_threads


def test_structure_for_perfetto(timeline):
    trace = chrome_trace(timeline)
    check_structure(trace)
    json.dumps(trace, allow_nan=False)


def simulated(trace: dict) -> list[dict]:
    """The slices of the simulated events on the IPUs (not their operators)."""
    return [e for e in trace["traceEvents"] if e["ph"] == "X" and e["pid"] != HOST_PID
            and e["cat"] != "operator"]


def test_one_complete_event_per_simulated_event(timeline):
    trace = chrome_trace(timeline)
    on_ipus = simulated(trace)
    assert len(on_ipus) == len(timeline.events)
    assert Counter(e["cat"] for e in on_ipus) == Counter(timeline.events["kind"].astype(str))
    compute = [e for e in on_ipus if e["cat"] in COMPUTE_KINDS]
    assert {e["tid"] for e in compute} == {1}
    first = timeline.events.iloc[0]
    x = next(e for e in on_ipus if e["ts"] == pytest.approx(first["start_ps"] / 1e6, abs=5e-4)
             and e["pid"] == ipu_pid(first["ipu"]))
    assert x["dur"] == pytest.approx((first["end_ps"] - first["start_ps"]) / 1e6)
    assert x["name"] == SLICE_NAMES[first["kind"]] and x["cat"] == first["kind"]


def test_slices_are_named_for_their_kind_and_say_the_rest_in_args(timeline):
    """A name per kind of event ("forward", "ipu copy"...), never one per micro-batch; the
    micro-batch, stage, bytes and FLOPs in args, only where they apply."""
    events = timeline.events.reset_index(drop=True)
    on_ipus = sorted(simulated(chrome_trace(timeline)), key=lambda e: (e["ts"], e["pid"]))
    assert {e["name"] for e in on_ipus} == {SLICE_NAMES[k] for k in events["kind"].astype(str)}
    assert {"forward", "backward", "weight update", "sync wait"} <= {e["name"] for e in on_ipus}
    rows = events.sort_values(["start_ps", "ipu"], kind="stable").itertuples()
    stages = [stage.name for stage in timeline.plan.stages]
    for slice_, row in zip(on_ipus, rows):
        args = slice_["args"]
        assert (args["step"], args["replica"]) == (row.step, row.replica)
        assert args.get("micro_batch", -1) == row.micro_batch
        assert args.get("pipeline_cycle", -1) == row.pipeline_cycle
        assert args.get("stage_index", -1) == row.stage
        if row.stage >= 0:
            assert args["stage"] == stages[row.stage]
        assert args.get("bytes", 0) == row.bytes and args.get("flops", 0) == row.flops
        assert all(not isinstance(v, Number) or v >= 0 for v in args.values()), args
    updates = [e for e in on_ipus if e["cat"] == "weight_update"]
    assert updates and all("micro_batch" not in e["args"] for e in updates)


def test_a_long_pipeline_has_a_handful_of_slice_names():
    """4 stages x 32 micro-batches: the names of the kinds, not 76 names."""
    trace = chrome_trace(pipeline_run(micro_batches=32))
    names = {e["name"] for e in trace["traceEvents"] if e["ph"] == "X"}
    assert names <= set(SLICE_NAMES.values()) | {"step"} and len(names) <= len(SLICE_NAMES)


def test_slices_on_a_thread_nest(timeline):
    """Perfetto needs the slices of a thread properly nested: one follows another, or
    lies wholly inside it (an operator in its pass)."""
    by_thread = defaultdict(list)
    for e in chrome_trace(timeline)["traceEvents"]:
        if e["ph"] == "X":
            by_thread[(e["pid"], e["tid"])].append((e["ts"], -e["dur"]))
    for thread, slices in by_thread.items():
        open_ends = []
        for start, minus_dur in sorted(slices):
            while open_ends and open_ends[-1] <= start + 1e-6:
                open_ends.pop()
            end = start - minus_dur
            assert not open_ends or end <= open_ends[-1] + 1e-6, thread
            open_ends.append(end)


def test_flows_link_a_forward_to_the_next_stage_on_another_ipu():
    timeline = pipeline_run(micro_batches=8)
    events = chrome_trace(timeline)["traceEvents"]
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    finishes = {e["id"]: e for e in events if e["ph"] == "f"}
    assert starts.keys() == finishes.keys()
    assert Counter(e["ph"] for e in events if e["ph"] in "sf") == {"s": 48, "f": 48}
    slices = [e for e in events if e["ph"] == "X" and e["cat"] != "operator"]

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
            assert target["args"]["stage_index"] == source["args"]["stage_index"] + 1
        else:
            assert source["cat"] == target["cat"] == "backward"
            assert target["args"]["stage_index"] == source["args"]["stage_index"] - 1
    assert activations == 8 * 3  # 8 micro-batches over 3 stage boundaries


def test_host_process_shows_steps_and_host_links(replicated_timeline):
    events = chrome_trace(replicated_timeline)["traceEvents"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "thread_name"}
    steps = [e for e in events if e["ph"] == "X" and e["cat"] == "step"]
    assert [(e["name"], e["args"]) for e in steps] == [("step", {"step": k}) for k in range(3)]
    assert names[(HOST_PID, steps[0]["tid"])].startswith("calls")
    copies = [e for e in events if e["ph"] == "X" and e["pid"] == HOST_PID
              and e["cat"] == "host_to_device"]
    kinds = replicated_timeline.events["kind"]
    assert len(copies) == (kinds == "host_to_device").sum()
    # A thread per IPU under its link: the four replicas' copies overlap on host link 0.
    assert all(names[(HOST_PID, e["tid"])] == f"host link 0: host → device, IPU {e['args']['ipu']}"
               for e in copies)
    assert {e["args"]["ipu"] for e in copies} == {0, 1, 2, 3}
    assert {e["name"] for e in copies} == {"host to device"}
    assert all({"ipu", "replica", "step", "bytes"} <= set(e["args"]) for e in copies)


def test_written_file_is_the_same_json(tmp_path, pipeline_timeline):
    path = write_chrome_trace(pipeline_timeline, tmp_path / "deep" / "trace.json")
    assert json.loads(path.read_text()) == json.loads(json.dumps(chrome_trace(pipeline_timeline)))


@pytest.fixture(scope="module")
def with_operators():
    return operator_run()


def test_operators_lie_end_to_end_inside_their_pass_in_proportion_to_their_cycles(
        with_operators):
    trace = chrome_trace(with_operators)
    check_structure(trace)
    operators = [e for e in trace["traceEvents"] if e.get("cat") == "operator"]
    table = with_operators.operator_breakdown()
    passes = [e for e in simulated(trace) if e["cat"] in COMPUTE_KINDS]
    # The optimizer's operators (PopTorch's default SGD, and with gradient accumulation
    # the accumulators' add in each backward) are named for what PopART runs.
    assert {e["name"] for e in operators} == {"aten::addmm", "aten::relu", "aten::mm",
                                              "SGD0 weight decay scale", "negate learning rate",
                                              "SGD0 weight update", "zero accumulator",
                                              "accumulate gradient"}
    assert len(operators) == sum(
        len(table[(table["stage"] == e["args"]["stage"]) & (table["pass"] == e["cat"])])
        for e in passes)
    for parent in passes:
        inside = sorted((e for e in operators if (e["pid"], e["tid"]) ==
                         (parent["pid"], parent["tid"]) and parent["ts"] <= e["ts"]
                         < parent["ts"] + parent["dur"] - 1e-6), key=lambda e: e["ts"])
        rows = table[(table["stage"] == parent["args"]["stage"])
                     & (table["pass"] == parent["cat"])]
        assert [e["name"] for e in inside] == rows["op"].where(rows["op"] != "",
                                                               rows["kind"]).tolist()
        assert inside[0]["ts"] == parent["ts"]
        for before, after in zip(inside, inside[1:]):
            assert after["ts"] == pytest.approx(before["ts"] + before["dur"], abs=1e-6)
        assert inside[-1]["ts"] + inside[-1]["dur"] == pytest.approx(
            parent["ts"] + parent["dur"], abs=1e-6)
        # As Perfetto reads them (whole ns): the children tile the parent exactly.
        def ns(e):
            return round(e["ts"] * 1000), round(e["ts"] * 1000) + round(e["dur"] * 1000)
        assert ns(inside[0])[0] == ns(parent)[0] and ns(inside[-1])[1] == ns(parent)[1]
        assert all(ns(a)[1] == ns(b)[0] for a, b in zip(inside, inside[1:]))
        shares = [e["dur"] / parent["dur"] for e in inside]
        cycles = rows["total_cycles"] / rows["total_cycles"].sum()
        # Within the whole nanosecond each piece is placed on.
        assert shares == pytest.approx(cycles.tolist(), abs=max(1e-4, 1e-3 / parent["dur"]))
        assert [e["args"]["count"] for e in inside] == rows["count"].tolist()


def test_operators_only_inside_the_passes_shown_and_within_their_budget(with_operators):
    full = chrome_trace(with_operators)["otherData"]
    table = with_operators.operator_breakdown()
    kinds = with_operators.events["kind"].astype(str)
    # Each forward lists two operators, each backward three (two and the accumulators'
    # add), each weight update four (SGD's two, the learning rate's negation and the
    # accumulators' zeroing).
    assert full["operator_slices"] == sum((kinds == kind).sum() * (table["pass"] == kind).sum()
                                          / 2 for kind in ("forward", "backward",
                                                           "weight_update")) == 136
    assert full["compute_slices_with_operators"] == full["compute_slices"] == 52
    edges = chrome_trace(with_operators, Detail(full_up_to=0, edge=1, edge_steps=1))
    shown_passes = {(e["pid"], e["ts"]) for e in simulated(edges)
                    if e["cat"] in ("forward", "backward")}
    operators = [e for e in edges["traceEvents"] if e.get("cat") == "operator"]
    assert 0 < len(operators) < full["operator_slices"]
    assert all(any(pid == e["pid"] and ts <= e["ts"] for pid, ts in shown_passes)
               for e in operators)
    capped = chrome_trace(with_operators, Detail(full=True, operators_up_to=10))["otherData"]
    # Whole passes' operators up to the cap: one more pass (at most 3) would pass it.
    assert 10 - 3 < capped["operator_slices"] <= 10
    assert 3 <= capped["compute_slices_with_operators"] < full["compute_slices"]


def counters(trace: dict, name: str) -> dict[int, list[dict]]:
    by_pid = defaultdict(list)
    for e in trace["traceEvents"]:
        if e["ph"] == "C" and e["name"] == name:
            by_pid[e["pid"]].append(e)
    return by_pid


def time_average(samples: list[dict], key: str) -> float:
    """The mean over time of a counter (each sample holding until the next)."""
    samples = sorted(samples, key=lambda e: e["ts"])
    total = sum(a["args"][key] * (b["ts"] - a["ts"]) for a, b in zip(samples, samples[1:]))
    return total / (samples[-1]["ts"] - samples[0]["ts"])


def test_counters_give_memory_utilisation_and_host_link_occupancy(timeline):
    trace = chrome_trace(timeline)
    memory = timeline.memory_per_ipu()
    per_ipu = counters(trace, "memory (MB)")
    shares = counters(trace, "time by category (share)")
    times = timeline.category_times()
    assert set(per_ipu) == set(shares) == {ipu_pid(ipu) for ipu in range(timeline.num_ipus)}
    for ipu in range(timeline.num_ipus):
        row = memory.loc[ipu % timeline.plan.ipus_per_replica]
        for sample in per_ipu[ipu_pid(ipu)]:
            assert sum(sample["args"].values()) == pytest.approx(row["total"] / 1e6)
        for category in ("compute", "sync wait", "host I/O"):
            assert time_average(shares[ipu_pid(ipu)], category) == pytest.approx(
                times.loc[ipu, category], abs=1e-6)
    busy = counters(trace, "host link 0 busy share")[HOST_PID]
    events = timeline.events
    copies = events[(events["kind"] == "host_to_device")
                    & (timeline.system.host_link_of(events["ipu"]) == 0)]
    # busy while any of its IPUs' copies runs: they overlap, each on its own hop
    union = covered_ps(copies["start_ps"], copies["end_ps"])
    assert union <= (copies["end_ps"] - copies["start_ps"]).sum()
    assert time_average(busy, "host to device") == pytest.approx(
        union / timeline.duration_ps, abs=1e-6)
    rate = counters(trace, "host link 0 bandwidth (GB/s)")[HOST_PID]
    moved = time_average(rate, "host to device") * timeline.duration_ps / 1e3  # GB/s -> bytes
    assert moved == pytest.approx(copies["bytes"].sum(), rel=1e-4)  # times rounded to ns


def test_host_slices_get_a_thread_each_on_the_host(tmp_path, pipeline_timeline):
    slices = [HostSlice("tracepoints: Train", "Train.step", 0, 10**9, (("host (us)", 5.0),)),
              HostSlice("tracepoints: Data", "Data.load", 10**8, 2 * 10**8)]
    trace = chrome_trace(pipeline_timeline, host_slices=slices)
    check_structure(trace)
    names = {e["args"]["name"]: e["tid"] for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == HOST_PID}
    added = {e["name"]: e for e in trace["traceEvents"] if e.get("cat") == "host"}
    assert added["Train.step"]["tid"] == names["tracepoints: Train"] != names["calls to the "
                                                                              "model (steps)"]
    assert (added["Train.step"]["ts"], added["Train.step"]["dur"]) == (0.0, 1000.0)
    assert added["Train.step"]["args"] == {"host (us)": 5.0}
    path = write_chrome_trace(pipeline_timeline, tmp_path / "trace.json")
    add_host_slices(path, slices[:1])
    add_host_slices(path, slices[1:])  # later ones on threads of their own
    again = json.loads(path.read_text())
    check_structure(again)
    assert again["otherData"]["host_slices"] == 2
    assert len({e["tid"] for e in again["traceEvents"] if e.get("cat") == "host"}) == 2
    with pytest.raises(ValueError, match="start_ps and end_ps"):
        HostSlice("t", "x", 5, 4)


def test_ipusim_trace_writing_the_trace_again_keeps_the_run_s_tracepoints(tmp_path,
                                                                         pipeline_timeline):
    """The tracepoints a run added to trace.json are not in the profile: writing the trace
    again from it (another level of detail, another file) keeps them as they were."""
    directory = tmp_path / "training"
    write_autoreport(directory, pipeline_timeline)
    slices = [HostSlice("tracepoints: Train", "Train.step", 1234567, 10**9 + 500,
                        (("host (us)", 5.0),)),
              HostSlice("tracepoints: Data", "Data.load", 10**8, 10**8)]
    add_host_slices(directory / "trace.json", slices)

    def host(path):
        trace = json.loads(path.read_text())
        threads = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"]
                   if e["ph"] == "M" and e["name"] == "thread_name" and e["pid"] == HOST_PID}
        return sorted((threads[e["tid"]], e["name"], e["ts"], e["dur"], e["args"])
                      for e in trace["traceEvents"] if e.get("cat") == "host")

    before = host(directory / "trace.json")
    assert len(before) == 2 and host_slices_in(tmp_path / "nothing.json") == []
    assert main(["trace", str(directory), "--full-detail"]) == 0
    assert host(directory / "trace.json") == before
    assert main(["trace", str(directory), "-o", str(tmp_path / "other.json")]) == 0
    assert host(tmp_path / "other.json") == before
