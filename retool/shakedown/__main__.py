"""``python -m retool.shakedown RUN_DIR``: the same as the retool-shakedown command (run_smoke_cpu.sh calls it this
way)."""

from retool.shakedown.cli import main

raise SystemExit(main())
