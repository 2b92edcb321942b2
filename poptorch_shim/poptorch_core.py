"""``poptorch.poptorch_core``: in PopTorch its C++ extension module; here the
part of it scripts import by name, the error classes its checks raise."""
from poptorch_shim.errors import Error, RecoverableError, UnrecoverableError

__all__ = ["Error", "RecoverableError", "UnrecoverableError"]
