"""``python -m retool.report``: the same as the retool-report command (run_smoke_cpu.sh calls it this way)."""

import sys

from retool.report.cli import main

sys.exit(main())
