"""``import popdist`` under the ipusim runner and in poprun's instances: the
name is ``poptorch_shim.popdist``.

This folder is put on ``sys.path`` (and ``PYTHONPATH``, for child processes)
by :mod:`poptorch_shim._core.aliases`, wherever ``poptorch`` is aliased. The
submodule alias is imported first, while this package's own path still
resolves it, so that ``popdist.poptorch`` is never loaded a second time from
``poptorch_shim/popdist/`` under another name.
"""
import sys

import poptorch_shim.popdist  # noqa: F401  (the module this name stands for)
from popdist import poptorch  # noqa: F401  (registers popdist.poptorch)

sys.modules[__name__] = sys.modules["poptorch_shim.popdist"]
