"""ipusim's errors as PopTorch raises them: a script that catches ``poptorch.Error``
catches every refusal the simulator makes inside a model call.

The simulator speaks of its own settings and knows nothing of PopTorch; the
model's entry points (a call, ``compile``) translate what it raises here,
once, into the shim's :mod:`~poptorch_shim.errors` classes, raised afresh so
that the traceback ends at the model call rather than deep in the simulator.
"""
from __future__ import annotations

from ipusim.plan.memory import OutOfMemoryError as SimulatorOutOfMemory
from poptorch_shim.errors import OutOfMemoryError

#: What a model call may raise from the simulator, to be translated.
SIMULATOR_ERRORS = (SimulatorOutOfMemory,)


def poptorch_error(error: SimulatorOutOfMemory) -> Exception:
    """The PopTorch error for ``error``, one of :data:`SIMULATOR_ERRORS`, with its message."""
    return OutOfMemoryError(str(error), error.memory)
