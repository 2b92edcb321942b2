"""Sync groups GS1 and GS2, and the barrier that makes IPUs meet.

Every IPU belongs to one GS1 group (used for host I/O) and to GS2 (all IPUs,
used for IPU-to-IPU exchange). The sync pattern decides GS1 (PopART's performance notes):

| pattern          | GS1                         | GS2      |
|------------------|-----------------------------|----------|
| Full             | all IPUs                    | all IPUs |
| SinglePipeline   | each IPU alone              | all IPUs |
| ReplicaAndLadder | alternate IPUs: {A,C},{B,D} | all IPUs |
"""
from __future__ import annotations

import enum

import simpy
from simpy.core import NORMAL

Group = tuple[int, ...]


class SyncPattern(enum.Enum):
    """PopART's sync patterns: which IPUs sync together for host I/O (GS1)."""

    FULL = "Full"
    SINGLE_PIPELINE = "SinglePipeline"
    REPLICA_AND_LADDER = "ReplicaAndLadder"


def gs1_group(pattern: SyncPattern, ipu: int, num_ipus: int) -> Group:
    """The GS1 group of ``ipu`` among IPUs ``0 .. num_ipus-1``."""
    if pattern is SyncPattern.FULL:
        return tuple(range(num_ipus))
    if pattern is SyncPattern.SINGLE_PIPELINE:
        return (ipu,)
    return tuple(range(ipu % 2, num_ipus, 2))


def gs2_group(num_ipus: int) -> Group:
    """GS2: every IPU, under every pattern."""
    return tuple(range(num_ipus))


class _Release(simpy.Event):
    """An event that fires a given delay after the last member arrives."""

    def fire_after(self, delay: int) -> None:
        self._ok = True
        self._value = None
        self.env.schedule(self, NORMAL, delay)


class Barrier:
    """A reusable barrier: the k-th ``wait`` of every member returns one event.

    The event fires ``delay`` after the last member arrives (the sync's own
    latency). A member may call ``wait`` before its arrival time (while the
    clock has not caught up with its busy time): the release is at the
    latest arrival, never before the clock. Members cannot run ahead a
    generation: each waits on the current one before it can arrive at the next.
    """

    def __init__(self, env: simpy.Environment, size: int):
        self.env = env
        self.size = size
        self._arrived = 0
        self._latest = 0
        self._release = _Release(env)

    def wait(self, delay: int, arrival: int) -> simpy.Event:
        """The event that releases this generation; ``arrival`` (>= now) is when this member
        gets to the sync."""
        release = self._release
        self._arrived += 1
        if arrival > self._latest:
            self._latest = arrival
        if self._arrived == self.size:
            release.fire_after(self._latest + delay - self.env.now)
            self._arrived = self._latest = 0
            self._release = _Release(self.env)
        return release
