"""Diagnostic runs: chosen points under torch.profiler, allocator snapshots of a batch search's edges.

Both perturb what they observe, so their runs stay apart from measured ones: a profile run is a run
of the suite ``<name>-profile`` (never a baseline of the suite itself), a snapshot run leaves no
record, only its snapshot."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from rich.console import Console

from benchbay.launch.process import run_point
from benchbay.runner import SuiteRunner, feasible
from benchbay.suite import Point, Suite


class ProfilingRunner(SuiteRunner):
    """Runs the points whose label is one of ``labels`` (else the suite's ``profile`` list, else
    every point) once each, every one under the profiler."""

    def __init__(self, suite: Suite, labels: list[str] | None, results_root: str | Path = "results",
                 console: Console | None = None):
        suite = replace(suite, name=f"{suite.name}-profile", search=None, repeats=1)
        super().__init__(suite, results_root, console, labels=list(labels or suite.profile))

    def spec(self, point: Point, repeat: int = 0) -> dict[str, Any]:
        return {**super().spec(point, repeat), "profile": True}


def profile_points(suite: Suite, labels: list[str] | None = None, results_root: str | Path = "results",
                   console: Console | None = None) -> Path:
    """Profile the chosen points of ``suite``; returns the run folder (records.jsonl, and under
    ``profiles/<point_id>-<repeat>/`` each point's trace.json and top_ops.csv)."""
    runner = ProfilingRunner(suite, labels, results_root, console)
    runner.run_all()
    return runner.run


def search_edges(records: list[dict[str, Any]], knob: str, headroom_gib: float | None = None,
                 zero_retries: bool = False) -> list[tuple[str, dict[str, Any]]]:
    """The largest feasible probe (by the search's own criterion) and the smallest OOM probe of one
    configuration's batch search, as ``(role, record)``; either may be missing."""
    fits = [r for r in records if feasible(r, headroom_gib, zero_retries)]
    ooms = [r for r in records if r["status"] == "oom"]
    edges = []
    if fits:
        edges.append(("largest_ok", max(fits, key=lambda r: r["knobs"][knob])))
    if ooms:
        edges.append(("smallest_oom", min(ooms, key=lambda r: r["knobs"][knob])))
    return edges


def snapshot_search_edges(runner: SuiteRunner, config: Point, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Re-run the edges of one configuration's batch search (``records``: its probes) with the
    allocator's history recorded, each in a process of its own; the snapshots go to
    ``<run>/memory/<point_id>-<repeat>/`` and an entry per snapshot run is appended to
    ``<run>/memory/snapshots.jsonl`` (and returned). CUDA only: on CPU nothing runs."""
    search = runner.suite.search
    if runner.device != "cuda" or search is None:
        return []
    entries = []
    for role, record in search_edges(records, search.knob, search.headroom_gib, search.zero_retries):
        point = replace(config, knobs=record["knobs"], point_id=record["point_id"], label=record.get("label"))
        name = f"{record['point_id']}-{record.get('repeat', 0)}"
        out = runner.run / "memory" / name
        # the probe's own steps: an OOM can come late (H200, Wall-X mbs 20: at the third step)
        spec = {**runner.spec(point), "profile": False, "memory_snapshot": True, "memory_snapshot_dir": str(out)}
        outcome = run_point(spec, runner.scratch / f"snapshot-{name}", runner.suite.timeout, runner.launch)
        entry = {"point_id": record["point_id"], "repeat": record.get("repeat", 0), "label": record.get("label"),
                 "search_group": record.get("extra", {}).get("search_group"), "knob": search.knob,
                 "value": record["knobs"][search.knob], "role": role, "status": outcome["status"],
                 "reason": outcome.get("reason"), "snapshots": sorted(str(p) for p in out.glob("snapshot*.pickle"))}
        with open(runner.run / "memory" / "snapshots.jsonl", "a") as f:
            f.write(json.dumps(entry) + "\n")
        entries.append(entry)
    return entries
