"""The reports name a run's settings by ipusim's names, or by the words a caller gives.

Plain ipusim (a hand-written run, a profile written without names) words the
settings as ``RunConfig``'s fields; through the shim's table the same verdict,
summary, HTML report, profile and sweep page read PopTorch's API.
"""
import json

import pandas as pd
import pytest

from ipusim import Execution, RunConfig, SettingNames, SyncPattern, Work, system_spec
from ipusim.cli import main as ipusim_main
from ipusim.explore.design_point import FIGURES
from ipusim.report import bottleneck, render_html, text_summary, write_autoreport
from ipusim.report.sweep import figures, render_sweep_html
from poptorch_shim._core.option_names import OTHER_WORDS, REPORT_NAMES

from report_timelines import pipeline_run, simulate, stages


def _inference_bubble():
    work = Work(stages(4, forward_us=2000), micro_batch_size=4, input_bytes_per_sample=64)
    run = RunConfig(training=False, device_iterations=8, execution=Execution.PIPELINED)
    return simulate(work, run, system_spec("mk2", 4))


def _sync():
    work = Work(stages(2, forward_us=500, backward_us=1000), micro_batch_size=4)
    return simulate(work, RunConfig(device_iterations=4, synthetic_data=True),
                    system_spec("mk2", 2), steps=2)


@pytest.fixture(scope="module")
def timelines():
    return {"training bubble": pipeline_run(micro_batches=7, synthetic_data=True),
            "inference bubble": _inference_bubble(), "sync": _sync()}


POPTORCH = ("opts.", "poptorch.", "gradientAccumulation", "deviceIterations",
            "replicationFactor", "num_workers", "DataLoaderMode", "OutputMode")


def _text(verdict) -> str:
    return " ".join((verdict.headline, *verdict.advice))


@pytest.mark.parametrize("loader", [None, "slow"])
def test_plain_ipusim_words_the_verdict_in_its_own_names(timelines, loader):
    for timeline in timelines.values():
        rate = timeline.throughput() / 2 if loader else None
        text = _text(bottleneck(timeline, rate))
        assert not [word for word in POPTORCH if word in text], text


def test_through_the_shims_table_the_verdict_names_poptorchs_options(timelines):
    training = bottleneck(timelines["training bubble"])
    assert training.kind == "pipeline_bubble"
    assert "(RunConfig.gradient_accumulation)" in training.advice[0]
    shim = bottleneck(timelines["training bubble"], names=REPORT_NAMES)
    assert "raise the gradient accumulation (opts.Training.gradientAccumulation)" in \
        shim.advice[0]
    inference = bottleneck(timelines["inference bubble"], names=REPORT_NAMES)
    assert "raise the device iterations (opts.deviceIterations)" in inference.advice[0]
    assert "(RunConfig.device_iterations)" in bottleneck(timelines["inference bubble"]).advice[0]
    sync = _text(bottleneck(timelines["sync"], names=REPORT_NAMES))
    assert "opts.syncPattern(poptorch.SyncPattern.SinglePipeline) lets each IPU" in sync
    assert "pipeline the model (poptorch.PipelinedExecution)" in sync
    assert "RunConfig.sync_pattern=SyncPattern.SINGLE_PIPELINE" in _text(
        bottleneck(timelines["sync"]))


def test_the_data_loaders_advice_reads_poptorchs_arguments(timelines):
    timeline = timelines["sync"]
    verdict = bottleneck(timeline, timeline.throughput() / 2, REPORT_NAMES)
    assert verdict.kind == "data_loader"
    assert verdict.advice == (
        "Use the asynchronous mode: poptorch.DataLoader(..., mode=poptorch.DataLoaderMode.Async) "
        "loads the next batches in a worker process while the IPUs run.",
        "Adjust the number of workers (num_workers).",
        "In asynchronous mode with few elements per step, try "
        "async_options={'miss_sleep_time_in_ms': 0}.",
        "If throughput drops at the start of each epoch: persistent_workers=True, "
        "load_indefinitely=True (the default), a larger buffer_size or early_preload=True.")
    assert "async_loader" in OTHER_WORDS


def test_the_summary_and_the_html_report_pass_the_names_down(timelines):
    timeline = timelines["training bubble"]
    assert "(opts.Training.gradientAccumulation)" in text_summary(timeline, names=REPORT_NAMES)
    assert "(RunConfig.gradient_accumulation)" in text_summary(timeline)
    assert "(opts.Training.gradientAccumulation)" in render_html(timeline, names=REPORT_NAMES)
    assert "opts." not in render_html(timeline).split("<h2>Bottleneck</h2>")[1][:3000]


def test_a_profile_keeps_the_names_its_verdict_was_worded_with(timelines, tmp_path, capsys):
    timeline = timelines["training bubble"]
    shim, plain = tmp_path / "shim", tmp_path / "plain"
    outputs = {"profile.json", "summary.txt", "events.csv.gz"}
    write_autoreport(shim, timeline, options={"Training.gradientAccumulation": 7},
                     outputs=outputs, names=REPORT_NAMES)
    write_autoreport(plain, timeline, outputs=outputs)
    profile = json.loads((shim / "profile.json").read_text())
    assert "(opts.Training.gradientAccumulation)" in profile["verdict"]["advice"][0]
    assert profile["setting_names"] == REPORT_NAMES.to_dict()
    assert "(opts.Training.gradientAccumulation)" in (shim / "summary.txt").read_text()
    assert json.loads((plain / "profile.json").read_text())["setting_names"] == {
        "words": {}, "columns": {}}
    # `ipusim summary` renders a profile again in the words it was written with
    assert ipusim_main(["summary", str(shim)]) == 0
    assert "(opts.Training.gradientAccumulation)" in capsys.readouterr().out
    assert ipusim_main(["summary", str(plain)]) == 0
    out = capsys.readouterr().out
    assert "(RunConfig.gradient_accumulation)" in out and "opts." not in out


def test_unknown_settings_are_refused_with_the_known_ones():
    with pytest.raises(ValueError, match=r"Unknown setting\(s\) \['gradientAccumulation'\].*"
                                         "gradient_accumulation"):
        SettingNames({"gradientAccumulation": "x"})
    assert SettingNames().word("sync_pattern", SyncPattern.FULL) == \
        "RunConfig.sync_pattern=SyncPattern.FULL"


def _sweep_table(accumulation: str) -> pd.DataFrame:
    """Three points of a sweep over the gradient accumulation, in a column so named."""
    rows = []
    for index, value in enumerate((2, 8, 32)):
        row = {"point": index, "point_id": f"p{index}", accumulation: value}
        row.update({name: None for name in FIGURES})
        row.update({"ipus": 4, "throughput(items/s)": 100.0 * (index + 1),
                    "memory_max(MB)": 10.0 * (index + 1), "capacity(MB)": 900.0,
                    "bubble_fraction": 0.5 / (index + 1), "fits": True, "error": None,
                    "config": json.dumps({accumulation: value})})
        rows.append(row)
    return pd.DataFrame(rows)


def test_the_sweep_page_finds_the_gradient_accumulation_by_the_names_given():
    ipusim_table = _sweep_table("gradient_accumulation")
    assert "bubble_vs_ga" in figures(ipusim_table, {})
    poptorch_table = _sweep_table(REPORT_NAMES.column("gradient_accumulation"))
    assert "bubble_vs_ga" not in figures(poptorch_table, {})  # not ipusim's name
    assert "bubble_vs_ga" in figures(poptorch_table, {}, REPORT_NAMES)
    page = render_sweep_html(poptorch_table, names=REPORT_NAMES)
    assert 'id="bubble_vs_ga"' in page
    assert ">Training.<wbr>gradient<wbr>Accumulation</button></th>" in page


def test_names_pickle_and_stay_read_only():
    # A PopTorch model holds its names, and torch.save pickles the model.
    import pickle
    from types import MappingProxyType

    from ipusim.plan.setting_names import SETTING_WORDS, SettingNames

    setting = sorted(SETTING_WORDS)[0]
    names = SettingNames(MappingProxyType({setting: "opts.thing({value})"}),
                         MappingProxyType({setting: "thing"}))
    again = pickle.loads(pickle.dumps(names))
    assert again == names and again.word(setting, 3) == "opts.thing(3)"
    assert isinstance(again.words, MappingProxyType)
