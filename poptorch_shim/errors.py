"""Exception classes the shim raises for user errors that PopTorch reports in a
particular way, so callers can catch them by kind as they would with PopTorch.

PopTorch's own checks raise ``poptorch.Error`` (defined in its C++ module as
``poptorch.poptorch_core.Error``): ``str(error)`` is ``"'<type>': <message>"``
and the error carries ``type``, ``message`` and ``location``. Hardware faults
raise its subclasses ``RecoverableError`` (with a ``recovery_action``) and
``UnrecoverableError``; a simulated IPU never has those, but scripts written
for PopTorch catch them, so they exist here too.
"""

#: The ``type`` of the errors PopTorch's Python checks raise.
PYTHON_ERROR_TYPE = "poptorch_py_error"


class Error(Exception):
    """An error reported by PopTorch: ``message``, the component it came from
    (``type``) and where (``location``, empty for Python checks)."""

    def __init__(self, message: str, type: str = PYTHON_ERROR_TYPE, location: str = ""):
        super().__init__(f"'{type}': {message}")
        self.message = message
        self.type = type
        self.location = location


class RecoverableError(Error):
    """A device error the system can recover from after ``recovery_action``
    (for example ``"IPU_RESET"`` or ``"FULL_RESET"``)."""

    def __init__(self, message: str, recovery_action: str, type: str = "poplar_recoverable",
                 location: str = ""):
        super().__init__(message, type, location)
        self.recovery_action = recovery_action


class UnrecoverableError(Error):
    """A device error after which the machine must be taken offline."""

    def __init__(self, message: str, type: str = "poplar_unrecoverable", location: str = ""):
        super().__init__(message, type, location)


class InvalidUseError(Error, ValueError):
    """``poptorch.Error`` for a call PopTorch refuses (for example a gradient
    accumulation set on an inference model); also a ``ValueError``, what such a
    refusal is in plain Python."""


class ExecutionError(Error, RuntimeError):
    """``poptorch.Error`` for asking a model what its state cannot give (it was
    never compiled or was destroyed, it counts no cycles); also a
    ``RuntimeError``."""


class OutOfMemoryError(Error, ValueError):
    """``poptorch.Error`` for a model that does not fit its IPUs' SRAM, as Poplar's
    graph memory allocation error reaches a PopTorch script; ``memory`` is the
    table of each IPU's memory that says so. Also a ``ValueError``, what ipusim
    raises for it."""

    def __init__(self, message: str, memory=None):
        super().__init__(message, type="poplar_graph_memory_allocation")
        self.memory = memory


class FrozenOptionsError(AttributeError):
    """A setter was called on :class:`~poptorch_shim.options.Options` after the
    options were used to create a model or a DataLoader.

    PopTorch raises ``AttributeError("Can't modify frozen Options")`` here; this
    subclass keeps that type and wording and adds which setter was called and
    how to get a copy that can still be changed.
    """

    def __init__(self, setter: str):
        self.setter = setter
        super().__init__(
            f"Can't modify frozen Options: {setter}() was called after these "
            "options were used to create a model or a DataLoader. Options "
            "freeze on first use so that every model and DataLoader built from "
            "them keeps agreeing on batch sizes and modes. Call opts.clone() to "
            "get an unfrozen copy and change that instead.")


class ConfigFileError(Exception):
    """A line of an options file read by ``Options.loadFromFile`` is not valid
    Python (``poptorch.options.ConfigFileError``)."""
