"""``popdist``: what an instance of a poprun run knows about the run.

PopRun starts each instance with the run's layout in its environment:
``POPDIST_NUM_TOTAL_REPLICAS``, ``POPDIST_NUM_LOCAL_REPLICAS``,
``POPDIST_REPLICA_INDEX_OFFSET``, ``POPDIST_NUM_IPUS_PER_REPLICA``,
``POPDIST_LOCAL_INSTANCE_INDEX`` and ``POPDIST_UNIFORM_REPLICAS_PER_INSTANCE``
(PopRun's own names); these functions read it, with PopDist's defaults when
the script runs without poprun. ``popdist.poptorch.Options`` builds
``poptorch.Options`` from it. Under the ipusim runner and in poprun's
instances ``import popdist`` resolves to this package.
"""
import os

from poptorch_shim._distributed import process_group

TOTAL_REPLICAS = "POPDIST_NUM_TOTAL_REPLICAS"
LOCAL_REPLICAS = "POPDIST_NUM_LOCAL_REPLICAS"
REPLICA_INDEX_OFFSET = "POPDIST_REPLICA_INDEX_OFFSET"
IPUS_PER_REPLICA = "POPDIST_NUM_IPUS_PER_REPLICA"
LOCAL_INSTANCE_INDEX = "POPDIST_LOCAL_INSTANCE_INDEX"
UNIFORM_REPLICAS = "POPDIST_UNIFORM_REPLICAS_PER_INSTANCE"


def _read(name: str, default: int, minimum: int) -> int:
    """An integer from the environment, ``default`` when unset."""
    text = os.environ.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < minimum:
        raise ValueError(f"popdist: environment variable {name} must hold an integer >= "
                         f"{minimum}, got {text!r}; it is set by poprun, launch the script "
                         "with poprun instead of setting it by hand.")
    return value


def isPopdistEnvSet() -> bool:
    """Whether this process was started by poprun."""
    return TOTAL_REPLICAS in os.environ


def getNumTotalReplicas() -> int:
    """Replicas over all instances (``--num-replicas``); 1 without poprun."""
    return _read(TOTAL_REPLICAS, 1, 1)


def getNumLocalReplicas() -> int:
    """Replicas of this instance; 1 without poprun."""
    return _read(LOCAL_REPLICAS, 1, 1)


def getReplicaIndexOffset() -> int:
    """Global index of this instance's first replica; 0 without poprun."""
    return _read(REPLICA_INDEX_OFFSET, 0, 0)


def getNumIpusPerReplica() -> int:
    """IPUs each replica uses (``--ipus-per-replica``); 1 without poprun."""
    return _read(IPUS_PER_REPLICA, 1, 1)


def getLocalInstanceIndex() -> int:
    """Index of this instance among those on its host; 0 without poprun."""
    return _read(LOCAL_INSTANCE_INDEX, 0, 0)


def _uniform_replicas() -> int:
    """The replicas of every instance, checking that they are all alike."""
    if _read(UNIFORM_REPLICAS, 1, 0) != 1:
        raise RuntimeError("popdist: the instance index and count are only defined when every "
                           "instance has the same number of replicas "
                           f"({UNIFORM_REPLICAS}=1), got {os.environ[UNIFORM_REPLICAS]!r}.")
    local, total = getNumLocalReplicas(), getNumTotalReplicas()
    if total % local:
        raise RuntimeError(f"popdist: {TOTAL_REPLICAS}={total} is not a multiple of "
                           f"{LOCAL_REPLICAS}={local}; launch the script with poprun, which "
                           "sets both.")
    return local


def getNumInstances() -> int:
    """Instances of the run (``--num-instances``); 1 without poprun."""
    return getNumTotalReplicas() // _uniform_replicas()


def getInstanceIndex() -> int:
    """Index of this instance, from 0 to ``getNumInstances() - 1``; 0 without poprun."""
    return getReplicaIndexOffset() // _uniform_replicas()


def checkNumIpusPerReplica(ipus_per_replica: int) -> bool:
    """Whether ``ipus_per_replica`` agrees with poprun's ``--ipus-per-replica``
    (always True without poprun)."""
    return IPUS_PER_REPLICA not in os.environ or getNumIpusPerReplica() == ipus_per_replica


def init() -> None:
    """Join this run's other instances for collective operations (a gloo
    process group on loopback); nothing to do in a single instance.

    Training models join by themselves; call this to use ``torch.distributed``
    in the script before building one.
    """
    instances = getNumInstances()
    if instances == 1:
        return
    if not process_group.has_rendezvous():
        raise RuntimeError(
            f"popdist.init: this is instance {getInstanceIndex()} of {instances}, but "
            f"{'/'.join(process_group.RENDEZVOUS_VARIABLES)} are not set, so the instances "
            "cannot meet; launch the script with poprun, which sets them.")
    process_group.ensure_process_group(getInstanceIndex(), instances)


__all__ = [
    "checkNumIpusPerReplica", "getInstanceIndex", "getLocalInstanceIndex", "getNumInstances",
    "getNumIpusPerReplica", "getNumLocalReplicas", "getNumTotalReplicas",
    "getReplicaIndexOffset", "init", "isPopdistEnvSet",
]
