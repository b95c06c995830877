"""``python -m retool.doctor``: the same as ``retool-doctor``."""

import sys

from retool.doctor.cli import main

sys.exit(main())
