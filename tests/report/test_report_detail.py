"""Level of detail: the trace shows the edges of a long run event by event and sums up the rest."""
import pytest

from ipusim import Cost, Execution, RunConfig, Stage, Work, simulate, system_spec
from ipusim.report.chrome_trace import chrome_trace
from ipusim.report.detail import DETAIL_ENV, Detail, aggregates, shown
from ipusim.report.html import render_html

EDGE = 4


@pytest.fixture(scope="module")
def long_run():
    """Five steps of 40 micro-batches through a 2-stage pipeline, 2 replicas."""
    work = Work(tuple(Stage(f"s{k}", k, Cost(flops=1e9, ops=10), Cost(flops=2e9, ops=20),
                            activation_bytes=10**5, weight_bytes=10**7) for k in range(2)),
                micro_batch_size=4, input_bytes_per_sample=3072, output_bytes_per_sample=4)
    run = RunConfig(replicas=2, gradient_accumulation=40, execution=Execution.PIPELINED,
                    output_period=1)
    return simulate(work, run, system_spec("mk2", 4, ipus_per_host_link=2), steps=5)


def slices(trace: dict, aggregated: bool) -> list[dict]:
    return [e for e in trace["traceEvents"] if e["ph"] == "X" and e["pid"] > 1
            and (e["cat"] == "aggregated") is aggregated]


def test_every_event_is_shown_or_counted_in_exactly_one_aggregate_box(long_run):
    events, detail = long_run.events, Detail(full_up_to=0, edge=EDGE)
    keep = shown(events, detail)
    boxes = aggregates(events, detail)
    assert 0 < keep.sum() < len(events) / 4
    assert boxes["events"].sum() == (~keep).sum()
    hidden = events[~keep]
    assert boxes["busy_ps"].sum() == (hidden["end_ps"] - hidden["start_ps"]).sum()
    trace = chrome_trace(long_run, detail)
    assert len(slices(trace, aggregated=False)) == keep.sum()
    assert sum(e["args"]["events"] for e in slices(trace, aggregated=True)) == (~keep).sum()
    assert all(e["name"] == "aggregated" for e in slices(trace, aggregated=True))
    assert trace["otherData"]["events_aggregated"] == (~keep).sum()


def test_the_first_and_last_micro_batches_of_the_edge_steps_are_shown(long_run):
    events = long_run.events
    keep = shown(events, Detail(full_up_to=0, edge=EDGE, edge_steps=2))
    compute = events["kind"].isin(["forward", "backward"])
    edge_mbs = (events["micro_batch"] < EDGE) | (events["micro_batch"] >= 40 - EDGE)
    outer_steps = events["step"].isin([0, 1, 3, 4])
    assert keep[(compute & edge_mbs & outer_steps).to_numpy()].all()
    assert not keep[(events["step"] == 2).to_numpy()].any()  # a middle step: aggregated whole
    # The host call and the weight update sit at the edges of a step.
    edges = events["kind"].isin(["host_call", "weight_update"]) & outer_steps
    assert keep[edges.to_numpy()].all()


def test_aggregate_boxes_do_not_overlap_the_compute_shown_on_their_ipu(long_run):
    detail = Detail(full_up_to=0, edge=EDGE)
    trace = chrome_trace(long_run, detail)
    boxes, shown_events = slices(trace, aggregated=True), slices(trace, aggregated=False)
    compared = 0
    for box in boxes:
        for event in shown_events:
            if (event["pid"], event["tid"]) == (box["pid"], box["tid"]):
                compared += 1
                assert (event["ts"] + event["dur"] <= box["ts"] + 1e-9
                        or event["ts"] >= box["ts"] + box["dur"] - 1e-9)
    assert boxes and compared > len(boxes)  # boxes sit among events shown on their lane


def test_a_chosen_window_is_shown_in_full(long_run):
    events = long_run.events
    step2 = events[events["step"] == 2]
    middle = int(step2["start_ps"].median())
    window = (middle, middle + 10**7)
    keep = shown(events, Detail(full_up_to=0, edge=EDGE, window_ps=window))
    inside = (events["start_ps"] < window[1]) & (events["end_ps"] > window[0])
    assert inside.any() and keep[inside.to_numpy()].all()
    boxes = aggregates(events, Detail(full_up_to=0, edge=EDGE, window_ps=window))
    ipu0 = boxes[(boxes["ipu"] == 0) & (boxes["lane"] == "compute") & (boxes["step"] == 2)]
    assert len(ipu0) == 2  # before and after the window
    assert ipu0["end_ps"].min() <= window[1] and ipu0["start_ps"].max() >= window[0]


def test_full_detail_shows_every_event(long_run, monkeypatch):
    trace = chrome_trace(long_run, Detail(full=True))
    assert len(slices(trace, aggregated=False)) == len(long_run.events)
    assert not slices(trace, aggregated=True)
    monkeypatch.setenv(DETAIL_ENV, "full")
    assert len(slices(chrome_trace(long_run), aggregated=False)) == len(long_run.events)


def test_the_html_timeline_draws_the_aggregates(long_run):
    assert '"name":"aggregated"' in render_html(long_run, detail=Detail(full_up_to=0, edge=EDGE))
    assert '"name":"aggregated"' not in render_html(long_run, detail=Detail(full=True))


@pytest.mark.parametrize("fields,message", [
    ({"edge": 0}, "Detail.edge must be a positive integer, got 0"),
    ({"edge_steps": -1}, "Detail.edge_steps must be a positive integer, got -1"),
    ({"window_ps": (5, 5)}, r"Detail.window_ps must be \(start, end\) with start < end"),
    ({"operators_up_to": -1}, "Detail.operators_up_to must be a non-negative integer, got -1"),
    ({"full_up_to": True}, "Detail.full_up_to must be a non-negative integer, got True"),
])
def test_bad_detail_is_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        Detail(**fields)


def test_replicas_beyond_the_detailed_ones_are_summarised_whole(long_run):
    events = long_run.events
    keep = shown(events, Detail(full_up_to=0, edge=EDGE, replicas=1))
    assert keep[(events["replica"] == 0).to_numpy()].any()
    assert not keep[(events["replica"] == 1).to_numpy()].any()
    boxes = aggregates(events, Detail(full_up_to=0, edge=EDGE, replicas=1))
    assert boxes.loc[boxes["replica"] == 1, "events"].sum() == (events["replica"] == 1).sum()


def test_the_command_line_asks_for_full_detail_or_a_window(long_run, tmp_path, capsys,
                                                            monkeypatch):
    import json

    from ipusim.cli import main
    from ipusim.report import write_autoreport

    profile = write_autoreport(tmp_path / "training", long_run, outputs={"profile.json",
                                                                         "events.csv.gz"})
    monkeypatch.setenv(DETAIL_ENV, "edges")  # a small run: aggregated only when asked
    counts = {}
    for name, extra in (("default", []), ("full", ["--full-detail"]),
                        ("window", ["--window", "0", "1e9"])):
        output = tmp_path / f"{name}.json"
        assert main(["trace", str(profile), "-o", str(output), *extra]) == 0
        trace = json.loads(output.read_text())
        counts[name] = trace["otherData"]["events_aggregated"]
    assert counts["default"] > 0 and counts["full"] == 0 and counts["window"] == 0
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(["trace", str(profile), "--window", "5", "2"])
    assert exit_info.value.code == 1
    assert "--window START_US END_US needs START_US < END_US, got 5.0 2.0" in \
        capsys.readouterr().err


def test_a_timeline_of_up_to_full_up_to_events_is_shown_in_full(long_run, monkeypatch):
    events = long_run.events
    assert shown(events, Detail(full_up_to=len(events))).all()
    assert not shown(events, Detail(full_up_to=len(events) - 1)).all()
    assert aggregates(events, Detail()).empty  # the default: a small run in full
    monkeypatch.setenv(DETAIL_ENV, "edges")
    assert not shown(events, Detail.from_environment()).all()
    monkeypatch.setenv(DETAIL_ENV, "some")
    with pytest.raises(ValueError, match="IPUSIM_TRACE_DETAIL must be 'full' or 'edges'"):
        Detail.from_environment()
