"""How replicas number their IPUs: replica r has the IPUs from r x IPUs per replica on.

Written once, here below the plan, so that the recorder numbers the replicas of
its rows without asking the plan at run time, and the plan
(:meth:`~ipusim.plan.engine_plan.EnginePlan.replica_of`, ``ipu_of``) reads the
same rule.
"""
from __future__ import annotations

import numpy as np


def replica_of(ipu: int | np.ndarray, ipus_per_replica: int) -> int | np.ndarray:
    """The replica whose IPUs include ``ipu`` (an index, or an array of them)."""
    return ipu // ipus_per_replica


def ipu_of(replica: int | np.ndarray, index: int | np.ndarray,
           ipus_per_replica: int) -> int | np.ndarray:
    """IPU ``index`` of ``replica`` (indices, or arrays of them): the inverse of
    :func:`replica_of`."""
    return replica * ipus_per_replica + index
