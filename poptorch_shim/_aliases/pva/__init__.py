"""``import pva`` wherever ``import poptorch`` is the shim: the name is
``poptorch_shim.pva``, libpva's Python API over ipusim's profiles (the SDK installs
libpva's module beside PopTorch's, and scripts that profile import both)."""
import sys

import poptorch_shim.pva  # noqa: F401  (the module this name stands for)

sys.modules[__name__] = sys.modules["poptorch_shim.pva"]
