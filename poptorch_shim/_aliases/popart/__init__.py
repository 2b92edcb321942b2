"""``import popart`` wherever ``import poptorch`` is the shim: the name is
``poptorch_shim.popart``, PopART's enums and constants (the SDK installs
PopART's Python module beside PopTorch's, and libraries over PopTorch import
both)."""
import poptorch_shim.popart
from poptorch_shim._core.aliases import stand_in

stand_in(__name__, poptorch_shim.popart)
