"""``import popdist.poptorch`` wherever ``popdist`` is aliased (see
:mod:`poptorch_shim._core.aliases`): the name is ``poptorch_shim.popdist.poptorch``."""
import sys

import poptorch_shim.popdist.poptorch  # noqa: F401  (the module this name stands for)

sys.modules[__name__] = sys.modules["poptorch_shim.popdist.poptorch"]
