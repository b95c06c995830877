"""``python -m retool_sandbox`` is the ``retool-sandbox`` console script."""

from retool_sandbox.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
