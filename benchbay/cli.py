"""The ``benchbay`` command: parses arguments and calls the library (no logic of its own)."""

from __future__ import annotations

import argparse
import io
import math
import os
import re
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from benchbay.record import Status
from benchbay.store import UNWRITABLE

if TYPE_CHECKING:  # pandas loads lazily: `benchbay --help` and `validate` stay quick
    import pandas as pd

# soft wrap: a message is one line however narrow the terminal or pipe; tables fit themselves
console = Console(soft_wrap=True)

DESCRIPTION = """\
Benchmark and profile training steps (DreamZero, Wall-X or your own) and video decoders.

A suite (a YAML file under suites/) declares a sweep of configurations. `benchbay run` measures
each point in a process of its own, appends one record per point to results/<suite>/<run-id>/
and writes a report to reports/<suite>/; the other commands read those results."""

EXAMPLES = """\
examples:
  benchbay validate suites/quickstart.yaml       check a suite before running it
  benchbay run suites/quickstart.yaml            measure every point, then write reports/quickstart/
  benchbay tune suites/wallx-tune.yaml           search a suite's tune.space for the best faithful configuration
  benchbay show quickstart                       the results of the suite's runs, one table per workload
  benchbay compare RUN_A RUN_B                   what changed between two runs, with intervals
  benchbay baseline save quickstart             keep the newest run as this machine's baseline "quickstart"
  benchbay gate quickstart                       exit 1 on a real regression against it (for CI)

exit codes: 0 done (gate: passed, or too few repeats to support a verdict); 1 a point failed (run) or a
regression (gate); 2 bad input or a missing dependency; 3 out of --time-budget;
4 the results store could not be written (run; resumable); 130 interrupted (Ctrl-C or SIGTERM).
Bad input is said in one line; set BENCHBAY_TRACEBACK=1 for the traceback behind it."""

#: any other status (a failure, or repeats that disagree) is bold red
_STATUS_STYLE = {Status.OK: "green", Status.SKIPPED: "dim", "": ""}
_NUMBER = re.compile(r"^[-+]?[\d.]+(e[-+]?\d+)?[x%]?$")
#: what bad input raises (an unknown run, suite, metric or file; a malformed value): one line, exit 2
USER_ERRORS = (ValueError, FileNotFoundError, FileExistsError, IsADirectoryError)
#: the MFU denominator (TFLOP/s) for every point, e.g. for fp32 points or a device benchbay does not list
PEAK_ENV_VAR = "BENCHBAY_PEAK_TFLOPS"


def _peak_flops() -> float | None:
    """The peak FLOP/s forced by ``BENCHBAY_PEAK_TFLOPS``, else None (each device's own)."""
    tflops = os.environ.get(PEAK_ENV_VAR)
    return float(tflops) * 1e12 if tflops else None


def _price(args, runs) -> float | dict[str, float]:
    """The GPU-hour price for the cost columns: ``--price-per-gpu-hour``, else each suite's own."""
    from benchbay.analysis.cost import prices

    return prices(_suite_metas(runs), args.price_per_gpu_hour)


def _print_table(frame: pd.DataFrame, title: str) -> None:
    """A display table fitted to the terminal (long texts cut: the full ones are in --export), or
    on a pipe plain lines as wide as they need."""
    texts = [c for c in frame.columns if c in ("notes", "reason", "what it does")]
    if not console.is_terminal:
        widths = [max([len(str(c)), *(len(str(v)) for v in frame[c])]) for c in frame.columns]
        # COLUMNS set on a pipe: the long texts give way to fit it (12 characters at least)
        over = sum(widths) + 2 * (len(widths) - 1) - int(os.environ.get("COLUMNS") or sys.maxsize)
        for i, column in enumerate(frame.columns):
            if column in texts and over > 0:
                cut = min(over, widths[i] - 12)
                widths[i], over = widths[i] - max(cut, 0), over - max(cut, 0)
        lines = [title, *("  ".join(_cut(str(v), w).ljust(w) for v, w in zip(row, widths, strict=True)).rstrip()
                          for row in [frame.columns, *frame.itertuples(index=False)])]
        print("\n".join(lines) + "\n")
        return
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, header_style="bold")
    for column in frame.columns:
        # only the long texts are wrappable columns, so only they give way to fit; each cell stays one line
        numeric = frame[column].map(lambda v: v == "" or bool(_NUMBER.match(str(v)))).all()
        table.add_column(column, no_wrap=column not in texts, min_width=12 if column in texts else None,
                         justify="right" if numeric else "left")
    for row in frame.itertuples(index=False):
        cells = [Text(str(v), no_wrap=True, overflow="ellipsis",
                      style=_STATUS_STYLE.get(str(v), "bold red") if c == "status" else "")
                 for c, v in zip(frame.columns, row, strict=True)]
        table.add_row(*cells)
    console.print(table, highlight=False, soft_wrap=False)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _suite(args):
    from benchbay.suite import load

    return load(args.suite, args.set)


def cmd_validate(args) -> int:
    suite = _suite(args)
    if suite.tune is not None and not suite.raw.get("sweep"):
        from benchbay.tune.space import IntRange

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

    suite = _suite(args)
    if suite.tune is not None and not suite.raw.get("sweep"):
        raise ValueError(f"{args.suite}: a tune (tune: and no sweep:): search it with `benchbay tune {args.suite}`")
    resume = True if args.resume == "latest" else (args.resume or False)  # True: the latest run
    if args.retry_failed and not resume:
        raise ValueError("--retry-failed: with --resume (it measures again the failed points of a run)")
    runner = SuiteRunner(suite, args.results, resume=resume, launcher=_launcher(args, suite), labels=args.point,
                         peak_flops=_peak_flops(), time_budget_s=args.time_budget, retry_failed=args.retry_failed)
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
        from benchbay.report import build_report
        from benchbay.runner import sigterm_as_interrupt
        from benchbay.store import find_runs, load_runs
        from benchbay.suite_model import SuiteMeta

        out = Path(args.report_dir or Path("reports") / suite.name)
        try:  # SIGTERM here too is an interrupt (130): the report is written whole or not at all
            with sigterm_as_interrupt():
                # the suite's runs (build_report keeps this machine's): a run of --point adds to the report
                path = build_report(load_runs(find_runs([summary.run.parent])), out, title=suite.name,
                                    suite_meta=SuiteMeta.of(suite), peak_flops=_peak_flops())
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

    suite = _suite(args)
    if args.emit_suite:  # before any trial: a bad path fails at once
        from benchbay.store import writable_file

        writable_file(args.emit_suite, "--emit-suite")
    resume = True if args.resume == "latest" else (args.resume or False)
    tuner = Tuner(suite, args.results, resume=resume, launcher=_launcher(args, suite), trials=args.trials,
                  device_seconds=args.device_seconds, time_budget_s=args.time_budget, peak_flops=_peak_flops())
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
        console.print(f"suite: {emit_suite(summary.run, args.emit_suite)}")
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

    meta = _suite_metas([run])
    name = next(iter(meta), run.parent.name)
    return build_report(load_runs([run]), Path(out or Path("reports") / name), title=name, suite_meta=meta,
                        peak_flops=_peak_flops(), tunes=_tunes([run]))


def _tunes(runs) -> dict:
    """Each tune run's ``tune.json``, read as data (benchbay.tune.result)."""
    from benchbay.tune.result import read_result

    return {run.name: result for run in runs if (result := read_result(run)) is not None}


def _regressed(run: Path, baseline_name: str | None, results: str) -> list[str]:
    """The labels of the points the gate finds regressed in ``run`` against its baseline."""
    from benchbay.analysis.diff_pointer import regressed_labels
    from benchbay.analysis.gate import gate
    from benchbay.store import load_runs
    from benchbay.suite_model import SuiteMeta

    baseline = _baseline(run, baseline_name, results)
    if baseline is None:
        raise FileNotFoundError(f"--from-gate {run}: no baseline to gate it against (benchbay baseline save)")
    thresholds = SuiteMeta.of_run(run).gate or None
    return regressed_labels(gate(load_runs([baseline]), load_runs([run]), thresholds).checks)


def cmd_profile(args) -> int:
    from benchbay.profiling import profile_points, summary_lines

    labels = list(args.point)
    if args.from_gate:
        regressed = _regressed(_one_run(args.from_gate, args.results), args.baseline, args.results)
        if not regressed:
            console.print(f"{args.from_gate}: the gate finds no regressed labelled point: nothing to profile")
            return 0
        console.print(f"profiling the regressed points: {', '.join(regressed)}")
        labels += regressed
    run = profile_points(_suite(args), labels, args.results, peak_flops=_peak_flops())
    print("\n".join(summary_lines(run)))
    return 0


def cmd_list(args) -> int:
    import pandas as pd

    from benchbay import knobs
    from benchbay.workloads import registry

    suites = pd.DataFrame({"suite": [str(p) for p in sorted(Path(args.suites).glob("*.yaml"))]})
    _print_wrapped(suites, "suites")
    workloads = registry.available()
    _print_wrapped(pd.DataFrame({"workload": list(workloads), "defined in": list(workloads.values())}), "workloads")
    rows = [(name, " | ".join(map(str, k.values)) if k.values else (k.type.__name__ if k.type else "str"), k.help)
            for name, k in knobs.GENERIC.items()]
    _print_wrapped(pd.DataFrame(rows, columns=["knob", "values", "what it does"]), "generic knobs (training workloads)")
    for name in sorted(workloads):
        try:
            cls = registry.declaration(name)
        except LookupError as exc:
            print(f"{name}: {exc}", file=sys.stderr)
            continue
        if cls.knobs:
            rows = [(knob, " | ".join(map(str, c.values)), c.help) for knob, c in cls.knobs.items()]
            _print_wrapped(pd.DataFrame(rows, columns=["knob", "values", "what it does"]), f"{name} knobs")
    return 0


def _print_wrapped(frame: pd.DataFrame, title: str) -> None:
    """A listing fitted to the terminal's width (on a pipe: COLUMNS, else 100), every cell wrapped
    and none cut: a knob's values and help are what `list` is for."""
    width = shutil.get_terminal_size((100, 24)).columns
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, header_style="bold",
                  expand=len(frame.columns) > 2)
    for i, column in enumerate(frame.columns):  # the name as it is; the values and the help share the rest, 1:2
        table.add_column(column, overflow="fold", ratio=None if i == 0 else i)
    for row in frame.itertuples(index=False):
        table.add_row(*(Text(str(v)) for v in row))
    out = Console(width=width, file=io.StringIO(), color_system=None)
    out.print(table, highlight=False)
    print("\n".join(line.rstrip() for line in out.file.getvalue().splitlines()))


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
    for suite, points in point_summary(df, _peak_flops(), _price(args, found)).groupby("suite", sort=False):
        runs = ", ".join(sorted(df.loc[df.suite == suite, "run_id"].unique()))
        for workload, group in points.groupby("workload", sort=False):
            columns = DECODE_KEY_COLUMNS if decodes(group) else KEY_COLUMNS
            table = display(sweep_table(group, columns), per=device_word(group))
            _print_table(table, f"{suite}: {workload} ({runs})")
            for note in cost_notes(group):
                print(note)
    if args.export:
        console.print(f"exported: {export(df, args.export)} (every column)")
    return 0


def _one_run(ref: str, results: str) -> Path:
    """A single run: the newest (``newest_first``) when ``ref`` names a suite folder or suite."""
    from benchbay.store import find_runs, newest_first

    return newest_first(find_runs([ref], results))[0]


def _suite_metas(runs) -> dict:
    """What analysis reads of each suite the runs ran, from their manifests (never importing a
    workload they name: ``SuiteMeta``)."""
    from benchbay.store import read_manifest
    from benchbay.suite_model import SuiteMeta

    metas = {}
    for run in runs:
        manifest = read_manifest(run)
        if manifest.get("suite_as_run"):
            metas[manifest["suite"]] = SuiteMeta.from_raw(manifest["suite_as_run"])
    return metas


def cmd_report(args) -> int:
    from benchbay.report import build_report
    from benchbay.store import SAFE_NAME, find_runs, load_runs

    runs = find_runs(args.runs, args.results)
    if args.emit_suite:
        from benchbay.store import writable_file
        from benchbay.tune.result import emit_suite

        tuned = [run for run in runs if run.name in _tunes(runs)]
        if len(tuned) != 1:
            raise ValueError(f"--emit-suite: one tune run, got {len(tuned)} among {len(runs)} run(s)")
        console.print(f"suite: {emit_suite(tuned[0], writable_file(args.emit_suite, '--emit-suite'))}")
    metas = _suite_metas(runs)
    title = args.title or ", ".join(sorted(metas)) or "benchbay report"
    named = list(metas)[0] if len(metas) == 1 else "combined"
    if not SAFE_NAME.fullmatch(named):  # a stored suite name is untrusted: it must not pick the folder
        named = "combined"
    out = Path(args.out or Path("reports") / named)
    path = build_report(load_runs(runs), out, title=title, suite_meta=metas, peak_flops=_peak_flops(),
                        price_per_gpu_hour=args.price_per_gpu_hour, tunes=_tunes(runs))
    console.print(f"report: {path} (and {path.with_suffix('.md')})")
    return 0


def cmd_compare(args) -> int:
    import pandas as pd

    from benchbay.analysis.compare import CompareOptions, compare, format_compare
    from benchbay.analysis.cost import NO_PRICE, energy_note
    from benchbay.analysis.diff_pointer import diff_pointers, format_pointers
    from benchbay.store import load_runs

    baseline, candidate = _one_run(args.baseline, args.results), _one_run(args.candidate, args.results)
    price = _price(args, [candidate])
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
        tol = {"rtol": float(parts[2]), "atol": float(parts[3])} if len(parts) == 4 else {}
        checks.append(loss_equivalence(df, parts[0], parts[1], **tol))
    return checks


def _baseline(run: Path, name: str | None, results: str) -> Path | None:
    """The baseline a run is gated against: ``name`` as a folder, else by name on the run's machine;
    either meets ``check_baseline`` (readable, of the run's machine)."""
    from benchbay.baselines import check_baseline, find_baseline, run_machine_key
    from benchbay.store import read_manifest

    suite, key = read_manifest(run).get("suite"), run_machine_key(run)
    found = Path(name) if name and Path(name).is_dir() else find_baseline(results, key, name=name or suite, suite=suite)
    return None if found is None else check_baseline(found, key)


def cmd_gate(args) -> int:
    from benchbay.analysis.diff_pointer import diff_pointers, format_pointers
    from benchbay.analysis.gate import format_no_baseline, gate
    from benchbay.baselines import run_machine_key
    from benchbay.store import load_runs, read_manifest, writable_file
    from benchbay.suite_model import SuiteMeta

    if args.markdown:  # before the gate: its verdict must not be lost to a bad path after it
        writable_file(args.markdown, "--markdown")
    run = _one_run(args.candidate, args.results)
    manifest = read_manifest(run)
    baseline = _baseline(run, args.baseline, args.results)
    if baseline is None:
        text = format_no_baseline(run_machine_key(run), args.baseline or manifest.get("suite"),
                                  Path(args.results) / "baselines", args.require_baseline)
        exit_code = 1 if args.require_baseline else 0
    else:
        candidate = load_runs([run])
        thresholds = args.threshold or SuiteMeta.from_raw(manifest.get("suite_as_run") or {}).gate or None
        result = gate(load_runs([baseline]), candidate, thresholds,
                      loss_checks=_loss_checks(candidate, args.loss_equivalence), ignore_knobs=args.ignore_knob,
                      require_comparison=args.require_baseline, history=_machine_history(run, args.results))
        text = f"baseline: {baseline}\ncandidate: {run}\n\n{result.markdown.rstrip()}"
        text += format_pointers(diff_pointers(result.checks, baseline, run, args.results))
        exit_code = result.exit_code
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text + "\n")
    return exit_code


def cmd_diff(args) -> int:
    from benchbay.analysis.diff import diff, format_markdown, profiled_record, write_diff

    result = diff(profiled_record(_one_run(args.a, args.results), args.label_a),
                  profiled_record(_one_run(args.b, args.results), args.label_b), force=args.force)
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

    runs = [_one_run(run, args.results) for run in args.run]
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


def cmd_import_pytest_benchmark(args) -> int:
    from benchbay.pytest_benchmark import import_pytest_benchmark

    console.print(f"imported: {import_pytest_benchmark(args.json, args.results, suite=args.suite)}")
    return 0


def cmd_export_pytest_benchmark(args) -> int:
    from benchbay.pytest_benchmark import export_pytest_benchmark

    console.print(f"exported: {export_pytest_benchmark(_one_run(args.run, args.results), args.out)}")
    return 0


def _amount(text: str) -> float:
    """A number of seconds, percent or price: finite and not negative (``nan`` compared as "no change",
    and a budget of ``nan`` let every point start)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a finite number, 0 or more")
    return value


def _suite_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("suite", help="a suite YAML file")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a suite field, e.g. --set steps.measure=5 --set knobs.mbs=2")


def _results_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--results", default="results", help="results root (default: results)")


def _baseline_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--baseline", help="baseline name under results/baselines/<machine-key>/ or a folder "
                   "(default: the suite's name)")


def _price_argument(p: argparse.ArgumentParser) -> None:
    # checked where priced (analysis.cost.check_price: a finite number > 0), as a suite's own price
    p.add_argument("--price-per-gpu-hour", type=float, metavar="PRICE",
                   help="the cost per 1M samples at this GPU-hour price (default: the suite's price_per_gpu_hour)")


def _point_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--point", action="append", default=[], metavar="LABEL",
                   help="only the points with this label (repeatable; default: every point)")


def _ignore_knob_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ignore-knob", action="append", default=[], metavar="KNOB",
                   help="match points whatever this knob's value (a deliberate change, e.g. compile)")


def _suite_commands(sub) -> None:
    """Commands that read a suite file: run, validate, profile, list."""
    p = sub.add_parser("run", help="run every point of a suite, each in its own process, then write the report")
    _suite_arguments(p)
    _point_argument(p)
    _results_argument(p)
    p.add_argument("--resume", nargs="?", const="latest", default=None, metavar="RUN_ID",
                   help="continue a run (the latest on this machine, or RUN_ID), skipping measured points")
    p.add_argument("--retry-failed", action="store_true",
                   help="with --resume: measure again the points that ended in error, crash, timeout, diverged or "
                   "oom (outside a batch search); the new record stands for the point")
    p.add_argument("--no-report", action="store_true", help="do not write the report after the run")
    p.add_argument("--time-budget", type=_amount, metavar="SECONDS",
                   help="start no point once less time is left than it took before on this machine (any run "
                   "of the suite), or than the longest point so far where it has no record; later points that "
                   "fit still run (exit code 3, resumable): a job's time limit then falls between points")
    p.add_argument("--allow-failures", action="store_true",
                   help="exit 0 even when points end in error, crash, timeout, diverged or oom (outside a batch "
                   "search, where an oom is a result)")
    p.add_argument("--executor", choices=("local", "slurm"), default="local",
                   help="run points here, or each as a Slurm job through submitit")
    p.add_argument("--executor-param", action="append", default=[], metavar="KEY=VALUE",
                   help="submitit parameter, e.g. slurm_partition=gpu, folder=/shared/jobs (repeatable)")
    p.add_argument("--report-dir", help="where the report goes (default: reports/<suite>)")
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("tune", help="search a suite's tune.space for the best configuration that meets its "
                       "constraints (Optuna; each trial a point in its own process)")
    _suite_arguments(p)
    _results_argument(p)
    p.add_argument("--trials", type=int, metavar="N", help="trials to run in all (overrides tune.trials)")
    p.add_argument("--device-seconds", type=_amount, metavar="S",
                   help="device time for all trials and confirmations (overrides tune.device_seconds)")
    p.add_argument("--resume", nargs="?", const="latest", default=None, metavar="RUN_ID",
                   help="continue a tune (the latest of this suite on this machine, or RUN_ID)")
    p.add_argument("--time-budget", type=_amount, metavar="SECONDS",
                   help="this call's time: start no trial that would not end within it (exit code 3, resumable)")
    p.add_argument("--emit-suite", metavar="PATH", help="write the winner as a suite anyone can run and gate")
    p.add_argument("--no-report", action="store_true", help="do not write the report after the tune")
    p.add_argument("--report-dir", help="where the report goes (default: reports/<suite>)")
    p.add_argument("--executor", choices=("local", "slurm"), default="local", help=argparse.SUPPRESS)
    p.add_argument("--executor-param", action="append", default=[], help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_tune)
    p = sub.add_parser("validate", help="check a suite file and count its points")
    _suite_arguments(p)
    p.set_defaults(func=cmd_validate)
    p = sub.add_parser("profile", help="run chosen points under torch.profiler (trace, top ops, phases, syncs)")
    _suite_arguments(p)
    _point_argument(p)
    _results_argument(p)
    p.add_argument("--from-gate", metavar="RUN", help="also the points the gate finds regressed in RUN (a run, "
                   "or a suite: its newest run), so that `benchbay diff` can explain them")
    _baseline_argument(p)
    p.set_defaults(func=cmd_profile)
    p = sub.add_parser("list", help="suites, workloads and knobs")
    p.add_argument("--suites", default="suites", help="folder of suite files (default: suites)")
    p.set_defaults(func=cmd_list)


def _results_commands(sub) -> None:
    """Commands that read the results store: show, report, history."""
    p = sub.add_parser("show", help="the results of runs, one table per workload")
    p.add_argument("runs", nargs="+", help="run folders, run ids, suite names or records.jsonl files")
    _results_argument(p)
    p.add_argument("--export", help="also write the full flat table to a .csv or .parquet file")
    _price_argument(p)
    p.set_defaults(func=cmd_show)
    p = sub.add_parser("report", help="write the Markdown + HTML report of runs (from the store alone)")
    p.add_argument("runs", nargs="+", help="run folders, run ids, suite names or records.jsonl files")
    _results_argument(p)
    p.add_argument("--out", help="output folder (default: reports/<suite>)")
    p.add_argument("--title")
    p.add_argument("--emit-suite", metavar="PATH", help="a tune run: write its winner as a suite (as tune does)")
    _price_argument(p)
    p.set_defaults(func=cmd_report)
    p = sub.add_parser("history", help="a metric across past runs, with change points flagged")
    p.add_argument("suite", help="a suite name (its folder under the results root)")
    p.add_argument("--metric", default="step_time", help="step_time, samples_per_s_per_gpu, peak_mem, mfu...")
    p.add_argument("--statistic", default="mean", help="mean (the step the tables show), median, min, max, p10 or p90")
    _results_argument(p)
    p.set_defaults(func=cmd_history)


def _gate_commands(sub) -> None:
    """Commands that judge runs: compare, gate, baseline save."""
    p = sub.add_parser("compare", help="per point and metric: ratio, confidence interval, verdict")
    p.add_argument("baseline", help="a run (folder, id, or a suite: its newest run)")
    p.add_argument("candidate", help="a run (folder, id, or a suite: its newest run)")
    _results_argument(p)
    p.add_argument("--min-change", type=_amount, default=2.0, metavar="PERCENT",
                   help="smallest change that counts (default 2)")
    p.add_argument("--only-changes", action="store_true", help="leave out points without a real change")
    _ignore_knob_argument(p)
    _price_argument(p)
    p.set_defaults(func=cmd_compare)
    p = sub.add_parser("gate", help="exit 1 on a regression against the stored baseline of this machine")
    p.add_argument("candidate", help="a run (folder, id, or a suite: its newest run)")
    _results_argument(p)
    _baseline_argument(p)
    p.add_argument("--threshold", action="append", default=[], metavar="[KEY=PATTERN/]METRIC[:STAT]:N%",
                   help="e.g. step_time:median:5%%, peak_mem:2%%, label=+compile/step_time:3%% "
                   "(default: the suite's gate list)")
    p.add_argument("--loss-equivalence", action="append", default=[], metavar="REF:CAND[:RTOL:ATOL]",
                   help="the loss curve of label CAND must follow label REF's")
    p.add_argument("--markdown", help="also write the summary to this file (CI job summary)")
    p.add_argument("--require-baseline", action="store_true",
                   help="fail when no baseline exists, or when nothing of it compares with the candidate")
    _ignore_knob_argument(p)
    p.set_defaults(func=cmd_gate)
    p = sub.add_parser("diff", help="two profiled points by phase and op family, with a noise floor")
    p.add_argument("a", help="the first profiled run (folder, id, or a suite: its newest run)")
    p.add_argument("b", help="the second profiled run")
    p.add_argument("--label-a", help="the point of A (needed when A profiled several)")
    p.add_argument("--label-b", help="the point of B (needed when B profiled several)")
    p.add_argument("--force", action="store_true", help="compare across GPU, world size or workload")
    p.add_argument("--out", help="also write diff.md, diff.html and the plot of the largest deltas here")
    _results_argument(p)
    p.set_defaults(func=cmd_diff)
    p = sub.add_parser("bisect", help="the first commit that made a point slower (git bisect, the gate's statistics)")
    _suite_arguments(p)
    p.add_argument("--point", required=True, metavar="LABEL", help="the point that regressed")
    p.add_argument("--good", required=True, metavar="REV", help="a commit where the point was fast")
    p.add_argument("--bad", required=True, metavar="REV", help="a commit where it is slow")
    p.add_argument("--repo", default=".", help="the git repository (default: here)")
    p.add_argument("--install", metavar="CMD", help="run in each commit's worktree first, e.g. 'pip install -e .'")
    p.add_argument("--threshold", action="append", default=[], help="as gate's (default: the suite's gate list)")
    p.set_defaults(func=cmd_bisect)
    p = sub.add_parser("baseline", help="manage baselines")
    b = p.add_subparsers(dest="action", required=True).add_parser(
        "save", help="store a run (a suite: its newest run; several runs of one machine: a suite measured in parts) "
        "as results/baselines/<machine-key>/<name>/")
    b.add_argument("run", nargs="+", help="runs (folders, ids, or a suite: its newest run)")
    b.add_argument("--name", help="the baseline's name (default: the suite's, the name `gate` looks for)")
    _results_argument(b)
    b.set_defaults(func=cmd_baseline_save)


def _interop_commands(sub) -> None:
    """pytest-benchmark import and export."""
    p = sub.add_parser("import-pytest-benchmark", help="read a pytest-benchmark JSON file into the store")
    p.add_argument("json")
    p.add_argument("--suite", default="pytest-benchmark")
    _results_argument(p)
    p.set_defaults(func=cmd_import_pytest_benchmark)
    p = sub.add_parser("export-pytest-benchmark", help="write a run as pytest-benchmark JSON")
    p.add_argument("run")
    p.add_argument("out")
    _results_argument(p)
    p.set_defaults(func=cmd_export_pytest_benchmark)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="benchbay", description=DESCRIPTION, epilog=EXAMPLES,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in (_suite_commands, _results_commands, _gate_commands, _interop_commands):
        add(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    # a suite's module:Class in the working directory imports, as under `python -m benchbay` (the
    # installed script put only its own folder first); last, so that no file there shadows a package
    if os.getcwd() not in sys.path:
        sys.path.append(os.getcwd())
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except USER_ERRORS as exc:
        if os.environ.get("BENCHBAY_TRACEBACK"):
            raise
        print(f"benchbay {args.command}: {exc}", file=sys.stderr)  # plain: a wrap would split paths and keys
        return 2
    except BrokenPipeError:  # the reader (`| head`) stopped reading: not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return 0
    except OSError as exc:  # a full disk or a read-only folder (a report, a baseline): said in one line
        if exc.errno not in UNWRITABLE or os.environ.get("BENCHBAY_TRACEBACK"):
            raise
        print(f"benchbay {args.command}: cannot write {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 4


if __name__ == "__main__":
    sys.exit(main())
