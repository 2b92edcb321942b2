"""``import pva`` wherever ``import poptorch`` is the shim: the name is
``poptorch_shim.pva``, libpva's Python API over ipusim's profiles (the SDK installs
libpva's module beside PopTorch's, and scripts that profile import both)."""
import poptorch_shim.pva
from poptorch_shim._core.aliases import stand_in

stand_in(__name__, poptorch_shim.pva)
