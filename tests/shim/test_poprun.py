"""poprun: real instances (subprocesses) of one run, their tagged output, seed
004's numbers, synchronised training across instances, and what happens when
an instance fails or poprun is interrupted.

Launches that run Python scripts start one Python process per instance that
imports torch (a few seconds each), so there are only a handful of them, and
poprun's ``main`` runs in this process (the ``poprun`` command is that
function) to spare each launch poprun's own start-up.
"""
import copy
import os
import re
import runpy
import signal
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch

import poptorch_shim as poptorch
from poptorch_shim._distributed import poprun

pytestmark = [pytest.mark.slow]  # starts poprun's instances


SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios" / "distributed"
TAG = re.compile(r"^\[1,(\d+)\]<(stdout|stderr)>:(.*)$")


def by_instance(text, stream="stdout"):
    """The tagged lines of ``text``, grouped by instance, in order."""
    lines = {}
    for line in text.splitlines():
        match = TAG.match(line)
        if match and match.group(2) == stream:
            lines.setdefault(int(match.group(1)), []).append(match.group(3))
    return lines


def alive(pid):
    """Whether ``pid`` is a running (not zombie) process."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def python_children():
    """Live Python processes whose parent is this test process."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            name, rest = (entry / "stat").read_text().rsplit(")", 1)
        except OSError:
            continue
        fields = rest.split()
        if int(fields[1]) == os.getpid() and "python" in name and fields[0] != "Z":
            found.append(int(entry.name))
    return found


# -- the command line ----------------------------------------------------------------------
@pytest.mark.parametrize("argv, message", [
    (["--num-replicas", "6", "--num-instances", "4"],
     r"--num-replicas \(6\) must be divisible by --num-instances \(4\)"),
    (["--num-replicas", "0", "--num-instances", "1"],
     r"argument --num-replicas: must be a positive integer, got '0'"),
    (["--num-replicas", "2", "--num-instances", "-2"],
     r"argument --num-instances: must be a positive integer, got '-2'"),
    (["--num-replicas", "2", "--ipus-per-replica", "0"],
     r"argument --ipus-per-replica: must be a positive integer, got '0'"),
    (["--num-replicas", "8", "--ipus-per-replica", "4"],
     r"needs 32 IPUs but the simulated machine has 16; .* IPUSIM_NUM_IPUS=32"),
    (["--num-replicas", "4", "--num-instances", "2", "--only-output-from-instance", "2"],
     r"--only-output-from-instance must name an instance from 0 to 1, got 2"),
])
def test_a_bad_layout_is_refused_before_anything_runs(tmp_path, capsys, monkeypatch, argv,
                                                      message):
    monkeypatch.delenv("IPUSIM_NUM_IPUS", raising=False)
    marker = tmp_path / "ran"
    with pytest.raises(SystemExit) as exit_:
        poprun.main(argv + ["sh", "-c", f"touch {marker}"])
    assert exit_.value.code == 2
    assert re.search(message, capsys.readouterr().err)
    assert not marker.exists()


def test_a_command_is_required(capsys):
    with pytest.raises(SystemExit):
        poprun.main(["--num-replicas", "2", "--num-instances", "2"])
    assert "give the command each instance runs" in capsys.readouterr().err


@pytest.mark.parametrize("command, expected", [
    (["python", "train.py", "--epochs", "2"],
     [sys.executable, "-m", "poptorch_shim", "train.py", "--epochs", "2"]),
    (["python3", "-u", "dir/train.py"], [sys.executable, "-u", "-m", "poptorch_shim",
                                         "dir/train.py"]),
    (["train.py"], [sys.executable, "-m", "poptorch_shim", "train.py"]),
    (["python", "-m", "package.main"], ["python", "-m", "package.main"]),
    (["python", "-c", "print(1)"], ["python", "-c", "print(1)"]),
    (["sh", "-c", "echo hi"], ["sh", "-c", "echo hi"]),
])
def test_python_scripts_run_through_the_shim_runner(command, expected):
    assert poprun.child_command(command) == expected


def test_each_instance_gets_poprun_and_mpirun_variables():
    env = poprun.Layout(8, 4, 2).environment(3, 29400)
    assert {k: env[k] for k in (
        "POPDIST_NUM_TOTAL_REPLICAS", "POPDIST_NUM_LOCAL_REPLICAS",
        "POPDIST_REPLICA_INDEX_OFFSET", "POPDIST_NUM_IPUS_PER_REPLICA",
        "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "RANK",
        "WORLD_SIZE")} == {
        "POPDIST_NUM_TOTAL_REPLICAS": "8", "POPDIST_NUM_LOCAL_REPLICAS": "2",
        "POPDIST_REPLICA_INDEX_OFFSET": "6", "POPDIST_NUM_IPUS_PER_REPLICA": "2",
        "OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4", "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29400", "RANK": "3", "WORLD_SIZE": "4"}


def test_output_is_tagged_by_instance_and_stream(capsys):
    code = poprun.main(["--num-replicas", "4", "--num-instances", "2", "sh", "-c",
                        "echo out $OMPI_COMM_WORLD_RANK; echo err $RANK >&2; printf tail"])
    captured = capsys.readouterr()
    assert code == 0
    assert by_instance(captured.out) == {0: ["out 0", "tail"], 1: ["out 1", "tail"]}
    assert by_instance(captured.err, "stderr") == {0: ["err 0"], 1: ["err 1"]}


def test_only_output_from_one_instance(capsys):
    code = poprun.main(["--num-replicas", "3", "--num-instances", "3",
                        "--only-output-from-instance", "1", "sh", "-c", "echo $RANK"])
    assert code == 0
    assert capsys.readouterr().out.splitlines() == ["[1,1]<stdout>:1"]


# -- the distributed data-loading chapter ---------------------------------------------------------
SEED_LINES = ["* dataset size: 50000", "* dataloader size: {size}", "* batch size: {batch}"]


def test_step1_in_one_process_reads_1562_batches(capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", [str(SCENARIOS / "step1.py")])
    runpy.run_path(str(SCENARIOS / "step1.py"), run_name="__main__")
    assert capsys.readouterr().out.splitlines() == [
        line.format(size=1562, batch=32) for line in SEED_LINES]


@pytest.mark.parametrize("script, expected", [
    ("step2.py", [line.format(size=390, batch=32) for line in SEED_LINES]),
    ("step3.py", ["* number of local replicas: 2"]
     + [line.format(size=195, batch=64) for line in SEED_LINES]),
])
def test_seed_004_under_poprun_8_replicas_4_instances(capsys, script, expected):
    code = poprun.main(["--num-replicas", "8", "--num-instances", "4", "python",
                        str(SCENARIOS / script)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert by_instance(captured.out) == {i: expected for i in range(4)}


# -- synchronised training -----------------------------------------------------------------
TRAIN = textwrap.dedent("""
    import sys
    import torch
    import poptorch
    import popdist.poptorch
    sys.path.insert(0, sys.argv[2])
    from test_poprun import Net, Samples, describe

    torch.manual_seed(0)
    net = Net()
    opts = popdist.poptorch.Options()
    model = poptorch.trainingModel(net, opts, torch.optim.SGD(net.parameters(), lr=0.1,
                                                              momentum=0.9))
    seen = []
    for x, y, index in poptorch.DataLoader(opts, Samples(), batch_size=2):
        model(x, y)
        seen += index.tolist()
    print(f"first sample {seen[0]}, last sample {seen[-1]}, samples {len(seen)}, "
          f"contiguous {seen == list(range(seen[0], seen[-1] + 1))}")
    torch.save(describe(model), f"{sys.argv[1]}/instance{popdist.getInstanceIndex()}.pt")
""")


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 3)
        self.loss = torch.nn.CrossEntropyLoss()

    def forward(self, x, y):
        out = self.fc(x)
        return out, self.loss(out, y)


class Samples(torch.utils.data.Dataset):
    """42 samples: each instance of 2 reads 5 steps of 2 x 2, 2 are left over."""

    def __init__(self):
        generator = torch.Generator().manual_seed(0)
        self.x = torch.randn(42, 4, generator=generator)
        self.y = torch.randint(0, 3, (42,), generator=generator)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, index):
        return self.x[index], self.y[index], index


def describe(model):
    """What the test compares: weights, simulated end time, all-reduce durations."""
    events = model.device.timeline.events
    reduces = events[events["kind"] == "all_reduce"]
    return {"state": copy.deepcopy(model.model.state_dict()),
            "end_ps": model.device.simulation.now_ps,
            "all_reduce_ps": sorted(set((reduces["end_ps"] - reduces["start_ps"]).tolist()))}


def test_instances_train_in_step_with_one_process_of_four_replicas(tmp_path, capsys,
                                                                   monkeypatch):
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    monkeypatch.setenv("IPUSIM_REPORT_DIR", str(tmp_path / "reports"))
    code = poprun.main(["--num-replicas", "4", "--num-instances", "2", "python", str(script),
                        str(tmp_path), str(Path(__file__).parent)])
    captured = capsys.readouterr()
    assert code == 0, captured.err

    # Contiguous shards, one after the other, leaving fewer than a step per instance.
    assert by_instance(captured.out) == {
        0: ["first sample 0, last sample 19, samples 20, contiguous True"],
        1: ["first sample 20, last sample 39, samples 20, contiguous True"]}

    # The same global batches, in one process with 4 replicas: replica r of instance i
    # is global replica 2i + r, so step k reads instance 0's block, then instance 1's.
    torch.manual_seed(0)
    net = Net()
    opts = poptorch.Options().replicationFactor(4)
    reference = poptorch.trainingModel(net, opts, torch.optim.SGD(net.parameters(), lr=0.1,
                                                                  momentum=0.9))
    samples = Samples()
    for step in range(5):
        index = torch.cat([torch.arange(20 * i + 4 * step, 20 * i + 4 * step + 4)
                           for i in range(2)])
        reference(samples.x[index], samples.y[index])
    expected = describe(reference)

    results = [torch.load(tmp_path / f"instance{i}.pt") for i in range(2)]
    for result in results:
        for name, tensor in expected["state"].items():
            torch.testing.assert_close(result["state"][name], tensor, atol=1e-6, rtol=0)
        # The all-reduce spans all 4 replicas of both instances.
        assert result["all_reduce_ps"] == expected["all_reduce_ps"] != []
    for name in expected["state"]:
        assert torch.equal(results[0]["state"][name], results[1]["state"][name])
    assert results[0]["end_ps"] == results[1]["end_ps"]

    # Each instance writes its own report; the job's report has every IPU.
    from ipusim.report import load_autoreport
    job = tmp_path / "reports" / "training"
    parts = [load_autoreport(job / f"instance-{i}") for i in range(2)]
    assert [part.instance for part in parts] == [0, 1]
    assert all(set(part.events["ipu"]) == {0, 1} for part in parts)
    whole = load_autoreport(job)
    assert set(whole.events["ipu"]) == {0, 1, 2, 3} and whole.run.replicas == 4
    assert len(whole.events) == sum(len(part.events) for part in parts)
    assert (job / "report.html").is_file()


# -- failures and interrupts ----------------------------------------------------------------
FAIL = textwrap.dedent("""
    import os, subprocess, sys, time
    from pathlib import Path
    out = Path(sys.argv[1])
    if os.environ["RANK"] == "0":
        sleeper = subprocess.Popen(["sleep", "60"])
        (out / "pids").write_text(f"{os.getpid()} {sleeper.pid}")
        time.sleep(60)
    else:
        while not (out / "pids").exists():
            time.sleep(0.05)
        (out / "raised").write_text(repr(time.time()))
        raise RuntimeError("instance 1 gives up")
""")


def test_a_failing_instance_stops_the_run(tmp_path, capsys):
    # Earlier tests may have left long-lived helpers (multiprocessing's resource
    # tracker, a forkserver): only the processes this run starts must be gone.
    before = set(python_children())
    # python -c runs as given (no shim runner, no torch): the instances start at once.
    code = poprun.main(["--num-replicas", "2", "--num-instances", "2", sys.executable, "-c",
                        FAIL, str(tmp_path)])
    stopped_after = time.time() - float((tmp_path / "raised").read_text())
    captured = capsys.readouterr()
    assert code == 1
    assert "[1,1]<stderr>:RuntimeError: instance 1 gives up" in captured.err.splitlines()
    assert captured.err.splitlines()[-1] == (
        "poprun: instance 1 exited with code 1; stopped instance(s) 0.")
    assert stopped_after < poprun.GRACE_SECONDS
    instance, sleeper = map(int, (tmp_path / "pids").read_text().split())
    assert not alive(instance) and not alive(sleeper)
    assert set(python_children()) - before == set()


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_and_sigterm_are_passed_on_to_every_instance(tmp_path, capsys, signum):
    """The signal comes to this process, where poprun's main runs, once every
    instance has started; each instance and what it started must be gone."""
    def interrupt():
        while not all((tmp_path / f"pid{i}").exists() for i in range(2)):
            time.sleep(0.02)
        os.kill(os.getpid(), signum)

    sender = threading.Thread(target=interrupt, daemon=True)
    sender.start()
    started = time.monotonic()
    code = poprun.main(["--num-replicas", "2", "--num-instances", "2", "sh", "-c",
                        f"sleep 60 & echo $$ $! > {tmp_path}/pid$RANK; wait"])
    sender.join()
    assert code == 128 + signum
    assert time.monotonic() - started < poprun.GRACE_SECONDS + 5
    name = signal.Signals(signum).name
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"poprun: interrupted by {name}; stopped every instance.")
    pids = [int(pid) for i in range(2) for pid in (tmp_path / f"pid{i}").read_text().split()]
    assert not any(alive(pid) for pid in pids)


# An instance that stops on its own, and a peer that then fails on the lost
# connection, as gloo words it. The peer fails first; poprun must blame the other.
PEER_LOST = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    out = Path(sys.argv[1])
    ending = sys.argv[2]
    if os.environ["RANK"] == "1":
        (out / "stopping").write_text("")
        time.sleep(0.5)
        sys.exit(3 if ending == "fail" else 0)
    while not (out / "stopping").exists():
        time.sleep(0.02)
    if ending == "finish":
        time.sleep(1.0)  # instance 1 has finished by now
    print("RuntimeError: [gloo/transport/tcp/pair.cc:598] Connection closed by peer "
          "[127.0.0.1]:29500", file=sys.stderr, flush=True)
    sys.exit(1)
""")


def run_peer_lost(tmp_path, capsys, ending: str) -> tuple[int, str]:
    """poprun of PEER_LOST with instance 1 ending as ``ending``: its exit code
    and the last line it printed."""
    code = poprun.main(["--num-replicas", "2", "--num-instances", "2", sys.executable, "-c",
                        PEER_LOST, str(tmp_path), ending])
    return code, capsys.readouterr().err.splitlines()[-1]


def test_poprun_blames_the_instance_that_stopped_not_its_peer(tmp_path, capsys):
    code, last = run_peer_lost(tmp_path, capsys, "fail")
    assert code == 3
    assert last.startswith("poprun: instance 1 exited with code 3"), last


def test_poprun_says_when_a_peer_finished_early(tmp_path, capsys):
    code, last = run_peer_lost(tmp_path, capsys, "finish")
    assert code == 1
    assert last.startswith("poprun: instance 0 exited with code 1 on a lost connection"), last
    assert "after instance(s) 1 had finished with code 0" in last
    assert "different numbers of steps" in last


STEPS = textwrap.dedent("""
    import sys
    import torch
    import poptorch
    import popdist.poptorch
    model = poptorch.inferenceModel(torch.nn.Linear(4, 2), popdist.poptorch.Options())
    for _ in range(int(sys.argv[1])):
        model(torch.ones(2, 4))
""")


def test_a_second_run_replaces_the_job_report_of_the_first_and_says_whose_figure_is_whose(
        tmp_path, capsys, monkeypatch):
    """Each instance says its figure is its own and the job gets its own line; a second
    run (3 steps, after 1) replaces the job's report and its instances'."""
    script = tmp_path / "steps.py"
    script.write_text(STEPS)
    monkeypatch.setenv("IPUSIM_REPORT_DIR", str(tmp_path / "reports"))
    from ipusim.report import load_autoreport
    job = tmp_path / "reports" / "inference"
    for steps in (1, 3):
        assert poprun.main(["--num-replicas", "2", "--num-instances", "2", "python",
                            str(script), str(steps)]) == 0, capsys.readouterr().err
        err = capsys.readouterr().err
        parts = [load_autoreport(job / f"instance-{i}") for i in range(2)]
        whole = load_autoreport(job)
        assert whole.steps == steps and all(part.steps == steps for part in parts)
        assert len(whole.events) == sum(len(part.events) for part in parts)
        for instance in range(2):
            assert f"inference (instance {instance} of 2: its own replicas; the last" in err
        assert (f"ipusim: inference, the whole job (2 instances): {whole.throughput():,.0f} "
                f"items/s; report {job}") in err
    assert sorted(p.name for p in job.iterdir() if p.name.startswith(".")) == []
