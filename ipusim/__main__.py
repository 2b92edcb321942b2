"""``python -m ipusim``: the ``ipusim`` command line (``report``, ``summary``,
``trace``, and the shim's ``run``, ``sweep`` and ``advise`` where an installed
package adds them through the ``ipusim.commands`` entry point)."""
import sys

from ipusim.cli import main

if __name__ == "__main__":
    sys.exit(main())
