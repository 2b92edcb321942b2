"""How PopLibs' replicated collectives split an all-reduce into ring steps.

An all-reduce is a reduce-scatter, then an all-gather (graphcore/poplibs f5f9369,
``lib/popops/ReplicatedCollectives.cpp:1761-1795``: the last public version of
the collectives, before they moved to the closed GCL). Each runs as a ring over
the IPU-Links whose every step copies one fragment to a neighbour. Which ring
depends on the buffer's size and the number of replicas (``pickReduceScatterMethod``
and ``pickAllGatherMethod``, RC:434-523); the ring visits neighbours on the
machines' IPU-Link ladder (even replicas up one rail, odd ones down the other,
RC:140-150, 187-190), so every step crosses one link between neighbours.
"""
from __future__ import annotations

REDUCE_SCATTER = "reduce-scatter"
ALL_GATHER = "all-gather"

# Bytes below which a ring of single-IPU replicas meets in the middle rather than
# running a bidirectional pair of rings, by the number of replicas it spans
# (RC:513-522 for the reduce-scatter, on the whole buffer; RC:462-471 for the
# all-gather, on the scattered share).
_MEET_IN_MIDDLE_BELOW = {
    REDUCE_SCATTER: ((4, 1_245_184), (8, 4_980_736), (16, 39_845_888)),
    ALL_GATHER: ((4, 622_592), (8, 2_490_368), (16, 19_922_944)),
}


def ring_method(phase: str, nbytes: float, replicas: int, ipus_per_replica: int = 1) -> str:
    """The ring PopLibs picks for one phase of an all-reduce (RC:434-523).

    Multi-IPU replicas and rings of two run one clockwise ring; single-IPU
    replicas meet in the middle below a size that grows with the ring, or past
    16 replicas, and otherwise run a bidirectional pair of rings.
    """
    if ipus_per_replica > 1 or replicas <= 2:
        return "clockwise"
    size = nbytes if phase == REDUCE_SCATTER else nbytes / replicas
    if replicas > 16:
        return "meet-in-middle"
    for most_replicas, below in _MEET_IN_MIDDLE_BELOW[phase]:
        if replicas <= most_replicas:
            return "meet-in-middle" if size < below else "bidirectional"
    return "meet-in-middle"


def ring_steps(phase: str, nbytes: float, replicas: int,
               ipus_per_replica: int = 1) -> tuple[int, float]:
    """Steps of one phase and the bytes each step sends one way over one link.

    A clockwise ring splits the buffer into ``replicas`` fragments and takes
    ``replicas - 1`` steps (RC:883-948); a bidirectional pair splits it into twice
    as many and sends half each way in the same steps (RC:951-989); meeting in
    the middle sends a whole fragment each way in ``replicas // 2`` steps
    (RC:1072-1113, CollectivesProgram.hpp:249-332).
    """
    method = ring_method(phase, nbytes, replicas, ipus_per_replica)
    if method == "clockwise":
        return replicas - 1, nbytes / replicas
    if method == "bidirectional":
        return replicas - 1, nbytes / (2 * replicas)
    return -(-replicas // 2), nbytes / replicas
