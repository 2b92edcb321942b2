"""A profile is checked against its own events when it is read: ``ipusim summary``
and ``ipusim compare`` refuse, in one line naming the folder, a profile whose
events are missing, lie outside its IPUs or lack a column, or that records no step."""
import json
import shutil

import pandas as pd
import pytest

from ipusim import Cost, RunConfig, Stage, Work, cli, system_spec
from ipusim.plan.memory import OutOfMemoryError, check_fits, memory_per_ipu
from ipusim.report import write_autoreport, write_out_of_memory_report


@pytest.fixture(scope="module")
def good(tmp_path_factory, replicated_timeline):
    """The report of 4 replicas of one IPU each."""
    return write_autoreport(tmp_path_factory.mktemp("good") / "training", replicated_timeline)


def damaged(good, tmp_path, profile=None, events=None):
    """A copy of ``good`` with its profile.json and events passed through the given edits."""
    copy = shutil.copytree(good, tmp_path / "damaged")
    if profile is not None:
        data = json.loads((copy / "profile.json").read_text())
        profile(data)
        (copy / "profile.json").write_text(json.dumps(data))
    if events is not None:
        table = pd.read_csv(copy / "events.csv.gz", compression="gzip")
        events(table).to_csv(copy / "events.csv.gz", index=False, compression="gzip")
    return copy


def set_ipu_99(table):
    table.loc[0, "ipu"] = 99
    return table


CASES = {
    "header-only events": (None, lambda table: table.iloc[:0], "holds no events"),
    "no step": (lambda p: p.update(steps=0), None, "records 0 steps"),
    "one replica's events": (None, lambda table: table[table["ipu"] == 0],
                             "4 replica(s) of 1 IPU(s), 4 in all, but events.csv.gz has "
                             "events on 1 of them"),
    "an event on IPU 99": (None, set_ipu_99, "events on IPU 99, but the run uses IPUs 0 to 3"),
    "event_dtypes lacking end_ps": (lambda p: p["event_dtypes"].pop("end_ps"), None,
                                    "its event_dtypes name no end_ps column"),
}


@pytest.mark.parametrize("case", CASES)
def test_summary_and_compare_refuse_a_profile_that_contradicts_itself(good, tmp_path, capsys,
                                                                     case):
    profile, events, said = CASES[case]
    folder = damaged(good, tmp_path, profile, events)
    for argv in (["summary", str(folder)], ["compare", str(good), str(folder)]):
        try:
            status = cli.main(argv)
        except SystemExit as stopped:
            status = stopped.code
        err = capsys.readouterr().err
        assert status not in (0, None), argv
        assert said in err and str(folder) in err, (argv, err)
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err


def test_the_good_profile_is_read(good, capsys):
    assert cli.main(["summary", str(good)]) in (0, None)
    assert "Throughput" in capsys.readouterr().out


def test_summary_and_trace_of_a_model_that_did_not_fit_say_so(tmp_path, capsys):
    work = Work((Stage("huge", 0, Cost(time_ps=1), Cost(time_ps=1),
                       weight_bytes=4 * 10**9),), micro_batch_size=1)
    memory = memory_per_ipu(work, RunConfig(), system_spec("mk2", 1))
    with pytest.raises(OutOfMemoryError) as error:
        check_fits(memory, work.stages)
    folder = write_out_of_memory_report(tmp_path / "big", error.value)
    for argv in (["summary", str(folder)], ["trace", str(folder)]):
        with pytest.raises(SystemExit):
            cli.main(argv)
        err = capsys.readouterr().err
        assert f"{folder} is the report of a model that did not fit in memory" in err
        assert "outputExecutionProfile" not in err


def test_events_that_cannot_be_read_are_not_called_damaged(good, capsys, monkeypatch):
    import ipusim.report.autoreport as autoreport

    def denied(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(autoreport.pd, "read_csv", denied)
    with pytest.raises(SystemExit):
        cli.main(["summary", str(good)])
    err = capsys.readouterr().err
    assert f"{good / 'events.csv.gz'}: Permission denied" in err and "damaged" not in err
