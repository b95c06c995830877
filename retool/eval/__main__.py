"""``python -m retool.eval`` = ``retool-eval``."""

import sys

from retool.eval import main

if __name__ == "__main__":
    sys.exit(main())
