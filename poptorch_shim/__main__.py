"""``python -m poptorch_shim SCRIPT.py [ARGS]``."""
import sys

from poptorch_shim._run.runner import main

sys.exit(main())
