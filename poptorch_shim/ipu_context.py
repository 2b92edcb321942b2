"""``poptorch.isRunningOnIpu()``: whether the code is running as an IPU model.

True while a ``trainingModel`` or ``inferenceModel`` runs the user's forward
(compiling or computing a micro-batch), False everywhere else, so a model can
take a different path on the IPU than on the CPU::

    if poptorch.isRunningOnIpu():
        ...  # IPU path
"""
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_ON_IPU: ContextVar[bool] = ContextVar("poptorch_running_on_ipu", default=False)


def isRunningOnIpu() -> bool:
    """True when executing as an IPU model, False when run as plain torch."""
    return _ON_IPU.get()


@contextmanager
def running_on_ipu() -> Iterator[None]:
    """Make :func:`isRunningOnIpu` return True inside the ``with`` body."""
    token = _ON_IPU.set(True)
    try:
        yield
    finally:
        _ON_IPU.reset(token)
