"""ipusim's errors as PopTorch raises them: a script that catches ``poptorch.Error``
catches every refusal the simulator makes inside a model call.

The simulator speaks of its own settings and knows nothing of PopTorch; the
shim translates what it raises here, once, into the shim's
:mod:`~poptorch_shim.errors` classes with PopTorch's names for the settings,
raised afresh so that the traceback ends where the shim called the
simulator rather than deep inside it.
"""
from __future__ import annotations

from ipusim.plan.memory import OutOfMemoryError as SimulatorOutOfMemory
from ipusim.plan.run_config import PipelineTooShallow, SettingError
from poptorch_shim._core.option_names import ERROR_NAMES
from poptorch_shim.errors import InvalidUseError, OutOfMemoryError

#: What a model call may raise from the simulator, to be translated.
SIMULATOR_ERRORS = (SimulatorOutOfMemory, SettingError)


def poptorch_error(error: Exception) -> Exception:
    """The PopTorch error for ``error``, one of :data:`SIMULATOR_ERRORS`: the same
    message, or PopTorch's own where PopTorch words the rule (the pipeline's depth)."""
    if isinstance(error, SimulatorOutOfMemory):
        return OutOfMemoryError(str(error), error.memory)
    if isinstance(error, PipelineTooShallow):
        return _pipeline_too_shallow(error)
    return InvalidUseError(str(error))


def _pipeline_too_shallow(error: PipelineTooShallow) -> InvalidUseError:
    """PopTorch's refusal of a pipelined call that cannot fill its pipeline."""
    setting, needed, forward = ERROR_NAMES[error.setting], error.needed, error.model_stages
    if error.training:
        return InvalidUseError(
            f"{setting} must be greater than or equal to the number of pipeline stages "
            f"({needed}) when using poptorch.PipelinedExecution. Please note that a model "
            f"with {forward} pipeline stages in PopTorch will have an additional "
            f"{needed - forward} stages when training. (Got gradientAccumulation("
            f"{error.value}): raise it to at least {needed} or use fewer pipeline stages.)",
            type="poptorch_cpp_error")
    return InvalidUseError(
        f"{setting} must be greater than or equal to the number of pipeline stages "
        f"({needed}) when using PopTorch.PipelinedExecution. (Got deviceIterations("
        f"{error.value}): each micro-batch of a call fills one pipeline stage; raise it to "
        f"at least {needed}.)", type="poptorch_cpp_error")
