"""``python -m ipusim``: the ``ipusim`` command line."""
import sys

from ipusim.cli import main

if __name__ == "__main__":
    sys.exit(main())
