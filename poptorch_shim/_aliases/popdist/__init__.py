"""``import popdist`` under the ipusim runner and in poprun's instances: the
name is ``poptorch_shim.popdist``, and ``popdist.poptorch`` is
``poptorch_shim.popdist.poptorch`` (loaded first, so that it is never loaded a
second time under another name).

This folder is put on ``sys.path`` (and ``PYTHONPATH``, for child processes)
by :mod:`poptorch_shim._core.aliases`, wherever ``poptorch`` is aliased.
"""
import poptorch_shim.popdist
import poptorch_shim.popdist.poptorch  # noqa: F401  (popdist.poptorch stands for it)
from poptorch_shim._core.aliases import stand_in

stand_in(__name__, poptorch_shim.popdist)
