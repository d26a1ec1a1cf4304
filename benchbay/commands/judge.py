"""The commands that judge runs: compare, gate, diff, bisect and baseline save."""

from __future__ import annotations

import math
from pathlib import Path

from benchbay.commands.output import console
from benchbay.commands.resolve import gate_baseline, gpu_hour_price, one_run


def cmd_compare(args) -> int:
    import pandas as pd

    from benchbay.analysis.compare import CompareOptions, compare
    from benchbay.analysis.compare_format import format_compare
    from benchbay.analysis.cost import NO_PRICE, energy_note
    from benchbay.analysis.diff_pointer import diff_pointers, format_pointers
    from benchbay.store import load_runs

    baseline, candidate = one_run(args.baseline, args.results), one_run(args.candidate, args.results)
    price = gpu_hour_price(args, [candidate])
    price = next(iter(price.values()), None) if isinstance(price, dict) else price
    frames = load_runs([baseline]), load_runs([candidate])
    table = compare(*frames, options=CompareOptions(min_change=args.min_change / 100), ignore_knobs=args.ignore_knob,
                    price_per_gpu_hour=price, history=_machine_history(candidate, args.results))
    print(format_compare(table, only_changes=args.only_changes)
          + format_pointers(diff_pointers(table, baseline, candidate, args.results)))
    for note in (None if price is not None else NO_PRICE, energy_note(pd.concat(frames))):  # neither side's
        if note:
            print(f"\n{note}.")
    return 0


def _machine_history(run: Path, results: str):
    """This machine's stored runs of ``run``'s suite, whose spread between processes stands in where
    ``run`` has too few repeats (None when the run names no single machine, or there are none)."""
    from benchbay.baselines import earlier_runs, run_machine_key
    from benchbay.store import read_manifest

    try:
        key = run_machine_key(run)
    except ValueError:  # records of no machine, or of several: no one machine's history
        return None
    return earlier_runs(results, read_manifest(run).get("suite"), key)


def _loss_checks(df, specs: list[str]):
    from benchbay.analysis.gate import loss_equivalence

    checks = []
    for spec in specs:
        parts = spec.split(":")
        if len(parts) not in (2, 4):
            raise ValueError(f"--loss-equivalence {spec!r}: expected REFERENCE:CANDIDATE[:RTOL:ATOL] labels")
        try:
            tol = {"rtol": float(parts[2]), "atol": float(parts[3])} if len(parts) == 4 else {}
        except ValueError:
            tol = {"rtol": math.nan}
        if any(not math.isfinite(v) or v < 0 for v in tol.values()):
            raise ValueError(f"--loss-equivalence {spec!r}: RTOL and ATOL: finite numbers >= 0")
        checks.append(loss_equivalence(df, parts[0], parts[1], **tol))
    return checks


def cmd_gate(args) -> int:
    from benchbay.analysis.diff_pointer import diff_pointers, format_pointers
    from benchbay.analysis.gate import format_no_baseline, gate
    from benchbay.baselines import run_machine_key
    from benchbay.store import load_runs, read_manifest, writable_file, write_atomic
    from benchbay.suite.model import SuiteMeta

    if args.markdown:  # before the gate: its verdict must not be lost to a bad path after it
        writable_file(args.markdown, "--markdown")
    run = one_run(args.candidate, args.results)
    manifest = read_manifest(run)
    baseline = gate_baseline(run, args.baseline, args.results)
    if baseline is None:
        text = format_no_baseline(run_machine_key(run), args.baseline or manifest.get("suite"),
                                  Path(args.results) / "baselines", args.require_baseline)
        exit_code = 1 if args.require_baseline else 0
    else:
        candidate = load_runs([run])
        thresholds = args.threshold or SuiteMeta.of_run(run).gate or None
        result = gate(load_runs([baseline]), candidate, thresholds,
                      loss_checks=_loss_checks(candidate, args.loss_equivalence), ignore_knobs=args.ignore_knob,
                      require_comparison=args.require_baseline, history=_machine_history(run, args.results))
        text = f"baseline: {baseline}\ncandidate: {run}\n\n{result.markdown.rstrip()}"
        text += format_pointers(diff_pointers(result.checks, baseline, run, args.results))
        exit_code = result.exit_code
    print(text)
    if args.markdown:
        write_atomic(writable_file(args.markdown, "--markdown"), (text + "\n").encode())
    return exit_code


def cmd_diff(args) -> int:
    from benchbay.analysis.diff import diff, format_markdown, profiled_record, write_diff

    result = diff(profiled_record(one_run(args.a, args.results), args.label_a),
                  profiled_record(one_run(args.b, args.results), args.label_b), force=args.force)
    print(format_markdown(result))
    if args.out:
        console.print(f"diff: {write_diff(result, Path(args.out))} (and diff.html, diff_deltas.png)")
    return 0


def cmd_bisect(args) -> int:
    from benchbay.bisect import bisect

    result = bisect(args.repo, args.suite, args.point, args.good, args.bad, install=args.install, sets=args.set,
                    thresholds=args.threshold or None)
    print(result.markdown())
    return 0 if result.first_bad else 1


def cmd_baseline_save(args) -> int:
    from benchbay.baselines import run_suites, save_baseline

    runs = [one_run(run, args.results) for run in args.run]
    suites = sorted(set().union(*map(run_suites, runs)))
    name = args.name
    if name is None:  # the name `gate` looks for by default: the suite's
        if len(suites) != 1:
            raise ValueError(f"--name: the runs hold {len(suites)} suites ({', '.join(suites) or 'none'}), so no "
                             "suite's name is the default: name the baseline")
        name = suites[0]
    target = save_baseline(runs, name, args.results)
    gate = "" if name in suites else f" --baseline {name}"  # gate's default is the suite's name
    console.print(f"baseline: {target} (from {', '.join(map(str, runs))}); gate a run against it with "
                  f"`benchbay gate RUN{gate}`", markup=False, highlight=False)
    return 0
