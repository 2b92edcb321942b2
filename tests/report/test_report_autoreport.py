"""autoReport directories: what they hold, the round trip, the engine-option mapping."""
import json

import pandas as pd
import pytest

from ipusim import (
    Cost,
    Execution,
    Kernel,
    KernelKind,
    Offload,
    RunConfig,
    Stage,
    SyncPattern,
    system_spec,
)
from ipusim.analysis.codec import decode, encode
from ipusim.cost.work import Work
from ipusim.plan.memory import MemoryModel, memory_per_ipu
from ipusim.report import (
    OUTPUT_FILES,
    load_autoreport,
    load_profile,
    outputs_from_engine_options,
    text_summary,
    write_autoreport,
)

from report_timelines import pipeline_run

ALL = set(OUTPUT_FILES)
GRAPH = {"profile.json", "summary.txt"}


@pytest.fixture(scope="module")
def written(tmp_path_factory, pipeline_timeline):
    directory = tmp_path_factory.mktemp("profiles") / "training"
    options = {"autoReport.all": "true", "deviceIterations": 1}
    return write_autoreport(directory, pipeline_timeline, options=options,
                            loader_items_per_s=1e6), pipeline_timeline


def test_writes_the_five_files_named_for_what_they_hold(written):
    directory, _ = written
    assert {p.name for p in directory.iterdir()} == ALL
    assert not {"profile.pop", "debug.cbor", "archive.a"} & {p.name for p in directory.iterdir()}


def test_profile_holds_memory_cycles_figures_and_verdict(written):
    directory, timeline = written
    profile = json.loads((directory / "profile.json").read_text(),
                         parse_constant=lambda name: pytest.fail(f"{name} in profile.json"))
    assert profile["format"] == "ipusim-profile" and profile["steps"] == 1
    assert profile["options"] == {"autoReport.all": "true", "deviceIterations": 1}
    assert profile["system"]["ipu"]["name"] == "Mk2 GC200"
    assert profile["run"]["execution"] == "pipelined"
    assert [s["name"] for s in profile["work"]["stages"]] == [f"block{k}" for k in range(4)]
    table = memory_per_ipu(timeline.work, timeline.run, timeline.system)
    assert [row["total"] for row in profile["memory"]["per_ipu"]] == pytest.approx(table["total"])
    assert profile["memory"]["fits"] is True
    clock = timeline.system.ipu.clock_hz
    (step,) = profile["execution"]["steps"]
    assert step["cycles"] == round(timeline.duration_ps * clock / 1e12)
    assert profile["execution"]["total_cycles"] == step["cycles"]
    events = timeline.events
    forward = (events["end_ps"] - events["start_ps"])[events["kind"] == "forward"].sum()
    assert step["forward_cycles"] == round(forward / timeline.num_ipus * clock / 1e12)
    assert profile["figures"]["throughput(items/s)"] == pytest.approx(timeline.throughput())
    assert profile["verdict"]["kind"] == "pipeline_bubble"
    assert profile["loader_items_per_s"] == 1e6


def test_memory_per_stage_adds_up_to_memory_per_ipu(written):
    directory, timeline = written
    profile = load_profile(directory)
    per_tile = MemoryModel().code_bytes_per_tile * timeline.system.ipu.tiles
    for row in profile["memory"]["per_ipu"]:
        stages = [s for s in profile["memory"]["per_stage"] if s["ipu"] == row["ipu"]]
        assert sum(s["total"] for s in stages) + per_tile == pytest.approx(row["total"])


def test_round_trip_gives_the_same_timeline(written):
    directory, timeline = written
    loaded = load_autoreport(directory)
    pd.testing.assert_frame_equal(loaded.events, timeline.events)
    assert loaded.work == timeline.work and loaded.run == timeline.run
    assert loaded.system == timeline.system
    assert (loaded.steps, loaded.instance) == (timeline.steps, timeline.instance)
    assert loaded.summary() == timeline.summary()
    options = load_profile(directory)["options"]
    assert text_summary(loaded, 1e6, options) == (directory / "summary.txt").read_text()


def test_summary_reads_like_a_profile_summary(written):
    directory, _ = written
    text = (directory / "summary.txt").read_text()
    for heading in ("Target:", "Engine:", "Memory usage per IPU", "Memory per stage",
                    "Execution (cycles at 1.33 GHz)", "Program steps", "Figures:",
                    "Bottleneck: pipeline_bubble"):
        assert heading in text
    assert "autoReport.all = true" in text


def test_outputs_select_the_files(tmp_path, pipeline_timeline):
    directory = write_autoreport(tmp_path / "graph", pipeline_timeline, outputs=GRAPH)
    assert {p.name for p in directory.iterdir()} == GRAPH
    with pytest.raises(FileNotFoundError, match="autoReport.outputExecutionProfile"):
        load_autoreport(directory)
    with pytest.raises(ValueError, match=r"Unknown autoReport output\(s\) \['profile.pop'\]"):
        write_autoreport(tmp_path / "bad", pipeline_timeline, outputs={"profile.pop"})
    with pytest.raises(FileNotFoundError, match="No profile.json"):
        load_autoreport(tmp_path)


@pytest.mark.parametrize("options, expected", [
    ({}, set()),
    ({"autoReport.directory": "."}, set()),
    ({"autoReport.all": "true"}, ALL),
    ({"autoReport.all": "TRUE", "autoReport.directory": "/tmp/x"}, ALL),
    ({"autoReport.all": "true", "autoReport.outputExecutionProfile": "false"}, GRAPH),
    ({"autoReport.all": "false", "autoReport.outputGraphProfile": "true"}, GRAPH),
    ({"autoReport.outputExecutionProfile": "true"}, ALL),
    ({"autoReport.outputDebugInfo": "true", "autoReport.outputArchive": "true"}, set()),
    ({"autoReport.all": True}, ALL),
])
def test_outputs_from_engine_options(options, expected):
    assert outputs_from_engine_options(options) == expected


def test_engine_option_values_must_be_true_or_false():
    with pytest.raises(ValueError, match=r'autoReport.outputGraphProfile must be "true" or '
                                         r"\"false\", got 'yes'"):
        outputs_from_engine_options({"autoReport.outputGraphProfile": "yes"})


def test_configs_survive_json():
    run = RunConfig(training=False, replicas=2, device_iterations=3,
                    execution=Execution.PIPELINED, sync_pattern=SyncPattern.REPLICA_AND_LADDER,
                    offload=Offload(weights=True), output_period=2)
    matmul = Kernel(KernelKind.MATMUL, 2, m=8, k=16, n=32, groups=2)
    measured = Cost(1e9, 2e6, 3, kernels=((matmul, 4), (Kernel("normalise", 4, elements=9), 1)))
    work = Work((Stage("a", 0, Cost(1e9, 2e6, 3, 4), recompute=Cost(5.0)),
                 Stage("b", 1, measured, update=Cost(ops=2), weight_bytes=7,
                       checkpoint_bytes=5, segment_stash_bytes=6)), 3, 11, 13)
    spec = system_spec("bow", 8, host_link_bandwidth=5e9)
    for kind, value in ((RunConfig, run), (Work, work), (type(spec), spec)):
        assert decode(kind, json.loads(json.dumps(encode(value)))) == value


def test_a_replicated_pipeline_round_trips(tmp_path):
    timeline = pipeline_run(micro_batches=7, replicas=2, recompute=True)
    loaded = load_autoreport(write_autoreport(tmp_path / "model", timeline,
                                              outputs={"profile.json", "events.csv.gz"}))
    pd.testing.assert_frame_equal(loaded.events, timeline.events)
    assert loaded.summary() == timeline.summary()
