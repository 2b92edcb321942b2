"""How PopLibs' replicated collectives split an all-reduce into ring steps, and
which IPU-Links each step crosses.

An all-reduce is a reduce-scatter, then an all-gather (graphcore/poplibs f5f9369,
``lib/popops/ReplicatedCollectives.cpp:1761-1795``: the last public version of
the collectives, before they moved to the closed GCL). Each runs as a ring over
the IPU-Links whose every step copies one fragment to a neighbour. Which ring
depends on the buffer's size, the replicas in one IPU-Link domain, the IPUs of a
replica and the links' topology (``pickAllGatherMethod`` and
``pickReduceScatterMethod``, RC:434-523).

The IPUs sit on a ladder: IPU ``2k`` and ``2k + 1`` are a pair joined across the
rung, and each rail runs from an IPU to the one two above it. PopLibs' own
model of the links (``lib/poplibs_test/Util.cpp:360-430`` at graphcore/poplibs
7eac0f2) gives a pair's own traffic 4 links each way, each rail 2 links each
way, every link at 0.85 of its rate; traffic between IPUs further apart is
routed hop by hop along the rails and shares them. A ring of single-IPU replicas
runs up one rail and down the other (``RingPattern::Interleaved``: 0, 2, 4, ...,
5, 3, 1, RC:100-160, 183-190), so its slowest step is a rail's 2 links (a pair of
replicas: the rung's 4); replicas of ``k`` IPUs ring replica to replica
(``Flat`` on a torus, ``Interleaved`` on a mesh), each IPU of a replica copying
to the same IPU of the next, ``k`` IPUs along: the ``k / 2`` copies that run up
each rail at once share its links.
"""
from __future__ import annotations

REDUCE_SCATTER = "reduce-scatter"
ALL_GATHER = "all-gather"

CLOCKWISE = "clockwise"
BIDIRECTIONAL = "bidirectional"
MEET_IN_MIDDLE = "meet-in-middle"
QUAD_DIRECTIONAL = "quad-directional"

# Bytes below which a ring of single-IPU replicas meets in the middle rather than
# running a bidirectional pair of rings, by the number of replicas it spans
# (RC:513-522 for the reduce-scatter, on the whole buffer; RC:462-471 for the
# all-gather, on the scattered share).
_MEET_IN_MIDDLE_BELOW = {
    REDUCE_SCATTER: ((4, 1_245_184), (8, 4_980_736), (16, 39_845_888)),
    ALL_GATHER: ((4, 622_592), (8, 2_490_368), (16, 19_922_944)),
}

#: Bytes of each replica's share below which a BarleyTwist ring meets in the
#: middle, above which it runs four rings (RC:444-453 for the all-gather's share,
#: 494-503 for the reduce-scatter's whole buffer, 196,608 x the replicas).
BARLEY_TWIST_QUAD_FROM = 196_608


def ring_method(phase: str, nbytes: float, replicas: int, ipus_per_replica: int = 1,
                torus: bool = False, barley_twist: bool = False) -> str:
    """The ring PopLibs picks for one phase of an all-reduce of ``nbytes`` (the
    whole buffer) across ``replicas`` in one IPU-Link domain (RC:434-523).

    A BarleyTwist configuration (single-IPU replicas on a torus only, RC:398-406)
    meets in the middle below 196,608 bytes a replica and otherwise runs four
    rings; on a torus, replicas of more than one IPU meet in the middle (RC:454-458,
    504-507); otherwise multi-IPU replicas and rings of two run one clockwise ring,
    and single-IPU replicas meet in the middle below a size that grows with the
    ring, or past 16 replicas, and run a bidirectional pair of rings above it.
    """
    if replicas <= 1:
        return CLOCKWISE
    share = nbytes / replicas
    if barley_twist:
        return MEET_IN_MIDDLE if share < BARLEY_TWIST_QUAD_FROM else QUAD_DIRECTIONAL
    if torus and ipus_per_replica > 1:
        return MEET_IN_MIDDLE
    if ipus_per_replica > 1 or replicas <= 2:
        return CLOCKWISE
    if replicas > 16:
        return MEET_IN_MIDDLE
    size = nbytes if phase == REDUCE_SCATTER else share
    for most_replicas, below in _MEET_IN_MIDDLE_BELOW[phase]:
        if replicas <= most_replicas:
            return MEET_IN_MIDDLE if size < below else BIDIRECTIONAL
    return MEET_IN_MIDDLE


def ring_steps(phase: str, nbytes: float, replicas: int, ipus_per_replica: int = 1,
               torus: bool = False, barley_twist: bool = False) -> tuple[int, float]:
    """Steps of one phase and the bytes each step sends one way over one hop.

    ``nbytes`` is the all-reduce's whole buffer (the all-gather gathers its
    1/``replicas`` share). A clockwise ring splits the buffer into ``replicas`` fragments and takes
    ``replicas - 1`` steps (RC:883-948); a bidirectional pair splits it into
    twice as many and sends half each way in the same steps (RC:951-989); four
    rings (BarleyTwist: each way on the serpent ring and its mirror) a quarter
    on each (RC:1027-1070); meeting in the middle sends a whole fragment each way
    in ``replicas // 2`` steps (RC:1072-1113, CollectivesProgram.hpp:249-332),
    and a ring of two meets in one clockwise step (RC:1079-1085).
    """
    fragment = nbytes / replicas
    method = ring_method(phase, nbytes, replicas, ipus_per_replica, torus, barley_twist)
    if method == CLOCKWISE or replicas <= 2:
        return replicas - 1, fragment
    if method == BIDIRECTIONAL:
        return replicas - 1, fragment / 2
    if method == QUAD_DIRECTIONAL:
        return replicas - 1, fragment / 4
    return -(-replicas // 2), fragment


def ring_links(replicas: int, ipus_per_replica: int, rung_links: float, rail_links: float,
               barley_twist: bool = False) -> float:
    """IPU-Links one copy of a ring step gets each way on its slowest hop.

    Two single-IPU replicas are the two IPUs of a pair: the rung's links. A
    longer ring of single-IPU replicas steps up one rail and down the other, one
    copy a rail. A BarleyTwist ring's four copies of a step share the rails two
    by two (an assumption: PopLibs' model has no BarleyTwist wiring). Replicas of
    ``k`` IPUs copy ``k`` IPUs along, routed up the rails two IPUs a hop
    (Util.cpp:382-399): the ``k / 2`` copies that cross each rail at once share
    it (one each for ``k`` = 2).
    """
    if ipus_per_replica <= 1:
        if replicas <= 2:
            return rung_links
        return rail_links / 2 if barley_twist else rail_links
    return rail_links * min(1.0, 2 / ipus_per_replica)
