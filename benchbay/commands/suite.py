"""The commands that read a suite file: run, tune, validate, profile and list."""

from __future__ import annotations

import math
import sys
from pathlib import Path

from benchbay.commands.output import console, print_wrapped
from benchbay.commands.resolve import gate_baseline, load_suite, one_run, peak_flops, suite_metas, tune_results
from benchbay.store import UNWRITABLE


def cmd_validate(args) -> int:
    suite = load_suite(args)
    if suite.tune is not None and not suite.raw.get("sweep"):
        from benchbay.suite.tune import IntRange

        sizes = [len(v.values()) if isinstance(v, IntRange) else len(v) for v in suite.tune.space.values()]
        budget = " and ".join(filter(None, [suite.tune.trials and f"{suite.tune.trials} trials",
                                           suite.tune.device_seconds and f"{suite.tune.device_seconds:g} device-s"]))
        console.print(f"{args.suite}: valid; a tune of {suite.workload} over {_count(len(sizes), 'knob')} "
                      f"({math.prod(sizes)} configurations), budget {budget}")
        return 0
    points = suite.expand()
    excluded = sum(1 for p in points if p.excluded)
    workloads = ", ".join(dict.fromkeys(p.workload for p in points))
    console.print(f"{args.suite}: valid; {_count(len(points), 'point')} ({excluded} excluded) x "
                  f"{_count(suite.repeats, 'repeat')} of {workloads}")
    from benchbay.analysis.gate import repeats_on_record  # the gate: the repeats it needs where the suite ran
    from benchbay.baselines import stored_runs

    try:
        lines = repeats_on_record(stored_runs("results", suite.name), suite.gate, suite.repeats)
    except ValueError as err:  # a malformed threshold
        raise ValueError(f"{args.suite}: gate: {err}") from err
    for line in lines:
        console.print(line)
    return 0


def _count(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _launcher(args, suite):
    """Where the points run: this machine, or Slurm jobs (``--executor``)."""
    from benchbay.launch.base import Launch
    from benchbay.suite import parse_scalar

    launch = Launch.of(suite.devices)
    if args.executor == "slurm":
        from benchbay.launch.slurm import SlurmLauncher

        params = {k: parse_scalar(v) for k, _, v in (x.partition("=") for x in args.executor_param)}
        return SlurmLauncher(launch, params)
    from benchbay.launch.local import LocalLauncher

    return LocalLauncher(launch)


def cmd_run(args) -> int:
    from benchbay.runner import SuiteRunner

    suite = load_suite(args)
    if suite.tune is not None and not suite.raw.get("sweep"):
        raise ValueError(f"{args.suite}: a tune (tune: and no sweep:): search it with `benchbay tune {args.suite}`")
    resume = True if args.resume == "latest" else (args.resume or False)  # True: the latest run
    if args.retry_failed and not resume:
        raise ValueError("--retry-failed: with --resume (it measures again the failed points of a run)")
    runner = SuiteRunner(suite, args.results, resume=resume, launcher=_launcher(args, suite), labels=args.point,
                         peak_flops=peak_flops(), time_budget_s=args.time_budget, retry_failed=args.retry_failed,
                         warm_up=not args.no_warm_up)
    try:
        summary = runner.run_all()
    except OSError as exc:  # the run's folder or first manifest could not be written: nothing measured
        if exc.errno not in UNWRITABLE:
            raise
        again = f"--resume {runner.run.name}" if runner.run.exists() else "run again"
        print(f"benchbay run: cannot write {exc.filename}: {exc.strerror}; free space (or make it writable), then "
              f"{again}", file=sys.stderr)
        return 4
    counts = ", ".join(f"{n} {s}" for s, n in sorted(summary.counts.items())) or "nothing new"
    console.print(f"results: {summary.run} ({counts})")
    if summary.busy:
        console.print(f"[yellow]{summary.busy} record(s) measured while the machine was not quiet: their figures "
                      "may hold that noise (the report notes them)[/yellow]")
    if (stopped := _stopped_code(summary)) is not None:
        return stopped
    if not args.no_report:
        from benchbay.interrupts import signals_interrupt
        from benchbay.report import build_report
        from benchbay.store import find_runs, load_runs
        from benchbay.suite.model import SuiteMeta

        out = Path(args.report_dir or Path("reports") / suite.name)
        try:  # SIGTERM here too is an interrupt (130): the report is written whole or not at all
            with signals_interrupt():
                # the suite's runs (build_report keeps this machine's): a run of --point adds to the report
                path = build_report(load_runs(find_runs([summary.run.parent])), out, title=suite.name,
                                    suite_meta=SuiteMeta.of(suite), peak_flops=peak_flops())
        except KeyboardInterrupt:
            print(f"interrupted while writing the report: the records are kept in {summary.run}; write it with "
                  f"`benchbay report {suite.name}`", file=sys.stderr)
            return 130
        console.print(f"report: {path}")
    if not summary.failed:
        return 0
    accepted = "accepted (--allow-failures)" if args.allow_failures else "exit code 1 (--allow-failures accepts them)"
    print(f"{len(summary.failed)} point(s) of the run failed: {accepted}", file=sys.stderr)
    for line in summary.failed:
        print(f"  {line}", file=sys.stderr)
    return 0 if args.allow_failures else 1


def cmd_tune(args) -> int:
    from benchbay.tune.result import emit_suite
    from benchbay.tune.study import Tuner

    suite = load_suite(args)
    if args.emit_suite:  # before any trial: a bad path fails at once
        from benchbay.store import writable_file

        writable_file(args.emit_suite, "--emit-suite")
    resume = True if args.resume == "latest" else (args.resume or False)
    tuner = Tuner(suite, args.results, resume=resume, launcher=_launcher(args, suite), trials=args.trials,
                  device_seconds=args.device_seconds, time_budget_s=args.time_budget, peak_flops=peak_flops(),
                  retry_failed=args.retry_failed)
    summary = tuner.run_study()
    result = summary.result
    best = result.get("best")
    if best:
        confirmed = "confirmed" if best["confirmed"] else "not confirmed by repeats"
        ties = f"; tied within noise with trial(s) {', '.join(map(str, best['ties']))}" if best["ties"] else ""
        console.print(f"best: trial {best['trial']} ({confirmed}{ties}): {result['objective']['metric']} "
                      f"{best['objective']:.4g}, " + " ".join(f"{k}={v}" for k, v in best["knobs"].items()),
                      markup=False, highlight=False)
    elif result.get("no_feasible"):
        console.print("no trial met the constraints " + str(result["constraints"]) + "; the closest:",
                      markup=False, highlight=False)
        for t in result["no_feasible"]["closest"]:
            console.print(f"  trial {t['trial']}: {t['why']} ({t['knobs']})", markup=False, highlight=False)
    console.print(f"tune: {summary.run / 'tune.json'} ({len(result['trials'])} trials, "
                  f"{result['device_seconds']:.0f} device-s)")
    if args.emit_suite and best:
        # the suite from the user's file: a module:Class workload of it may be imported to check it
        console.print(f"suite: {emit_suite(summary.run, args.emit_suite, suite.raw)}")
    if not args.no_report and result["trials"]:
        console.print(f"report: {_tune_report(summary.run, args.report_dir)}")
    stopped = _stopped_code(summary)
    return stopped if stopped is not None else 0 if best else 1


def _stopped_code(summary) -> int | None:
    """The exit code of a run or tune that stopped before its end (resumable), else None."""
    if summary.interrupted:
        return 130
    if summary.unwritable:
        return 4
    if summary.out_of_time:
        return 3
    return None


def _tune_report(run: Path, out: str | None) -> Path:
    from benchbay.report import build_report
    from benchbay.store import load_runs

    meta = suite_metas([run])
    name = next(iter(meta), run.parent.name)
    return build_report(load_runs([run]), Path(out or Path("reports") / name), title=name, suite_meta=meta,
                        peak_flops=peak_flops(), tunes=tune_results([run]))


def _regressed(run: Path, baseline_name: str | None, results: str) -> list[str]:
    """The labels of the points the gate finds regressed in ``run`` against its baseline."""
    from benchbay.analysis.diff_pointer import regressed_labels
    from benchbay.analysis.gate import gate
    from benchbay.store import load_runs
    from benchbay.suite.model import SuiteMeta

    baseline = gate_baseline(run, baseline_name, results)
    if baseline is None:
        raise FileNotFoundError(f"--from-gate {run}: no baseline to gate it against (benchbay baseline save)")
    thresholds = SuiteMeta.of_run(run).gate or None
    return regressed_labels(gate(load_runs([baseline]), load_runs([run]), thresholds).checks)


def cmd_profile(args) -> int:
    from benchbay.profiling import profile_points, summary_lines

    labels = list(args.point)
    if args.from_gate:
        regressed = _regressed(one_run(args.from_gate, args.results), args.baseline, args.results)
        if not regressed:
            console.print(f"{args.from_gate}: the gate finds no regressed labelled point: nothing to profile")
            return 0
        console.print(f"profiling the regressed points: {', '.join(regressed)}")
        labels += regressed
    run = profile_points(load_suite(args), labels, args.results, peak_flops=peak_flops())
    print("\n".join(summary_lines(run)))
    return 0


def cmd_list(args) -> int:
    import pandas as pd

    from benchbay import knobs
    from benchbay.workloads import registry

    suites = pd.DataFrame({"suite": [str(p) for p in sorted(Path(args.suites).glob("*.yaml"))]})
    print_wrapped(suites, "suites")
    workloads = registry.available()
    print_wrapped(pd.DataFrame({"workload": list(workloads), "defined in": list(workloads.values())}), "workloads")
    rows = [(name, " | ".join(map(str, k.values)) if k.values else (k.type.__name__ if k.type else "str"), k.help)
            for name, k in knobs.GENERIC.items()]
    print_wrapped(pd.DataFrame(rows, columns=["knob", "values", "what it does"]), "generic knobs (training workloads)")
    for name in sorted(workloads):
        try:
            cls = registry.declaration(name)
        except LookupError as exc:
            print(f"{name}: {exc}", file=sys.stderr)
            continue
        if cls.knobs:
            rows = [(knob, " | ".join(map(str, c.values)), c.help) for knob, c in cls.knobs.items()]
            print_wrapped(pd.DataFrame(rows, columns=["knob", "values", "what it does"]), f"{name} knobs")
    return 0
