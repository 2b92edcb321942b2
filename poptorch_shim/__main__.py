"""``python -m poptorch_shim SCRIPT.py [ARGS]``."""
import sys

from poptorch_shim.runner import main

sys.exit(main())
