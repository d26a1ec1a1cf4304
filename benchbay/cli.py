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
    workloads = ", ".join(dict.fromkeys(p.workload for p in points))
    console.print(f"{args.suite}: valid; {len(points)} points ({excluded} excluded) x {suite.repeats} repeats "
                  f"of {workloads}")
    return 0


def cmd_run(args) -> int:
    from benchbay.runner import SuiteRunner
    from benchbay.suite import SuiteError

    try:
        suite = _suite(args)
    except SuiteError as exc:
        return _fail(exc)
    resume = True if args.resume == "latest" else (args.resume or False)  # True: the latest run
    try:
        from benchbay.suite import parse_scalar

        params = {k: parse_scalar(v) for k, _, v in (x.partition("=") for x in args.executor_param)}
        runner = SuiteRunner(suite, args.results, resume=resume, executor=args.executor, executor_params=params,
                             labels=args.point)
    except (FileNotFoundError, ValueError) as exc:
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


def cmd_profile(args) -> int:
    from benchbay.profiling import profile_points
    from benchbay.suite import SuiteError

    try:
        run = profile_points(_suite(args), args.point, args.results)
    except (SuiteError, ValueError) as exc:
        return _fail(exc)
    console.print(f"profiles: {run / 'profiles'} (records: {run})")
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
    for name in sorted(registry.available()):
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


def _one_run(ref: str, results: str) -> Path:
    """A single run: the newest when ``ref`` names a suite folder or suite."""
    from benchbay.store import find_runs

    runs = find_runs([ref], results)
    return max(runs, key=lambda p: p.name)


def _suite_metas(runs) -> dict:
    from benchbay.store import read_manifest

    metas = {}
    for run in runs:
        manifest = read_manifest(run)
        if manifest.get("suite_as_run"):
            metas[manifest["suite"]] = manifest["suite_as_run"]
    return metas


def cmd_report(args) -> int:
    from benchbay.report import build_report
    from benchbay.store import find_runs, load_runs

    runs = find_runs(args.runs, args.results)
    metas = _suite_metas(runs)
    title = args.title or ", ".join(sorted(metas)) or "benchbay report"
    out = Path(args.out or Path("reports") / (list(metas)[0] if len(metas) == 1 else "combined"))
    path = build_report(load_runs(runs), out, title=title, suite_meta=metas)
    console.print(f"report: {path} (and {path.with_suffix('.md')})")
    return 0


def cmd_compare(args) -> int:
    from benchbay.analysis.compare import compare, format_compare
    from benchbay.store import load_runs

    table = compare(load_runs([_one_run(args.baseline, args.results)]),
                    load_runs([_one_run(args.candidate, args.results)]), min_change=args.min_change / 100,
                    ignore_knobs=args.ignore_knob)
    print(format_compare(table, only_changes=args.only_changes))
    return 0


def _loss_checks(df, specs: list[str]):
    from benchbay.analysis.gate import loss_equivalence

    checks = []
    for spec in specs:
        parts = spec.split(":")
        if len(parts) not in (2, 4):
            raise ValueError(f"--loss-equivalence {spec!r}: expected REFERENCE:CANDIDATE[:RTOL:ATOL] labels")
        tol = {"rtol": float(parts[2]), "atol": float(parts[3])} if len(parts) == 4 else {}
        checks.append(loss_equivalence(df, parts[0], parts[1], **tol))
    return checks


def cmd_gate(args) -> int:
    from benchbay.analysis.gate import gate
    from benchbay.baselines import find_baseline, run_machine_key
    from benchbay.store import load_runs, read_manifest

    run = _one_run(args.candidate, args.results)
    manifest = read_manifest(run)
    baseline = Path(args.baseline) if args.baseline and Path(args.baseline).is_dir() else find_baseline(
        args.results, run_machine_key(run), name=args.baseline or manifest.get("suite"), suite=manifest.get("suite"))
    if baseline is None:
        text = (f"no baseline for {run_machine_key(run)} (name {args.baseline or manifest.get('suite')!r}) under "
                f"{args.results}/baselines: nothing was gated; save one with `benchbay baseline save`")
        exit_code = 1 if args.require_baseline else 0
    else:
        candidate = load_runs([run])
        thresholds = args.threshold or manifest.get("suite_as_run", {}).get("gate") or None
        try:
            result = gate(load_runs([baseline]), candidate, thresholds,
                          loss_checks=_loss_checks(candidate, args.loss_equivalence), ignore_knobs=args.ignore_knob)
        except ValueError as exc:
            return _fail(exc)
        text = f"baseline: {baseline}\ncandidate: {run}\n\n{result.markdown}"
        exit_code = result.exit_code
    print(text)
    if args.markdown:
        Path(args.markdown).parent.mkdir(parents=True, exist_ok=True)
        Path(args.markdown).write_text(text + "\n")
    return exit_code


def cmd_baseline_save(args) -> int:
    from benchbay.baselines import save_baseline

    runs = [_one_run(run, args.results) for run in args.run]
    try:
        target = save_baseline(runs, args.name, args.results)
    except ValueError as exc:
        return _fail(exc)
    console.print(f"baseline: {target} (from {', '.join(map(str, runs))})")
    return 0


def cmd_history(args) -> int:
    import pandas as pd

    from benchbay.analysis.history import history
    from benchbay.store import load_runs

    table = history(load_runs([args.suite], args.results), args.metric, statistic=args.statistic)
    columns = [c for c in ("point", "run_id", "git_commit", "started_at", "value", "change_point", "step",
                           "regression") if c in table]
    with pd.option_context("display.width", 200, "display.max_colwidth", 50):
        print(table[columns].to_string(index=False))
    flagged = table[table["change_point"]] if len(table) else table
    print(f"\n{len(flagged)} change point(s); {int(flagged['regression'].sum()) if len(flagged) else 0} regression(s)")
    return 0


def cmd_import_pytest_benchmark(args) -> int:
    from benchbay.pytest_benchmark import import_pytest_benchmark

    console.print(f"imported: {import_pytest_benchmark(args.json, args.results, suite=args.suite)}")
    return 0


def cmd_export_pytest_benchmark(args) -> int:
    from benchbay.pytest_benchmark import export_pytest_benchmark

    console.print(f"exported: {export_pytest_benchmark(_one_run(args.run, args.results), args.out)}")
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

    def ignore_knob_arg(p):
        p.add_argument("--ignore-knob", action="append", default=[], metavar="KNOB",
                       help="match points whatever this knob's value (a deliberate change, e.g. compile)")

    def point_arg(p):
        p.add_argument("--point", action="append", default=[], metavar="LABEL",
                       help="only the points with this label (repeatable; default: every point)")

    p = suite_cmd("run", cmd_run, "run every point of a suite, each in its own process")
    point_arg(p)
    p.add_argument("--results", default="results", help="results root (default: results)")
    p.add_argument("--resume", nargs="?", const="latest", default=None, metavar="RUN_ID",
                   help="continue a run (the latest on this machine, or RUN_ID), skipping measured points")
    p.add_argument("--no-report", action="store_true", help="do not write the report after the run")
    p.add_argument("--executor", choices=("local", "slurm"), default="local",
                   help="run points here, or each as a Slurm job through submitit")
    p.add_argument("--executor-param", action="append", default=[], metavar="KEY=VALUE",
                   help="submitit parameter, e.g. slurm_partition=gpu, folder=/shared/jobs (repeatable)")
    p.add_argument("--report-dir", help="where the report goes (default: reports/<suite>)")
    suite_cmd("validate", cmd_validate, "check a suite file and count its points")
    p = suite_cmd("profile", cmd_profile, "run chosen points under torch.profiler (trace, top ops, phases, syncs)")
    point_arg(p)
    p.add_argument("--results", default="results")

    p = sub.add_parser("list", help="suites, workloads and knobs")
    p.add_argument("--suites", default="suites")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("show", help="the results table of runs")
    p.add_argument("runs", nargs="+", help="run folders, run ids, suite names or records.jsonl files")
    p.add_argument("--results", default="results")
    p.add_argument("--export", help="also write the flat table to a .csv or .parquet file")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("report", help="write the Markdown + HTML report of runs (from the store alone)")
    p.add_argument("runs", nargs="+")
    p.add_argument("--results", default="results")
    p.add_argument("--out", help="output folder (default: reports/<suite>)")
    p.add_argument("--title")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("compare", help="per point and metric: ratio, confidence interval, verdict")
    p.add_argument("baseline", help="a run (folder, id, or a suite: its newest run)")
    p.add_argument("candidate")
    p.add_argument("--results", default="results")
    p.add_argument("--min-change", type=float, default=2.0, metavar="PERCENT",
                   help="smallest change that counts (default 2)")
    p.add_argument("--only-changes", action="store_true")
    ignore_knob_arg(p)
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("gate", help="exit 1 on a regression against the stored baseline of this machine")
    p.add_argument("candidate", help="a run (folder, id, or a suite: its newest run)")
    p.add_argument("--results", default="results")
    p.add_argument("--baseline", help="baseline name under results/baselines/<machine-key>/ or a folder "
                   "(default: the suite's name)")
    p.add_argument("--threshold", action="append", default=[], metavar="[KEY=PATTERN/]METRIC[:STAT]:N%",
                   help="e.g. step_time:median:5%%, peak_mem:2%%, label=+compile/step_time:3%% "
                   "(default: the suite's gate list)")
    p.add_argument("--loss-equivalence", action="append", default=[], metavar="REF:CAND[:RTOL:ATOL]",
                   help="the loss curve of label CAND must follow label REF's")
    p.add_argument("--markdown", help="also write the summary to this file (CI job summary)")
    p.add_argument("--require-baseline", action="store_true", help="fail when no baseline exists")
    ignore_knob_arg(p)
    p.set_defaults(func=cmd_gate)

    p = sub.add_parser("baseline", help="manage baselines")
    bsub = p.add_subparsers(dest="action", required=True)
    b = bsub.add_parser("save", help="store a run (or the runs of one suite on one machine) as "
                        "results/baselines/<machine-key>/<name>/")
    b.add_argument("run", nargs="+")
    b.add_argument("--name", required=True)
    b.add_argument("--results", default="results")
    b.set_defaults(func=cmd_baseline_save)

    p = sub.add_parser("history", help="a metric across past runs, with change points flagged")
    p.add_argument("suite")
    p.add_argument("--metric", default="step_time")
    p.add_argument("--statistic", default="median")
    p.add_argument("--results", default="results")
    p.set_defaults(func=cmd_history)

    p = sub.add_parser("import-pytest-benchmark", help="read a pytest-benchmark JSON file into the store")
    p.add_argument("json")
    p.add_argument("--suite", default="pytest-benchmark")
    p.add_argument("--results", default="results")
    p.set_defaults(func=cmd_import_pytest_benchmark)

    p = sub.add_parser("export-pytest-benchmark", help="write a run as pytest-benchmark JSON")
    p.add_argument("run")
    p.add_argument("out")
    p.add_argument("--results", default="results")
    p.set_defaults(func=cmd_export_pytest_benchmark)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
