"""The ``benchbay`` command: parses arguments and calls the library (no logic of its own); the
handlers of its subcommands are in ``benchbay.commands``."""

from __future__ import annotations

import argparse
import math
import os
import sys

from benchbay.commands.interop import cmd_export_pytest_benchmark, cmd_import_pytest_benchmark
from benchbay.commands.judge import cmd_baseline_save, cmd_bisect, cmd_compare, cmd_diff, cmd_gate
from benchbay.commands.results import cmd_history, cmd_report, cmd_show
from benchbay.commands.suite import cmd_list, cmd_profile, cmd_run, cmd_tune, cmd_validate
from benchbay.store import UNWRITABLE

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

#: what bad input raises (an unknown run, suite, metric or file; a malformed value): one line, exit 2
USER_ERRORS = (ValueError, FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError)


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
    p.add_argument("--no-warm-up", action="store_true",
                   help="skip the warm-up process before the first point (for a machine a run has just warmed, as "
                   "a --resume right after it: otherwise the first point may pay for a cold machine)")
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
    p.add_argument("--retry-failed", action="store_true",
                   help="with --resume: measure again, first, the trials that ended in error, crash or timeout")
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
    p.add_argument("--suite", action="append", default=[], metavar="YAML",
                   help="read this suite's breakdown, equivalent groups and description from the file, not from "
                        "its runs' manifests (after the suite's breakdown grew, say)")
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


def _unreadable(exc: OSError) -> bool:
    """Whether a permission error was a read's: its file exists and may not be read (a write's
    names a file that may be read, or none yet)."""
    name = exc.filename
    return isinstance(exc, PermissionError) and isinstance(name, (str, bytes, os.PathLike)) \
        and os.path.exists(name) and not os.access(name, os.R_OK)


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
        if _unreadable(exc):  # a file the user named that may not be read: bad input, not the store
            print(f"benchbay {args.command}: cannot read {exc.filename}: {exc.strerror}", file=sys.stderr)
            return 2
        print(f"benchbay {args.command}: cannot write {exc.filename}: {exc.strerror}", file=sys.stderr)
        return 4


if __name__ == "__main__":
    sys.exit(main())
