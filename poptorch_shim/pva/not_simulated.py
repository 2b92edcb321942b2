"""The error a libpva field raises when a simulation has no figure for it."""
from __future__ import annotations


class NotSimulatedError(AttributeError):
    """A field of libpva's API that ipusim's simulation does not give, and why. It is an
    ``AttributeError``, so ``hasattr(report.compilation.graph, "numVertices")`` is False:
    a script that checks for a field before reading it works unchanged."""

    def __init__(self, field: str, why: str):
        super().__init__(f"{field} is not simulated: {why}.")
