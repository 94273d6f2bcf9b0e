"""``python -m lmc``: the same command line as ``lmc``."""

import sys

from lmc.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
