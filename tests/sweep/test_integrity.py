"""Nothing lost, nothing stale, nothing silent.

A results file holds the rows of one spec, and sweeps of it take turns; a
point's key covers the model's code and the work measured from it, so a
changed model is measured again; a model that cannot be built ends the sweep
naming the cause; a spec's values and the command's numbers are checked,
naming the key; and workers die with their parent however it ends.
"""
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pandas as pd
import pytest

from ipusim.cli import build_parser
from poptorch_shim.commands import add_commands
from poptorch_shim.commands import main as ipusim_main
from poptorch_shim.sweep import InProcess, ModelSource, SweepSpec, sweep
from poptorch_shim.sweep import store as store_module
from poptorch_shim.sweep.run import ERROR_AGAIN, MODEL_CODE_CHANGED, MODEL_WORK_CHANGED
from poptorch_shim.sweep.spec import ModelError, from_dict
from poptorch_shim.sweep.store import ResultsStore

HERE = Path(__file__).parent
REPOSITORY = HERE.parent.parent
SPACE = {"replicationFactor": [1, 2], "Training.gradientAccumulation": [8]}
FACTORY = '''import os
import torch
from sweep_models import pipelined


def case(width=32):  # {version}
    model, inputs, opts, optimizer = pipelined(width=int(os.environ.get("SWEEP26_WIDTH", width)))
    if os.environ.get("SWEEP26_BROKEN"):  # inputs the model cannot take: it fails to measure
        inputs = (torch.randn(4, 3), inputs[1])
    return model, inputs, opts, optimizer
'''


@pytest.fixture
def factory(tmp_path, monkeypatch):
    """A factory module of its own (``sweep26_model:case``), to change between sweeps."""
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.delenv("SWEEP26_WIDTH", raising=False)
    monkeypatch.delenv("SWEEP26_BROKEN", raising=False)
    path = tmp_path / "sweep26_model.py"

    def write(version: str = "version 1") -> None:
        path.write_text(FACTORY.format(version=version))
        sys.modules.pop("sweep26_model", None)

    write()
    yield write
    sys.modules.pop("sweep26_model", None)


def _spec(**model) -> SweepSpec:
    return SweepSpec(model=ModelSource(factory="sweep26_model:case", **model), space=dict(SPACE))


def _write_spec(path: Path, output: str, **extra: str) -> Path:
    lines = ['[model]', 'factory = "sweep_models:pipelined"', *extra.get("model", "").split("\n"),
             '[sweep]', f'output = "{output}"', '[space]', 'replicationFactor = [1, 2]',
             '"Training.gradientAccumulation" = [8]', extra.get("space", "")]
    path.write_text("\n".join(lines) + "\n")
    return path


def _error_line(capsys) -> str:
    """The command's stderr, which must be one error line and no traceback."""
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines[-1].startswith("ipusim ") and ": error: " in lines[-1], err
    return lines[-1]


# The results file: one spec, runs taking turns, atomic writes.

def test_a_sweep_of_another_spec_on_the_same_results_is_refused_naming_both(tmp_path, capsys):
    a = _write_spec(tmp_path / "A.toml", "same.csv")
    b = _write_spec(tmp_path / "B.toml", "same.csv", space='micro_batch = [4]')
    common = ["--workers", "0", "--no-progress"]
    assert ipusim_main(["sweep", str(a), *common]) == 0
    capsys.readouterr()
    assert ipusim_main(["sweep", str(b), *common]) == 1
    line = _error_line(capsys)
    assert "A.toml" in line and "B.toml" in line and "same.csv" in line
    table = pd.read_csv(tmp_path / "same.csv")
    assert len(table) == 2 and set(table["spec"]) == {str(a.resolve())}
    # A again: its own two points, nothing of B's.
    assert ipusim_main(["sweep", str(a), *common]) == 0
    assert "2 points: " in capsys.readouterr().out


def test_a_csv_keeps_hashes_that_look_like_numbers_as_text(tmp_path):
    path = tmp_path / "results.csv"
    store = ResultsStore(path, "A")
    store.add({"point": 0, "point_id": "1234567890123456", "work": "12e45", "error": None})
    store.close()
    assert ResultsStore(path, "A", lock=False).done == {"1234567890123456"}
    assert ResultsStore(path, "A", lock=False).row("1234567890123456")["work"] == "12e45"


def test_two_sweeps_of_one_results_file_take_turns_and_another_spec_is_refused_at_once(tmp_path):
    path = tmp_path / "results.csv"
    first = ResultsStore(path, "A.toml")
    second: list[ResultsStore] = []
    waiting = threading.Thread(target=lambda: second.append(ResultsStore(path, "A.toml")))
    waiting.start()
    time.sleep(0.5)
    assert waiting.is_alive() and not second  # waits for the first to end
    with pytest.raises(ValueError, match="holds a running sweep of the spec A.toml, not of "
                                         "B.toml"):
        ResultsStore(path, "B.toml")
    first.add({"point": 0, "point_id": "a", "spec": "A.toml", "error": None})
    first.close()
    waiting.join(10)
    assert not waiting.is_alive() and second[0].done == {"a"}  # it resumes from what was recorded
    second[0].close()


def test_the_results_table_is_replaced_whole_or_not_at_all(tmp_path, monkeypatch):
    path = tmp_path / "results.csv"
    store = ResultsStore(path, "A")
    store.add({"point": 0, "point_id": "a", "error": None})
    store.close()
    before = path.read_bytes()

    def cut(self, target, *args, **kwargs):
        target.write(b"point,point_id\n0,")
        raise OSError(28, "No space left on device")

    store = ResultsStore(path, "A")
    store.add({"point": 1, "point_id": "b", "error": None})
    monkeypatch.setattr(pd.DataFrame, "to_csv", cut)
    with pytest.raises(OSError):
        store.close()
    assert path.read_bytes() == before  # the old table, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == [  # no temporary file left behind
        "results.csv", "results.csv.journal.jsonl", "results.csv.lock"]
    monkeypatch.undo()
    assert ResultsStore(path, "A").done == {"a", "b"}  # the journal kept the new row


# A point's key covers the model: a changed model is measured again.

def test_a_changed_model_is_measured_again_and_the_dropped_rows_are_reported(
        tmp_path, factory, monkeypatch):
    path = tmp_path / "results.csv"
    first = sweep(_spec(), path, InProcess())
    assert first["error"].isna().all() and first.attrs["dropped"] == {}
    again = sweep(_spec(), path, InProcess(), on_result=lambda row: pytest.fail("recomputed"))
    assert again.attrs["dropped"] == {}
    # The factory's code changes: every point again, the old rows dropped.
    factory("version 2")
    recomputed = []
    changed = sweep(_spec(), path, InProcess(), on_result=recomputed.append)
    assert len(recomputed) == 2 and changed.attrs["dropped"] == {MODEL_CODE_CHANGED: 2}
    assert len(changed) == 2 and set(changed["point_id"]).isdisjoint(first["point_id"])
    # The model changes with neither its code nor the spec (width 32 -> 2048): its work does.
    monkeypatch.setenv("SWEEP26_WIDTH", "2048")
    wider = sweep(_spec(), path, InProcess())
    assert wider.attrs["dropped"] == {MODEL_WORK_CHANGED: 2} and len(wider) == 2
    assert (wider["memory_max(MB)"] > changed["memory_max(MB)"]).all()


def test_the_cli_says_when_rows_were_dropped_because_the_model_changed(tmp_path, factory,
                                                                      capsys):
    spec_path = tmp_path / "s.toml"
    spec_path.write_text('[model]\nfactory = "sweep26_model:case"\n[space]\n'
                         'replicationFactor = [1, 2]\n"Training.gradientAccumulation" = [8]\n')
    assert ipusim_main(["sweep", str(spec_path), "--workers", "0", "--no-progress"]) == 0
    factory("version 2")
    capsys.readouterr()
    assert ipusim_main(["sweep", str(spec_path), "--workers", "0", "--no-progress"]) == 0
    assert f"2 recorded point(s) of {tmp_path / 's.parquet'} computed again: " \
           f"{MODEL_CODE_CHANGED}" in capsys.readouterr().err


def test_error_rows_of_a_model_that_failed_to_measure_are_never_reused(tmp_path, factory,
                                                                      monkeypatch):
    path = tmp_path / "results.parquet"
    monkeypatch.setenv("SWEEP26_BROKEN", "1")
    broken = sweep(_spec(), path, InProcess())
    assert broken["error"].str.contains("RuntimeError").all()
    monkeypatch.delenv("SWEEP26_BROKEN")  # fixed, the factory's file unchanged
    fixed = sweep(_spec(), path, InProcess())
    assert fixed["error"].isna().all() and fixed["fits"].all()
    assert fixed.attrs["dropped"] == {ERROR_AGAIN: 2}


@pytest.mark.parametrize("model, files, cause", [
    ('factory = "no_such_module_26:case"', {}, "no module named 'no_such_module_26'"),
    ('factory = "bad26:case"', {"bad26.py": "def case():\n    raise RuntimeError('boom')\n"},
     "factory 'bad26:case' raised RuntimeError: boom"),
    ('factory = "none26:case"', {"none26.py": "def case():\n    return None\n"},
     "must return (model, inputs, options)"),
    ('factory = "gone26:nothing"', {"gone26.py": "x = 1\n"}, "has no attribute 'nothing'"),
    ('script = "missing.py"', {}, "missing.py: cannot read it"),
    ('script = "raises.py"', {"raises.py": "raise RuntimeError('boom')\n"},
     "raises.py raised RuntimeError: boom"),
    ('script = "empty.py"', {"empty.py": "x = 1\n"}, "ended without compiling or running"),
])
def test_a_model_that_cannot_be_built_fails_the_sweep_naming_the_cause(
        tmp_path, monkeypatch, capsys, model, files, cause):
    monkeypatch.syspath_prepend(str(tmp_path))
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    spec_path = tmp_path / "s.toml"
    spec_path.write_text(f'[model]\n{model}\n[space]\nreplicationFactor = [1, 2]\n')
    assert ipusim_main(["sweep", str(spec_path), "--workers", "0", "--no-progress"]) == 1
    line = _error_line(capsys)
    assert line.startswith(f"ipusim sweep: error: {spec_path}: ") and cause in line, line
    assert not (tmp_path / "s.parquet").exists()  # no rows of a model that was never built
    with pytest.raises(ModelError):
        sweep(str(spec_path), tmp_path / "other.csv", InProcess())


@pytest.mark.parametrize("script, cause", [
    ("raise RuntimeError('boom')\n", "raised RuntimeError: boom"),
    ("import sys\nsys.exit(3)\n", "exited (status 3) before compiling a poptorch model"),
    (None, "no such script"),
])
def test_ipusim_advise_on_a_model_that_cannot_be_built_is_one_error_line(tmp_path, capsys,
                                                                         script, cause):
    path = tmp_path / "train.py"
    if script is not None:
        path.write_text(script)
    assert ipusim_main(["advise", "--workers", "0", "--no-progress", str(path)]) == 1
    line = _error_line(capsys)
    assert line.startswith("ipusim advise: error: ") and str(path) in line and cause in line


# Values checked, naming the key.

MODEL = {"factory": "sweep_models:pipelined"}


@pytest.mark.parametrize("data, message", [
    ({"model": {**MODEL, "args": 3}}, r"\[model\] args must be a list of strings"),
    ({"model": {**MODEL, "args": ["--a", 1]}}, r"\[model\] args must be a list of strings"),
    ({"model": {**MODEL, "args": "--width 8"}},
     r"\[model\] args must be a list of strings, one per argument \(e.g. args = "
     r"\[\"--width\", \"8\"\]\), got the string '--width 8'"),
    ({"model": {**MODEL, "kwargs": 3}}, r"\[model\] kwargs must be a table"),
    ({"model": {"factory": 3}}, r"\[model\] factory must be a non-empty string"),
    ({"model": MODEL, "sweep": {"sample": True}}, r"\[sweep\] sample must be a positive integer"),
    ({"model": MODEL, "sweep": {"sample": 0}}, r"\[sweep\] sample must be a positive integer"),
    ({"model": MODEL, "sweep": {"steps": 1.5}}, r"\[sweep\] steps must be a positive integer"),
    ({"model": MODEL, "sweep": {"seed": "x"}}, r"\[sweep\] seed must be an integer"),
    ({"model": MODEL, "sweep": {"output": 3}}, r"\[sweep\] output must be a file name"),
    ({"model": MODEL, "space": 3}, r"\[space\] must be a table"),
    ({"model": 3}, r"\[model\] must be a table"),
])
def test_a_spec_value_of_the_wrong_type_is_refused_naming_its_key(data, message):
    with pytest.raises(ValueError, match=message):
        from_dict(data)


def test_a_grids_size_is_computed_without_building_it():
    space = {f"model.a{index}": list(range(12)) for index in range(9)}
    spec = SweepSpec(model=ModelSource(**MODEL), space=space, sample=3)
    started = time.monotonic()
    assert spec.grid_size == 12 ** 9 and spec.size == 3 and len(spec.points()) == 3
    assert SweepSpec(model=ModelSource(**MODEL), space=space).size == 12 ** 9
    assert time.monotonic() - started < 1


def test_a_grid_too_large_to_sweep_is_refused_before_it_is_built(tmp_path, capsys):
    path = tmp_path / "huge.toml"
    axes = "\n".join(f'"model.a{index}" = {list(range(12))}' for index in range(9))
    path.write_text(f'[model]\nfactory = "sweep_models:pipelined"\n[space]\n{axes}\n')
    assert ipusim_main(["sweep", str(path), "--workers", "0", "--no-progress"]) == 1
    line = _error_line(capsys)
    assert line.startswith(f"ipusim sweep: error: {path}: 5,159,780,352 points") and \
        "sample = N" in line


@pytest.mark.parametrize("make, cause", [
    (lambda path: path.mkdir(), "is a folder, not a sweep spec"),
    (lambda path: path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe"), "not UTF-8 text"),
    (lambda path: path.write_text("[model\n"), "not valid TOML"),
    (lambda path: None, "no such sweep spec"),
    (lambda path: path.write_text('[model]\nfactory = "m:f"\nkwargs = 3\n'),
     "[model] kwargs must be a table"),
])
def test_a_spec_that_cannot_be_read_is_one_error_line_naming_the_file(tmp_path, capsys, make,
                                                                       cause):
    path = tmp_path / "spec.toml"
    make(path)
    assert ipusim_main(["sweep", str(path), "--workers", "0", "--no-progress"]) == 1
    line = _error_line(capsys)
    assert line.startswith(f"ipusim sweep: error: {path}: ") and cause in line, line


@pytest.mark.parametrize("argv, message", [
    (["sweep", "s.toml", "--workers", "-1"], "argument --workers: must be at least 0, got -1"),
    (["sweep", "s.toml", "--workers", "two"], "argument --workers: expected an integer"),
    (["advise", "--top", "-1", "x.py"], "argument --top: must be at least 1, got -1"),
    (["advise", "--top", "0", "x.py"], "argument --top: must be at least 1, got 0"),
    (["advise", "--trials", "0", "x.py"], "argument --trials: must be at least 1, got 0"),
    (["advise", "--exhaustive-limit", "0", "x.py"],
     "argument --exhaustive-limit: must be at least 1, got 0"),
    (["advise", "--ipus", "0", "x.py"], "argument --ipus: must be at least 1, got 0"),
    (["advise", "--workers", "-1", "x.py"], "argument --workers: must be at least 0, got -1"),
])
def test_the_commands_numbers_are_range_checked_by_argparse(capsys, argv, message):
    with pytest.raises(SystemExit) as exit_status:
        ipusim_main(argv)
    assert exit_status.value.code == 2
    err = capsys.readouterr().err
    assert f"ipusim {argv[0]}: error: {message}" in err and "Traceback" not in err


@pytest.mark.parametrize("argv, ray, spec_or_script", [
    (["sweep", "--ray", "s.toml"], "", "s.toml"),  # a local Ray, before SPEC
    (["sweep", "s.toml", "--ray"], "", "s.toml"),
    (["sweep", "--ray", "--workers", "2", "s.toml"], "", "s.toml"),
    (["sweep", "--workers", "2", "--ray", "s.toml", "--report", "r"], "", "s.toml"),
    (["sweep", "--ray", "ray://head:10001", "s.toml"], "ray://head:10001", "s.toml"),
    (["sweep", "--ray", "10.0.0.1:6379", "s.toml"], "10.0.0.1:6379", "s.toml"),
    (["sweep", "s.toml", "--ray", "auto"], "auto", "s.toml"),
    (["sweep", "s.toml"], None, "s.toml"),
    (["advise", "--ray", "train.py", "--size", "reduced"], "", "train.py"),
    (["advise", "--ray", "scenarios.resnet50:case"], "", "scenarios.resnet50:case"),
    # After SCRIPT, everything is the script's own, --ray included.
    (["advise", "--ipus", "4", "train.py", "--ray", "a.py"], None, "train.py"),
])
def test_a_bare_ray_before_the_spec_or_script_is_a_local_ray(argv, ray, spec_or_script):
    args = build_parser([add_commands]).parse_args(argv)
    assert args.ray == ray
    assert (args.spec if argv[0] == "sweep" else args.script) == spec_or_script
    if argv[0] == "advise":
        assert args.script_args == argv[argv.index(spec_or_script) + 1:]


# No orphans: the workers die with the sweep, however it ends.

def _descendants(pid: int) -> set[int]:
    found, todo = set(), [pid]
    while todo:
        parent = todo.pop()
        try:
            children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
        except OSError:
            continue
        for child in map(int, children):
            found.add(child)
            todo.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def _semaphores() -> set[str]:
    return {path.name for path in Path("/dev/shm").glob("sem.mp-*")}


def _until(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.2)
    return condition()


def _long_sweep(tmp_path: Path, *flags: str) -> subprocess.Popen:
    """``ipusim sweep`` with ``flags`` in a process of its own, on a spec long enough
    (1,176 points of 2 steps) to be stopped midway; results in ``long.parquet``."""
    spec_path = tmp_path / "long.toml"
    spec_path.write_text('[model]\nfactory = "sweep_models:pipelined"\n[sweep]\nsteps = 2\n'
                         '[space]\nreplicationFactor = [1, 2, 4]\n'
                         f'"Training.gradientAccumulation" = {list(range(8, 400))}\n')
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPOSITORY), str(HERE), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen(
        [sys.executable, "-m", "poptorch_shim.commands", "sweep", str(spec_path), *flags,
         "--no-progress"], cwd=tmp_path, env=environment, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)


def _stop_midway(tmp_path: Path, sweep_process: subprocess.Popen, signum: int, ready,
                 seconds: float) -> tuple[set[int], str]:
    """Send ``signum`` to a :func:`_long_sweep` once ``ready()`` and its first points are
    recorded (within ``seconds``); the processes below it just before, and its stderr. A
    sweep that outlives the test is killed."""
    journal = tmp_path / "long.parquet.journal.jsonl"
    try:
        assert _until(lambda: ready() and journal.exists(), seconds), "no point was recorded"
        started = _descendants(sweep_process.pid)
        os.kill(sweep_process.pid, signum)
        _, err = sweep_process.communicate(timeout=120)
    finally:
        if sweep_process.poll() is None:
            sweep_process.kill()
            sweep_process.communicate()
    return started, err


@pytest.mark.slow  # a real `ipusim sweep` per signal, a few seconds each
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc and /dev/shm")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGKILL])
def test_the_workers_die_with_the_sweep_whatever_signal_ends_it(tmp_path, signum):
    before = _semaphores()
    sweep_process = _long_sweep(tmp_path, "--workers", "2")

    def workers() -> set[int]:
        return {pid for pid in _descendants(sweep_process.pid)
                if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()}

    # The processes below it (the workers and the resource tracker) when it is stopped.
    started, err = _stop_midway(tmp_path, sweep_process, signum, lambda: len(workers()) >= 2,
                                180)
    if signum == signal.SIGKILL:
        assert sweep_process.returncode == -signal.SIGKILL
    else:
        assert sweep_process.returncode == 128 + signum, err
        said = [line for line in err.splitlines() if line.startswith("ipusim sweep: ")]
        assert said[-1].endswith(f"the finished points are in {tmp_path / 'long.parquet'}: "
                                 "run the same command to resume"), err
        assert "Traceback" not in err and "leaked semaphore" not in err
    assert _until(lambda: not any(_alive(pid) for pid in started), 30), \
        [pid for pid in started if _alive(pid)]
    assert _until(lambda: not (_semaphores() - before), 30), _semaphores() - before


@pytest.mark.slow  # starts a local Ray per signal
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_a_ray_the_sweep_started_dies_with_it(tmp_path, signum):
    pytest.importorskip("ray")
    sweep_process = _long_sweep(tmp_path, "--ray")
    # The processes below it (Ray's and its workers) when it is stopped.
    started, err = _stop_midway(tmp_path, sweep_process, signum, lambda: True, 240)
    if signum != signal.SIGKILL:
        assert sweep_process.returncode == 128 + signum, err
        assert "run the same command to resume" in err
    assert _until(lambda: not any(_alive(pid) for pid in started), 60), \
        [Path(f"/proc/{pid}/cmdline").read_bytes()[:80].replace(b"\0", b" ")
         for pid in started if _alive(pid)]


def test_without_pyarrow_parquet_results_go_to_the_csv_beside_them(tmp_path, monkeypatch,
                                                                     capsys):
    """pyarrow fails to import beside an older numpy (as libraries over PopTorch pin it)."""
    monkeypatch.setattr(store_module, "_parquet_unavailable",
                        lambda: "ImportError: numpy.core.multiarray failed to import")
    store = ResultsStore(tmp_path / "bert.parquet", "A")
    store.add({"point": 0, "point_id": "1234567890123456", "work": "12e45", "error": None})
    store.close()
    assert store.path == tmp_path / "bert.csv" and not (tmp_path / "bert.parquet").exists()
    assert "the results go to " in capsys.readouterr().err
    assert list(store_module.read(tmp_path / "bert.parquet")["work"]) == ["12e45"]


WIDTH_SCRIPT = """
import argparse
import torch, poptorch

parser = argparse.ArgumentParser()
parser.add_argument("--width", type=int, required=True)
width = parser.parse_args().width
model = poptorch.inferenceModel(torch.nn.Linear(width, width), poptorch.Options())
model(torch.ones(2, width))
print("width", width)
"""


@pytest.mark.slow  # runs the sweep command in a fresh interpreter (a refused spec: here)
@pytest.mark.parametrize("args, refused", [('"--width 8"', True), ('["--width", "8"]', False)])
def test_a_scripts_args_are_a_list_and_a_string_is_refused_naming_the_key(tmp_path, capsys,
                                                                            args, refused):
    (tmp_path / "wide.py").write_text(WIDTH_SCRIPT)
    spec = tmp_path / "s.toml"
    spec.write_text(f'[model]\nscript = "wide.py"\nargs = {args}\n[space]\n'
                    'deviceIterations = [1]\n')
    command = ["sweep", str(spec), "--workers", "0", "--no-progress"]
    if refused:  # refused before anything runs, so the command's own process will do
        assert ipusim_main(command) == 1  # as every fault of a spec
        assert capsys.readouterr().err.strip() == f"ipusim sweep: error: {spec}: " + (
            "[model] args must be a list of strings, one per argument (e.g. args = "
            "[\"--width\", \"8\"]), got the string '--width 8'")
        assert not (tmp_path / "s.parquet").exists()  # nothing measured, nothing recorded
    else:
        run = subprocess.run([sys.executable, "-m", "ipusim", *command], capture_output=True,
                             text=True, timeout=300)
        assert run.returncode == 0, run.stderr
        results = pd.read_parquet(tmp_path / "s.parquet")
        assert len(results) == 1 and results["fits"].all()
