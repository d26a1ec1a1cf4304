"""Profiled runs: chosen points under torch.profiler (trace, top ops, phases, syncs).

The profiler perturbs what it observes, so its runs stay apart from measured ones: a profile run
is a run of the suite ``<name>-profile`` (never a baseline of the suite itself)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from rich.console import Console

from benchbay import store
from benchbay.collect.profile import UNATTRIBUTED
from benchbay.launch.base import PointSpec
from benchbay.runner import SuiteRunner
from benchbay.suite.model import Point, Suite

#: suite keys about measured points, which a profile run's manifest leaves out
MEASURED_ONLY = ("breakdown", "equivalent", "equivalent_tolerance", "gate")


class ProfilingRunner(SuiteRunner):
    """Runs the points whose label is one of ``labels`` (else the suite's ``profile`` list, else
    every point) once each, every one under the profiler."""

    def __init__(self, suite: Suite, labels: list[str] | None, results_root: str | Path = "results",
                 console: Console | None = None, peak_flops: float | None = None):
        # what compares measured points (the breakdown, equivalent losses, gate) stays with the suite
        raw = {k: v for k, v in suite.raw.items() if k not in MEASURED_ONLY} | {"name": f"{suite.name}-profile"}
        suite = replace(suite, name=raw["name"], search=None, repeats=1, breakdown=[], equivalent=[],
                        equivalent_tolerance={}, gate=[], raw=raw)
        super().__init__(suite, results_root, console, labels=list(labels or suite.profile), peak_flops=peak_flops)

    def spec(self, point: Point, repeat: int = 0, stop_below: float | None = None) -> PointSpec:
        return replace(super().spec(point, repeat, stop_below), profile=True)


def profile_points(suite: Suite, labels: list[str] | None = None, results_root: str | Path = "results",
                   console: Console | None = None, peak_flops: float | None = None) -> Path:
    """Profile the chosen points of ``suite``; returns the run folder (records.jsonl, and under
    ``profiles/<point_id>-<repeat>/`` each point's trace.json and top_ops.csv)."""
    runner = ProfilingRunner(suite, labels, results_root, console, peak_flops)
    runner.run_all()
    return runner.run


def summary_lines(run: Path, top: int = 5) -> list[str]:
    """What a profile run found, point by point: its profiled step and the phases that make it up
    (ms a step; on a GPU, of its kernels' time, the idle share the rest) and its top ops, then
    where the traces are and the command that draws them."""
    lines, unattributed = [], False
    for record in store.read_records(run):
        extra = record.get("extra") or {}
        if record["status"] != "ok":
            lines.append(f"{record['status']} {record.get('label')}: {record.get('reason') or ''}"[:300])
            continue
        phases = extra.get("phases") or {}
        unattributed |= bool(phases.get(UNATTRIBUTED))
        named = " + ".join(f"{name} {1e3 * s:.1f} ms" for name, s in phases.items()) or "no phases"
        step = extra.get("profiled_step_s")
        on_host = extra.get("phase_clock") == "host"
        head = "" if step is None else f"step {1e3 * step:.1f} ms (profiled) " + ("= " if on_host else "; kernels: ")
        lines.append(f"{record.get('label')}: {head}{named}"
                     + (f", GPU idle {extra['idle_gap_share']:.1%}" if extra.get("idle_gap_share") is not None else ""))
        for op in (extra.get("profile_top_ops") or [])[:top]:
            share = "" if op.get("share") is None else f"{op['share']:.1%}"
            lines.append(f"  {1e3 * (op.get('time_s') or 0):8.2f} ms {share:>6}  {op['name'][:100]}")
    if unattributed:
        lines.append(f"{UNATTRIBUTED}: the step's time in no phase range (a loss that opens no `forward` range, "
                     "as record_function('forward') would, has its forward there)")
    lines += [f"traces: {run / 'profiles'} (records: {run})",
              f"report: benchbay report {run.parent.name} (phases and top ops of each point)"]
    return lines
