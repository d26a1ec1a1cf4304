"""``python -m benchbay``: the command, also from a checkout that was never installed (the GPU
machine's way), where a Python without the project's dependencies is told how to get them."""

import sys

try:
    from benchbay.cli import main
except ModuleNotFoundError as exc:
    if (exc.name or "").partition(".")[0] == "benchbay":  # a module of ours missing: a broken checkout, not setup
        raise
    print(f"benchbay: this Python ({sys.executable}) lacks {exc.name!r}, which benchbay needs: install the project "
          "with `bash .ci/setup` (a .venv with everything; then run .venv/bin/benchbay) or `pip install -e .`",
          file=sys.stderr)
    sys.exit(2)

sys.exit(main())
