"""Exception classes the shim raises for user errors that PopTorch reports in a
particular way, so callers can catch them by kind as they would with PopTorch."""


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
