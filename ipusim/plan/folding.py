"""Replica folding: simulate one replica and copy its rows to the others, when that is exact.

Every replica runs the same program (the schedule emits one replica's and
maps it onto each), so replicas differ only where they touch something
another replica also touches. Folding simulates replica 0 alone and the
record gives replica ``r`` the same rows on IPUs ``r * ipus_per_replica + i``.
It is exact, row for row, when

- every sync group either lies inside one replica or takes the same IPUs of
  every replica: a sync ends when its last member arrives, and identical
  replicas arrive at the same times (GS2 spans all IPUs, so it always does;
  GS1 depends on the sync pattern and the IPUs per replica);
- no host link carries two replicas' data: a link serves
  ``ipus_per_host_link`` consecutive IPUs and copies queue on it, so each
  replica must own its links (``ipus_per_replica`` a multiple of
  ``ipus_per_host_link``), unless no data crosses the host links at all.

What the replicas compute is the same by construction: the schedule prices
one replica's work (the all-reduce over all replicas of all instances) and
data never changes a duration. poprun instances are separate engines whose
replicas fold each on their own. Otherwise, or when folding is switched off,
every replica is simulated.
"""
from __future__ import annotations

import os

from ipusim.cost.work import Work
from ipusim.engine.sync_groups import gs1_group
from ipusim.hardware import SystemSpec
from ipusim.plan.run_config import RunConfig

FOLD_ENV = "IPUSIM_FOLD_REPLICAS"


def folding_enabled(fold: bool | None) -> bool:
    """``fold`` if given, else the environment's ``IPUSIM_FOLD_REPLICAS`` (on unless "0")."""
    if fold is not None:
        return fold
    return os.environ.get(FOLD_ENV, "1") != "0"


def fold_blocker(work: Work, run: RunConfig, spec: SystemSpec) -> str | None:
    """Why the replicas of this engine cannot be folded; None when they can."""
    per_replica, replicas = work.ipus_per_replica, run.replicas
    if replicas == 1:
        return "one replica"
    moves_host_data = not run.synthetic_data and (work.input_bytes or work.output_bytes)
    if moves_host_data and per_replica % spec.ipus_per_host_link:
        return (f"replicas share host links (ipus_per_replica={per_replica} is not a multiple "
                f"of ipus_per_host_link={spec.ipus_per_host_link})")
    total = run.ipus(work)
    first: list[set[int]] = []  # replica 0's groups, in its own IPUs
    for ipu in range(total):
        replica, logical = divmod(ipu, per_replica)
        parts = [set() for _ in range(replicas)]
        for member in gs1_group(run.sync_pattern, ipu, total):
            parts[member // per_replica].add(member % per_replica)
        own = parts[replica]
        if replica == 0:
            first.append(own)
        inside = all(not part for r, part in enumerate(parts) if r != replica)
        if own != first[logical] or not (inside or all(part == own for part in parts)):
            return (f"the {run.sync_pattern.value} sync group of IPU {ipu} takes different IPUs "
                    f"of different replicas")
    return None
