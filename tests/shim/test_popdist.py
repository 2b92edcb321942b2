"""popdist: the run's layout read from the environment poprun sets, and
``popdist.poptorch.Options`` built from it. Everything here runs in this
process, with poprun's environment for one instance patched in."""
import logging
import sys

import pytest
import torch

import poptorch_shim as poptorch
from poptorch_shim import popdist
from poptorch_shim._core.aliases import ALIASES
from poptorch_shim._distributed import process_group
from poptorch_shim._distributed.poprun import Layout
from poptorch_shim.popdist.poptorch import Options as PopdistOptions

pytestmark = [pytest.mark.slow]  # starts distributed instances


POPRUN_VARIABLES = tuple(Layout(1, 1).environment(0, 0))


@pytest.fixture(autouse=True)
def no_poprun(monkeypatch):
    """Start every test as a process that poprun did not start."""
    for name in POPRUN_VARIABLES:
        monkeypatch.delenv(name, raising=False)


def as_instance(monkeypatch, index, replicas=8, instances=4, ipus_per_replica=1):
    """Give this process the environment poprun gives instance ``index``."""
    layout = Layout(replicas, instances, ipus_per_replica)
    for name, value in layout.environment(index, 29500).items():
        monkeypatch.setenv(name, value)


def test_without_poprun_the_layout_is_one_instance_with_one_replica():
    assert not popdist.isPopdistEnvSet()
    assert (popdist.getNumTotalReplicas(), popdist.getNumLocalReplicas(),
            popdist.getReplicaIndexOffset(), popdist.getNumIpusPerReplica(),
            popdist.getInstanceIndex(), popdist.getNumInstances(),
            popdist.getLocalInstanceIndex()) == (1, 1, 0, 1, 0, 1, 0)
    opts = PopdistOptions()
    assert opts.replication_factor == 1
    assert (opts.Distributed.processId, opts.Distributed.numProcesses) == (0, 1)
    popdist.init()  # a single instance has nobody to meet


@pytest.mark.parametrize("index", range(4))
def test_each_instance_reads_its_place_in_the_run(monkeypatch, index):
    as_instance(monkeypatch, index, replicas=8, instances=4, ipus_per_replica=2)
    assert popdist.isPopdistEnvSet()
    assert popdist.getNumTotalReplicas() == 8
    assert popdist.getNumLocalReplicas() == 2
    assert popdist.getReplicaIndexOffset() == 2 * index
    assert popdist.getNumIpusPerReplica() == 2
    assert (popdist.getInstanceIndex(), popdist.getNumInstances()) == (index, 4)
    assert popdist.getLocalInstanceIndex() == index


def test_popdist_options_take_the_local_replicas_and_the_instance(monkeypatch):
    as_instance(monkeypatch, 3)
    opts = PopdistOptions()
    assert isinstance(opts, poptorch.Options)
    assert opts.replication_factor == 2
    assert (opts.Distributed.processId, opts.Distributed.numProcesses) == (3, 4)
    assert (opts.Distributed.process_id, opts.Distributed.num_processes) == (3, 4)
    popart = opts._Popart.options
    assert popart["globalReplicationFactor"] == 8 and popart["globalReplicaOffset"] == 6
    # Every option poprun does not own is set as usual, and the copy is still popdist's.
    opts.deviceIterations(4).Training.gradientAccumulation(3)
    clone = opts.clone()
    assert (clone.device_iterations, clone.replication_factor) == (4, 2)
    with pytest.raises(RuntimeError, match="Cannot call `replicationFactor`"):
        clone.replicationFactor(2)


@pytest.mark.parametrize("call, method", [
    (lambda o: o.replicationFactor(2), "replicationFactor"),
    (lambda o: o.useIpuId(1), "useIpuId"),
    (lambda o: o.Distributed.configureProcessId(0, 2), "Distributed.configureProcessId"),
    (lambda o: o.Distributed.disable(), "Distributed.disable"),
    (lambda o: o.Distributed.setEnvVarNames("SIZE", "RANK"), "Distributed.setEnvVarNames"),
])
def test_setters_that_poprun_owns_raise_naming_the_method(monkeypatch, call, method):
    as_instance(monkeypatch, 1)
    opts = PopdistOptions()
    with pytest.raises(RuntimeError) as error:
        call(opts)
    assert str(error.value).startswith(f"Cannot call `{method}` with popdist.poptorch.Options")
    assert "--num-replicas 8 --num-instances 4" in str(error.value) or method == "useIpuId"
    assert opts.replication_factor == 2 and opts.Distributed.processId == 1


def test_the_seed_error_message_for_replication_factor():
    with pytest.raises(RuntimeError, match=r"^Cannot call `replicationFactor` with "
                                           r"popdist\.poptorch\.Options"):
        PopdistOptions().replicationFactor(2)


def test_ipus_per_replica_must_agree_with_poprun(monkeypatch):
    as_instance(monkeypatch, 0, replicas=4, instances=2, ipus_per_replica=2)
    assert PopdistOptions(ipus_per_replica=2).replication_factor == 2
    with pytest.raises(ValueError, match=r"ipus_per_replica=4 does not match poprun's "
                                         r"--ipus-per-replica 2"):
        PopdistOptions(ipus_per_replica=4)
    with pytest.raises(TypeError, match="ipus_per_replica must be an int"):
        PopdistOptions(ipus_per_replica="2")


def test_a_malformed_variable_is_named(monkeypatch):
    monkeypatch.setenv("POPDIST_NUM_LOCAL_REPLICAS", "two")
    with pytest.raises(ValueError, match=r"POPDIST_NUM_LOCAL_REPLICAS must hold an integer "
                                         r">= 1, got 'two'"):
        popdist.getNumLocalReplicas()


@pytest.mark.parametrize("replicas, instances, batch, steps, step_size", [
    (8, 4, 32, 195, 64),   # the distributed data-loading chapter, step 3
    (4, 4, 32, 390, 32),
    (6, 3, 5, 1666, 10),
])
def test_the_dataloader_gives_each_instance_a_contiguous_shard(
        monkeypatch, replicas, instances, batch, steps, step_size):
    """Seed 004's table: the instances' shards are contiguous, do not overlap and
    cover all but fewer than one step per instance of the dataset."""
    dataset = list(range(50000))
    shards = []
    for index in range(instances):
        as_instance(monkeypatch, index, replicas, instances)
        loader = poptorch.DataLoader(PopdistOptions(), dataset, batch_size=batch)
        assert len(loader) == steps
        first = next(iter(loader))
        assert len(first) == step_size
        shards.append(list(loader.sampler))
    starts = [shard[0] for shard in shards]
    for shard in shards:
        assert shard == list(range(shard[0], shard[0] + len(shard)))
    assert starts == [i * steps * step_size for i in range(instances)]
    covered = sum(len(shard) for shard in shards)
    assert covered == instances * steps * step_size
    assert len(dataset) - covered < instances * step_size


def test_import_popdist_under_the_runner_is_this_package(monkeypatch):
    monkeypatch.syspath_prepend(str(ALIASES))
    names = ("popdist", "popdist.poptorch")
    try:
        import popdist as aliased
        import popdist.poptorch
        assert aliased is popdist and sys.modules["popdist"] is popdist
        assert popdist.poptorch is sys.modules["poptorch_shim.popdist.poptorch"]
        assert sys.modules["popdist.poptorch"].Options is PopdistOptions
    finally:
        for name in names:
            sys.modules.pop(name, None)


def test_init_needs_the_rendezvous_poprun_sets(monkeypatch):
    as_instance(monkeypatch, 1, replicas=4, instances=2)
    monkeypatch.delenv("MASTER_ADDR")
    with pytest.raises(RuntimeError, match=r"instance 1 of 2, but MASTER_ADDR/MASTER_PORT/"
                                           r"RANK/WORLD_SIZE are not set"):
        popdist.init()


def test_a_process_id_that_disagrees_with_poprun_is_refused(monkeypatch):
    as_instance(monkeypatch, 1, replicas=4, instances=2)
    opts = poptorch.Options()
    opts.Distributed.configureProcessId(0, 2)
    with pytest.raises(ValueError, match=r"process 0 of 2, but poprun started it as "
                                         r"instance 1 of 2"):
        process_group.join_instances(opts.Distributed)
    assert not torch.distributed.is_initialized()


def test_training_without_a_rendezvous_warns_and_stays_alone(monkeypatch, caplog):
    opts = poptorch.Options()
    opts.Distributed.configureProcessId(1, 2)
    model = torch.nn.Linear(2, 1)
    with caplog.at_level(logging.WARNING, logger=process_group.__name__):
        assert not process_group.join_instances(opts.Distributed)
        poptorch.trainingModel(model, opts)
    assert "process 1 of 2" in caplog.text and "poprun" in caplog.text
    assert not torch.distributed.is_initialized()
