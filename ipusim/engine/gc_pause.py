"""Pausing Python's cyclic garbage collector around bulk work.

Building the programs, running them and converting the event record each
allocate millions of small acyclic tuples; every full collection would rescan
all of them, making the work grow faster than the events. None of that work
leaves reference cycles behind, so nothing is lost by pausing.
"""
from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def cyclic_gc_paused() -> Iterator[None]:
    """Disable the cyclic collector inside the ``with`` body (if it was enabled)."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
