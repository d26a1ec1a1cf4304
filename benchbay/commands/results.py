"""The commands that read the results store: show, report and history."""

from __future__ import annotations

from pathlib import Path

from benchbay.commands.output import console, print_table
from benchbay.commands.resolve import gpu_hour_price, peak_flops, suite_metas, tune_results


def cmd_show(args) -> int:
    from benchbay.analysis.cost import cost_notes
    from benchbay.analysis.tables import (
        DECODE_KEY_COLUMNS,
        KEY_COLUMNS,
        decodes,
        device_word,
        point_summary,
        sweep_table,
    )
    from benchbay.report import display
    from benchbay.store import export, find_runs, load_runs, writable_file

    if args.export:  # before the tables: a bad path fails at once
        writable_file(args.export, "--export")
    found = find_runs(args.runs, args.results)
    df = load_runs(found)
    if df.empty:  # a run stopped before its first record, or whose every line was skipped
        raise ValueError(f"{', '.join(map(str, found))}: no records to show")
    for suite, points in point_summary(df, peak_flops(), gpu_hour_price(args, found)).groupby("suite", sort=False):
        runs = ", ".join(sorted(df.loc[df.suite == suite, "run_id"].unique()))
        for workload, group in points.groupby("workload", sort=False):
            columns = DECODE_KEY_COLUMNS if decodes(group) else KEY_COLUMNS
            table = display(sweep_table(group, columns), per=device_word(group))
            print_table(table, f"{suite}: {workload} ({runs})")
            for note in cost_notes(group):
                print(note)
    if args.export:
        console.print(f"exported: {export(df, args.export)} (every column)")
    return 0


def cmd_report(args) -> int:
    from benchbay.report import build_report
    from benchbay.store import SAFE_NAME, find_runs, load_runs
    from benchbay.suite import load
    from benchbay.suite.model import SuiteMeta

    runs = find_runs(args.runs, args.results)
    if args.emit_suite:
        from benchbay.store import writable_file
        from benchbay.tune.result import emit_suite

        tuned = [run for run in runs if run.name in tune_results(runs)]
        if len(tuned) != 1:
            raise ValueError(f"--emit-suite: one tune run, got {len(tuned)} among {len(runs)} run(s)")
        console.print(f"suite: {emit_suite(tuned[0], writable_file(args.emit_suite, '--emit-suite'))}")
    metas, frame = suite_metas(runs), load_runs(runs)
    reported = sorted(set(frame["suite"])) if "suite" in frame else []
    for path in args.suite:  # the user's own file, read as `run` reads it, but not run here
        suite = load(path, runnable=False)
        if suite.name not in reported:
            raise ValueError(f"{path}: --suite: suite {suite.name!r} ran none of the runs reported "
                             f"(their suites: {', '.join(reported) or 'none'})")
        metas[suite.name] = SuiteMeta.of(suite)
    title = args.title or ", ".join(sorted(metas)) or "benchbay report"
    named = list(metas)[0] if len(metas) == 1 else "combined"
    if not SAFE_NAME.fullmatch(named):  # a stored suite name is untrusted: it must not pick the folder
        named = "combined"
    out = Path(args.out or Path("reports") / named)
    path = build_report(frame, out, title=title, suite_meta=metas, peak_flops=peak_flops(),
                        price_per_gpu_hour=args.price_per_gpu_hour, tunes=tune_results(runs))
    console.print(f"report: {path} (and {path.with_suffix('.md')})")
    return 0


def cmd_history(args) -> int:
    import pandas as pd

    from benchbay.analysis.history import history
    from benchbay.store import load_runs
    from benchbay.suite import name_of

    # a suite file names its suite, as for run and validate (read as data: no workload of it imported)
    name = name_of(args.suite) if args.suite.endswith((".yaml", ".yml")) else args.suite
    table = history(load_runs([name], args.results), args.metric, statistic=args.statistic)
    columns = [c for c in ("point", "run_id", "git_commit", "started_at", "value", "change_point", "step",
                           "verdict") if c in table]
    with pd.option_context("display.width", 200, "display.max_colwidth", 50):
        print(table[columns].to_string(index=False))
    flagged = table[table["change_point"]] if len(table) else table
    counts = flagged["verdict"].value_counts() if len(flagged) else {}
    print(f"\n{len(flagged)} change point(s): " + ", ".join(
        f"{counts.get(v, 0)} {v}" for v in ("regression", "improvement", "noisy", "cannot support a verdict",
                                             "not comparable")))
    return 0
