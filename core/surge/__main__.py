"""``python -m surge``: the ``surge`` command, for where its console script is not on ``PATH``."""

import sys

from surge.cli import main

if __name__ == "__main__":
    sys.exit(main())
