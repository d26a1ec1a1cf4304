"""The ``benchbay`` command: parses arguments and calls the library (no logic of its own)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console

console = Console()


def _fail(exc: Exception) -> int:
    print(exc, file=sys.stderr)  # plain: a terminal-width wrap would split file paths and keys
    return 2


def _suite(args):
    from benchbay.suite import load

    return load(args.suite, args.set)


def cmd_validate(args) -> int:
    from benchbay.suite import SuiteError

    try:
        suite = _suite(args)
    except SuiteError as exc:
        return _fail(exc)
    points = suite.expand()
    excluded = sum(1 for p in points if p.excluded)
    console.print(f"{args.suite}: valid; {len(points)} points ({excluded} excluded) x {suite.repeats} repeats "
                  f"of workload {suite.workload}")
    return 0


def cmd_run(args) -> int:
    from benchbay.runner import SuiteRunner
    from benchbay.suite import SuiteError

    try:
        suite = _suite(args)
    except SuiteError as exc:
        return _fail(exc)
    resume = args.resume if args.resume not in (None, "latest") else args.resume == "latest"
    try:
        runner = SuiteRunner(suite, args.results, resume=resume)
    except FileNotFoundError as exc:
        return _fail(exc)
    summary = runner.run_all()
    counts = ", ".join(f"{n} {s}" for s, n in sorted(summary.counts.items())) or "nothing new"
    console.print(f"results: {summary.run} ({counts})")
    if summary.interrupted:
        return 130
    if not args.no_report:
        from benchbay.report import build_report
        from benchbay.store import load_runs

        out = Path(args.report_dir or Path("reports") / suite.name)
        path = build_report(load_runs([summary.run]), out, title=suite.name, suite_meta=suite.raw)
        console.print(f"report: {path}")
    return 0


def cmd_list(args) -> int:
    from benchbay import knobs
    from benchbay.workloads import registry

    console.print("[bold]suites[/bold]")
    for path in sorted(Path(args.suites).glob("*.yaml")):
        console.print(f"  {path}")
    console.print("[bold]workloads[/bold]")
    for name, target in sorted(registry.available().items()):
        console.print(f"  {name:12s} {target}")
    console.print("[bold]generic knobs[/bold] (training workloads)")
    for name, knob in knobs.GENERIC.items():
        values = "|".join(map(str, knob.values)) if knob.values else (knob.type.__name__ if knob.type else "str")
        console.print(f"  {name:28s} {values:40s} {knob.help}", highlight=False)
    for name, target in sorted(registry.available().items()):
        try:
            cls = registry.resolve(name)
        except LookupError as exc:
            console.print(f"[yellow]{name}: {exc}[/yellow]")
            continue
        if cls.knobs:
            console.print(f"[bold]{name} knobs[/bold]")
            for knob, choice in cls.knobs.items():
                console.print(f"  {knob:28s} {'|'.join(map(str, choice.values)):40s} {choice.help}", highlight=False)
    return 0


def cmd_show(args) -> int:
    import pandas as pd

    from benchbay.analysis.tables import point_summary, sweep_table
    from benchbay.store import export, load_runs

    df = load_runs(args.runs, args.results)
    summary = point_summary(df)
    with pd.option_context("display.width", 250, "display.max_columns", 30, "display.max_colwidth", 60,
                           "display.float_format", "{:.4g}".format):
        for suite, points in summary.groupby("suite", sort=False):
            console.print(f"[bold]{suite}[/bold] ({', '.join(sorted(df.loc[df.suite == suite, 'run_id'].unique()))})")
            console.print(sweep_table(points).to_string(), highlight=False, soft_wrap=True)
    if args.export:
        console.print(f"exported: {export(df, args.export)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="benchbay", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def suite_cmd(name, func, help):
        p = sub.add_parser(name, help=help)
        p.add_argument("suite", help="a suite YAML file")
        p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                       help="override a suite field, e.g. --set steps.measure=5 --set knobs.mbs=2")
        p.set_defaults(func=func)
        return p

    p = suite_cmd("run", cmd_run, "run every point of a suite, each in its own process")
    p.add_argument("--results", default="results", help="results root (default: results)")
    p.add_argument("--resume", nargs="?", const="latest", default=None, metavar="RUN_ID",
                   help="continue a run (the latest on this machine, or RUN_ID), skipping measured points")
    p.add_argument("--no-report", action="store_true", help="do not write the report after the run")
    p.add_argument("--report-dir", help="where the report goes (default: reports/<suite>)")
    suite_cmd("validate", cmd_validate, "check a suite file and count its points")

    p = sub.add_parser("list", help="suites, workloads and knobs")
    p.add_argument("--suites", default="suites")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("show", help="the results table of runs")
    p.add_argument("runs", nargs="+", help="run folders, run ids, suite names or records.jsonl files")
    p.add_argument("--results", default="results")
    p.add_argument("--export", help="also write the flat table to a .csv or .parquet file")
    p.set_defaults(func=cmd_show)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
