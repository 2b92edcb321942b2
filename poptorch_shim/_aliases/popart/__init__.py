"""``import popart`` wherever ``import poptorch`` is the shim: the name is
``poptorch_shim.popart``, PopART's enums and constants (the SDK installs
PopART's Python module beside PopTorch's, and libraries over PopTorch import
both)."""
import sys

import poptorch_shim.popart  # noqa: F401  (the module this name stands for)

sys.modules[__name__] = sys.modules["poptorch_shim.popart"]
