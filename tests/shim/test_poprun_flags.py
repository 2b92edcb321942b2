"""poprun's flags as Graphcore's docs use them: the ones honoured here
(verbosity, topology, environment forwarding, --ipus-per-replica against the
model) and the notice naming the ones ignored."""
import pytest
import torch

import poptorch_shim as poptorch
from poptorch_shim._distributed import poprun

ECHO = ["sh", "-c", "echo ${FOO:-unset} ${BAZ:-unset} ${ZED:-unset}"]


def _tagged(text: str, stream: str = "stdout") -> list[str]:
    return sorted(line for line in text.splitlines() if f"<{stream}>:" in line)


def test_verbose_says_what_poprun_starts_and_how_each_instance_ends(capsys):
    assert poprun.main(["-v", "--num-replicas", "4", "--num-instances", "2", "true"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0] == ("poprun: starting 2 instance(s) on this host, 4 replica(s) (2 each) of "
                      "1 IPU(s): true")
    assert sorted(line.split(" (pid")[0] for line in err[1:]) == \
        ["poprun: instance 0", "poprun: instance 1"]
    assert all(line.endswith("exited with code 0.") for line in err[1:])


@pytest.mark.parametrize("flags", [["-vv"], ["--vv"], ["-v", "-v"]])
def test_very_verbose_adds_each_instances_variables(capsys, flags):
    assert poprun.main([*flags, "--num-replicas", "2", "--num-instances", "2",
                        "-x", "ZED=1", "true"]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines()
             if line.startswith("poprun: instance ") and "=" in line]
    assert len(lines) == 2
    for index, line in enumerate(lines):
        assert f"POPDIST_REPLICA_INDEX_OFFSET={index} " in line and f"RANK={index} " in line
        assert line.endswith("ZED=1")


def test_quiet_by_default(capsys):
    assert poprun.main(["--num-replicas", "2", "--num-instances", "2", "true"]) == 0
    assert capsys.readouterr().err == ""


def test_environment_is_forwarded_from_every_place_mpirun_takes_it(capsys):
    code = poprun.main(["--num-replicas", "2", "--num-instances", "2",
                        "--mpi-global-args=--tag-output -x FOO=bar -x HOME",
                        "--mpi-local-args=-x BAZ='two words'", "-x", "ZED=1", *ECHO])
    out, err = capsys.readouterr()
    assert code == 0
    assert _tagged(out) == ["[1,0]<stdout>:bar two words 1", "[1,1]<stdout>:bar two words 1"]
    assert err == ""  # --tag-output and -x are honoured, so nothing is ignored


def test_a_malformed_export_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        poprun.main(["--num-replicas", "1", "--mpi-global-args=-x", *ECHO])
    assert exit_.value.code == 2
    assert "--mpi-global-args: -x needs NAME or NAME=VALUE" in capsys.readouterr().err


def test_the_flags_that_mean_nothing_here_are_accepted_and_named_once(capsys):
    code = poprun.main([
        "--num-replicas", "2", "--num-instances", "2", "--vipu-server-host=10.1.2.3",
        "--vipu-server-port", "8090", "--vipu-partition=p16", "--numa-aware=yes",
        "--reset-partition=no", "--update-partition=yes", "--vipu-allocation", "a",
        "--executable-cache-path", "/tmp/cache", "-H", "pod-host-1,pod-host-2",
        "--mpi-global-args=--tag-output --allow-run-as-root --bind-to none -x FOO=bar",
        *ECHO])
    out, err = capsys.readouterr()
    assert code == 0
    assert _tagged(out) == ["[1,0]<stdout>:bar unset unset", "[1,1]<stdout>:bar unset unset"]
    notices = [line for line in err.splitlines() if line.startswith("poprun: ignoring")]
    assert len(notices) == 1
    for given in ("--vipu-server-host=10.1.2.3", "--vipu-server-port=8090",
                  "--vipu-partition=p16", "--numa-aware=yes", "--reset-partition=no",
                  "--update-partition=yes", "--vipu-allocation=a",
                  "--executable-cache-path=/tmp/cache", "--host=pod-host-1,pod-host-2",
                  "--mpi-global-args='--allow-run-as-root --bind-to none'"):
        assert given in notices[0]
    assert "-x FOO" not in notices[0] and "--tag-output" not in notices[0]


def test_this_host_is_no_ignored_host(capsys):
    assert poprun.main(["--num-replicas", "1", "-H", "localhost", "true"]) == 0
    assert capsys.readouterr().err == ""


def test_print_topology_shows_each_instances_replicas_and_ipus(capsys):
    assert poprun.main(["--num-replicas", "4", "--num-instances", "2", "--ipus-per-replica",
                        "2", "--print-topology=yes", "true"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert rows[0] == ["instance", "host", "replicas", "IPUs"]
    assert [(row[0], row[2], row[3]) for row in rows[1:]] == [("0", "0-1", "0-3"),
                                                               ("1", "2-3", "4-7")]
    with pytest.raises(SystemExit):
        poprun.main(["--num-replicas", "1", "--print-topology", "maybe", "true"])
    assert "must be one of yes, no" in capsys.readouterr().err


def _staged():
    return torch.nn.Sequential(torch.nn.Linear(4, 4),
                               poptorch.BeginBlock(torch.nn.Linear(4, 2), ipu_id=1))


@pytest.mark.parametrize("given, model, needed", [("2", torch.nn.Linear(4, 2), 1),
                                                   ("1", None, 2)])
def test_a_model_on_another_number_of_ipus_than_poprun_gave_is_refused(monkeypatch, given,
                                                                       model, needed):
    monkeypatch.setenv("POPDIST_NUM_IPUS_PER_REPLICA", given)
    opts = poptorch.Options()
    if model is None:
        model = _staged()
        opts.setExecutionStrategy(poptorch.ShardedExecution())
    wrapped = poptorch.inferenceModel(model, opts)
    with pytest.raises(ValueError, match=rf"needs {needed} IPU\(s\) per replica but poprun was "
                                         rf"run with --ipus-per-replica {given}"):
        wrapped(torch.ones(1, 4))


def test_a_model_on_as_many_ipus_as_poprun_gave_runs(monkeypatch):
    monkeypatch.setenv("POPDIST_NUM_IPUS_PER_REPLICA", "2")
    opts = poptorch.Options().setExecutionStrategy(poptorch.ShardedExecution())
    assert poptorch.inferenceModel(_staged(), opts)(torch.ones(1, 4)).shape == (1, 2)
