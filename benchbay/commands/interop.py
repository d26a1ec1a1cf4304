"""pytest-benchmark's JSON: read into the store, and a run written as it."""

from __future__ import annotations

from benchbay.commands.output import console
from benchbay.commands.resolve import one_run


def cmd_import_pytest_benchmark(args) -> int:
    from benchbay.pytest_benchmark import import_pytest_benchmark

    console.print(f"imported: {import_pytest_benchmark(args.json, args.results, suite=args.suite)}")
    return 0


def cmd_export_pytest_benchmark(args) -> int:
    from benchbay.pytest_benchmark import export_pytest_benchmark

    console.print(f"exported: {export_pytest_benchmark(one_run(args.run, args.results), args.out)}")
    return 0
