"""``popdist.poptorch.Options``: ``poptorch.Options`` laid out by poprun.

The replication factor is this instance's local replica count and
``Distributed`` says which instance this is of how many, all read from the
environment poprun sets (see :mod:`poptorch_shim.popdist`). Those settings
belong to poprun, so their setters raise ``RuntimeError`` naming the method,
as PopDist's do; every other option is set as with ``poptorch.Options``.
A ``poptorch.DataLoader`` given these options reads this instance's part of
the dataset, and a training model built with them all-reduces its gradients
with the other instances.
"""

from poptorch_shim import popdist
from poptorch_shim._options.groups import _DistributedOptions
from poptorch_shim._options.store import OptionsGroup, require_arg
from poptorch_shim.options import Options as _PoptorchOptions

_CLASS = "popdist.poptorch.Options"


def _refused(method: str, reason: str) -> RuntimeError:
    return RuntimeError(f"Cannot call `{method}` with {_CLASS}. {reason}")


def _layout() -> str:
    """The poprun command-line options that decide the run's layout."""
    return (f"--num-replicas {popdist.getNumTotalReplicas()} --num-instances "
            f"{popdist.getNumInstances()}")


class _PopdistDistributedOptions(_DistributedOptions):
    """``Options.Distributed`` whose process id and count are poprun's instance
    index and count; the setters that would change them raise."""

    def __init__(self, process_id: int, num_processes: int) -> None:
        OptionsGroup.__init__(self)  # not from OMPI_COMM_WORLD_*: from poprun's layout
        self._store_ids(process_id, num_processes, "__init__")

    def _refuse(self, method: str) -> RuntimeError:
        return _refused(f"Distributed.{method}",
                        f"poprun makes this process instance {self.process_id} of "
                        f"{self.num_processes} ({_layout()}); to choose the process id and "
                        "count yourself use poptorch.Options.")

    # Refused whatever the arguments, as PopDist refuses them.
    def disable(self, *args, **kwargs):
        raise self._refuse("disable")

    def setEnvVarNames(self, *args, **kwargs):
        raise self._refuse("setEnvVarNames")

    def configureProcessId(self, *args, **kwargs):
        raise self._refuse("configureProcessId")


class Options(_PoptorchOptions):
    """``poptorch.Options`` for an instance of a poprun run.

    >>> opts = popdist.poptorch.Options()  # under poprun --num-replicas 8 --num-instances 4
    >>> opts.replication_factor, opts.Distributed.processId, opts.Distributed.numProcesses
    (2, <instance index>, 4)

    ``ipus_per_replica``, if given, must agree with poprun's
    ``--ipus-per-replica``. Without poprun the options describe a single
    instance with one replica.
    """
    _path = _CLASS

    def __init__(self, ipus_per_replica: int | None = None) -> None:
        super().__init__()
        if ipus_per_replica is not None:
            require_arg(_CLASS, "__init__", "ipus_per_replica", ipus_per_replica, int, minimum=1)
            if not popdist.checkNumIpusPerReplica(ipus_per_replica):
                raise ValueError(
                    f"{_CLASS}: ipus_per_replica={ipus_per_replica} does not match poprun's "
                    f"--ipus-per-replica {popdist.getNumIpusPerReplica()} "
                    f"({popdist.IPUS_PER_REPLICA}); pass the same number to both.")
        local, total = popdist.getNumLocalReplicas(), popdist.getNumTotalReplicas()
        self._set("replication_factor", local)
        self._distributed = _PopdistDistributedOptions(popdist.getInstanceIndex(),
                                                       popdist.getNumInstances())
        if total != local:
            # What PopDist tells PopART about the replicas of the other instances.
            self._popart.set("enableDistributedReplicatedGraphs", True)
            self._popart.set("globalReplicationFactor", total)
            self._popart.set("globalReplicaOffset", popdist.getReplicaIndexOffset())

    def replicationFactor(self, *args, **kwargs):
        raise _refused("replicationFactor",
                       f"The replication factor is this instance's local replica count "
                       f"({self.replication_factor}), which poprun sets ({_layout()}); change "
                       "poprun's --num-replicas or --num-instances instead.")

    def useIpuId(self, *args, **kwargs):
        raise _refused("useIpuId", "poprun chooses the IPUs of every instance; change "
                                   "poprun's --ipus-per-replica to give each replica more.")
