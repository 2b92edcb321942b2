"""``poptorch.isRunningOnIpu()``: whether the code is running as an IPU model.

True while a ``trainingModel`` or ``inferenceModel`` runs the user's forward
(compiling or computing a micro-batch), False everywhere else, so a model can
take a different path on the IPU than on the CPU::

    if poptorch.isRunningOnIpu():
        ...  # IPU path

The shim's own operators also ask which kind of model runs them (PopTorch's
control flow is for inference only) and whether the forward runs to be
compiled rather than to compute a micro-batch (a print happens only when the
program runs).
"""
from contextvars import ContextVar
from typing import NamedTuple


class _IpuRun(NamedTuple):
    training: bool
    compiling: bool


_ON_IPU: ContextVar[_IpuRun | None] = ContextVar("poptorch_running_on_ipu", default=None)


def isRunningOnIpu() -> bool:
    """True when executing as an IPU model, False when run as plain torch."""
    return _ON_IPU.get() is not None


def in_training_model() -> bool:
    """Whether a training model (``trainingModel``) is running the code."""
    run = _ON_IPU.get()
    return run is not None and run.training


def compiling() -> bool:
    """Whether the model runs to be compiled (measured once), not to compute a
    micro-batch of a call."""
    run = _ON_IPU.get()
    return run is not None and run.compiling


class running_on_ipu:
    """Make :func:`isRunningOnIpu` return True inside the ``with`` body, for a
    ``training`` model or an inference one, ``compiling`` it or computing (a
    class rather than a generator: every model call enters it)."""

    __slots__ = ("_run", "_token")

    def __init__(self, training: bool, compiling: bool = False):
        self._run = _IpuRun(training, compiling)

    def __enter__(self) -> None:
        self._token = _ON_IPU.set(self._run)

    def __exit__(self, *exc) -> None:
        _ON_IPU.reset(self._token)
