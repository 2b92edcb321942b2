"""Whatever a profile directory holds, ``ipusim report|summary|trace`` end in one
``ipusim X: error: ...`` line naming the file and the cause, never a
traceback; and every file of a report is written whole or not at all."""
import contextlib
import errno
import gzip
import io
import json
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ipusim import Cost, RunConfig, Stage, Work, simulate
from ipusim.cli import main
from ipusim.report import write_autoreport
from ipusim.report.autoreport import EVENTS, PROFILE
from ipusim.report.files import write_atomically


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    """A whole report of a small timing-only run."""
    directory = tmp_path_factory.mktemp("good") / "model"
    timeline = simulate(Work((Stage("a", 0, Cost(time_ps=1000)),)),
                        RunConfig(synthetic_data=True), steps=2)
    write_autoreport(directory, timeline, outputs={PROFILE, EVENTS})
    return directory


def run_cli(*argv: str) -> tuple[int, str]:
    """``ipusim ARGV`` in this process: its exit status and what it wrote on stderr."""
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        try:
            status = main(list(argv))
        except SystemExit as exit_:
            status = exit_.code
    return status, err.getvalue()


def assert_one_error_line(status, stderr, command, *named):
    assert status not in (0, None), stderr
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"ipusim {command}: error: "), stderr
    assert "Traceback" not in stderr
    for part in named:
        assert part in lines[0], lines[0]


def copy_of(good: Path, where: Path) -> Path:
    target = where / "copy"
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(good, target)
    return target


@pytest.mark.parametrize("content", ["null", "[]", "{}", "3", '"x"', '{"format": "ipusim-profile"}',
                                     "{", "\xff"])
@pytest.mark.parametrize("command", ["summary", "report", "trace"])
def test_a_profile_that_is_not_one(good, tmp_path, content, command):
    directory = copy_of(good, tmp_path)
    (directory / PROFILE).write_bytes(content.encode("latin-1"))
    assert_one_error_line(*run_cli(command, str(directory)), command, PROFILE)


@pytest.mark.parametrize("key", ["event_dtypes", "work", "run", "system", "steps", "instance"])
def test_a_profile_missing_a_key(good, tmp_path, key):
    directory = copy_of(good, tmp_path)
    profile = json.loads((directory / PROFILE).read_text())
    del profile[key]
    (directory / PROFILE).write_text(json.dumps(profile))
    assert_one_error_line(*run_cli("summary", str(directory)), "summary", PROFILE, key)


@pytest.mark.parametrize("key, value", [("steps", "abc"), ("steps", -1), ("instance", 1.5),
                                        ("work", {"stages": [{"name": "a", "ipu": "x"}]}),
                                        ("run", {"replicas": "many"}), ("system", [])])
def test_a_profile_with_a_bad_value(good, tmp_path, key, value):
    directory = copy_of(good, tmp_path)
    profile = json.loads((directory / PROFILE).read_text())
    profile[key] = value
    (directory / PROFILE).write_text(json.dumps(profile))
    assert_one_error_line(*run_cli("summary", str(directory)), "summary", PROFILE)


def test_events_of_unknown_kinds(good, tmp_path):
    import pandas as pd

    directory = copy_of(good, tmp_path)
    events = pd.read_csv(directory / EVENTS)
    events["kind"] = "bogus"
    events.to_csv(directory / EVENTS, index=False, compression="gzip")
    assert_one_error_line(*run_cli("trace", str(directory), "-o", str(tmp_path / "t.json")),
                          "trace", EVENTS, "event kinds")


@pytest.mark.parametrize("damage", ["truncated", "not gzip", "empty", "gzip of nonsense"])
def test_damaged_events(good, tmp_path, damage):
    directory = copy_of(good, tmp_path)
    path = directory / EVENTS
    whole = path.read_bytes()
    path.write_bytes({"truncated": whole[:len(whole) // 2], "not gzip": b"kind,start\n1,2\n",
                      "empty": b"", "gzip of nonsense": gzip.compress(b"\x00\x01garbage")
                      }[damage])
    assert_one_error_line(*run_cli("summary", str(directory)), "summary", EVENTS)


@pytest.mark.parametrize("output", ["/dev/full", "{dir}", "{dir}/file/x.json", "/proc/x.json"])
@pytest.mark.parametrize("command", ["report", "trace"])
def test_outputs_that_cannot_be_written(good, tmp_path, output, command):
    (tmp_path / "file").write_text("a file, not a folder")
    output = output.format(dir=tmp_path)
    status, stderr = run_cli(command, str(good), "--output", output)
    assert_one_error_line(status, stderr, command)
    assert not list(tmp_path.rglob("*.tmp")), "a temporary file was left behind"


@pytest.mark.parametrize("window", [("0", "inf"), ("nan", "1"), ("3", "1")])
def test_windows_that_are_not_spans_of_time(good, window):
    assert_one_error_line(*run_cli("trace", str(good), "--output", "/dev/null",
                                   "--window", *window), "trace", "--window")


def _containers(children):
    return st.one_of(st.lists(children, max_size=3),
                     st.dictionaries(st.text(max_size=5), children, max_size=3))


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    _containers, max_leaves=8)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(profile=st.one_of(st.binary(max_size=64), JSON.map(lambda v: json.dumps(v).encode())))
def test_fuzzed_profiles_give_one_error_line(good, tmp_path_factory, profile):
    directory = copy_of(good, tmp_path_factory.mktemp("fuzz"))
    (directory / PROFILE).write_bytes(profile)
    assert_one_error_line(*run_cli("summary", str(directory)), "summary")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cut=st.floats(0, 1, exclude_max=True), noise=st.binary(max_size=32))
def test_fuzzed_events_give_one_error_line(good, tmp_path_factory, cut, noise):
    directory = copy_of(good, tmp_path_factory.mktemp("fuzz"))
    whole = (directory / EVENTS).read_bytes()
    (directory / EVENTS).write_bytes(whole[:int(len(whole) * cut)] + noise)
    status, stderr = run_cli("summary", str(directory))
    assert_one_error_line(status, stderr, "summary")


def test_a_full_disk_leaves_the_old_file_and_no_temporary_one(tmp_path):
    path = tmp_path / "profile.json"
    path.write_text("old")

    def full_disk(temporary: Path) -> None:
        temporary.write_text("half")
        raise OSError(errno.ENOSPC, "No space left on device", str(temporary))

    with pytest.raises(OSError, match="No space left on device") as raised:
        write_atomically(path, full_disk)
    assert raised.value.filename == str(path)  # the file meant, not its temporary one
    assert path.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["profile.json"]


def test_a_report_on_a_full_disk_leaves_no_partial_file(tmp_path, monkeypatch):
    timeline = simulate(Work((Stage("a", 0, Cost(time_ps=1000)),)),
                        RunConfig(synthetic_data=True))
    import pandas as pd

    def full_disk(self, path, **kwargs):
        Path(path).write_bytes(b"\x1f\x8b")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(pd.DataFrame, "to_csv", full_disk)
    with pytest.raises(OSError, match="No space left on device") as raised:
        write_autoreport(tmp_path / "model", timeline, outputs={PROFILE, EVENTS})
    assert raised.value.filename == str(tmp_path / "model" / EVENTS)
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == [PROFILE]


def test_writing_to_a_device_writes_it_in_place(tmp_path):
    assert write_atomically("/dev/null", "text") == Path("/dev/null")
    assert Path("/dev/null").is_char_device()
    with pytest.raises(OSError) as raised:
        write_atomically("/dev/full", "text")
    assert raised.value.filename == "/dev/full" and raised.value.errno == errno.ENOSPC
