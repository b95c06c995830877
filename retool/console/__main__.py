"""``python -m retool.console`` (retool.console.cli)."""

import sys

from retool.console.cli import main

if __name__ == "__main__":
    sys.exit(main())
