"""``python -m retool.sandbox`` is the ``retool-sandbox`` console script."""

from retool.sandbox.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
