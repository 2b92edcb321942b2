"""``import poptorch`` under the ipusim runner: the name is poptorch_shim.

This folder is put on ``sys.path`` (and ``PYTHONPATH``, for the processes
started from there) by :mod:`poptorch_shim._core.aliases`: for the runner, the
pytest plugin, poprun's instances, a spawned child, or in a whole environment
by a ``.pth`` file. It makes ``poptorch`` and its submodules the very same
module objects as ``poptorch_shim``'s.
"""
import poptorch_shim
from poptorch_shim._core.aliases import stand_in

stand_in(__name__, poptorch_shim)
