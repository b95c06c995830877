"""``python -m retool.eval`` = ``retool-eval``."""

import sys

from retool.eval.cli import main

if __name__ == "__main__":
    sys.exit(main())
