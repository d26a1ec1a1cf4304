"""``benchbay diff A B``: where the time of a step went between two profiled points.

Each side is one ok record with a profile (``benchbay profile``). Rows are the step's phases
(the profile's ``record_function`` ranges, ``unattributed`` for the time in none, plus ``idle``:
the device's idle share of the median step) and the op families (``benchbay.collect.op_family``)
of every kernel the profile timed, each with the seconds per step it gained or lost and its share
of the summed absolute changes of its kind: phases can move in opposite directions, so that a
share of the step's change would pass 100% (one phase +6 ms and another -4 ms are 60% and -40%,
not 300% and -200% of a +2 ms step); what the changes of each kind add up to is said beside the
step's own change, measured over other steps (the timed ones). The noise floor is the runs' own
step spread (the median absolute deviation of each side's step times, added in quadrature): a row
whose change lies inside it is not named a cause. Points on another GPU, world size or workload
are refused unless ``force``. A profile recorded before its families were (only its top kernels
kept) is compared by phase alone: a kernel that fell out of a top-15 list is not a saving."""

from __future__ import annotations

import io
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchbay.document import Block, Heading, Image, Table, Text, html, markdown
from benchbay.record import SAMPLES_PER_STEP, STEP_TIMES_S, WARMUP_STEPS
from benchbay.store import read_records, refuse_links, write_atomic

#: what must match for two points to be compared: (description, how it is read from a record)
COMPARABLE = (
    ("GPU", lambda r: r.get("env", {}).get("gpu")),
    ("world size", lambda r: r.get("world_size")),
    ("workload", lambda r: r.get("workload")),
)


def profiled_record(run: Path, label: str | None) -> dict[str, Any]:
    """The ok, profiled record of ``run`` labelled ``label`` (any label when the run has one)."""
    records = read_records(run)  # each line checked: a bad one is skipped, named by file and line
    found = [r for r in records if r.get("status") == "ok" and "phases" in r.get("extra", {})
             and (label is None or r.get("label") == label)]
    labels = sorted({r.get("label") for r in found})
    if not found:
        raise ValueError(f"{run}: no ok profiled record" + (f" labelled {label!r}" if label else "")
                         + " (profile it with `benchbay profile SUITE --point LABEL`)")
    if len(labels) > 1:
        raise ValueError(f"{run}: several profiled points ({', '.join(labels)}); name one with --label")
    return found[0]


@dataclass
class Diff:
    a: dict[str, Any]
    b: dict[str, Any]
    rows: list[dict[str, Any]]  # kind (phase/family), name, a_s, b_s, delta_s, share, cause
    step_a: float
    step_b: float
    noise_s: float
    incomparable: list[str]
    unit: str  # "step", or "sample" when the two batches differ (a larger batch's longer step is no loss)
    unfamilied: list[str]  # the sides whose profile holds no family totals (compared by phase alone)
    summed: dict[str, float]  # per kind (phase, op family): its rows' changes added up, seconds per unit


def _mad(times: list[float]) -> float:
    values = np.asarray(times, dtype=float)
    return float(np.median(np.abs(values - np.median(values)))) if values.size else 0.0


def _steady(record: dict[str, Any]) -> list[float]:
    times = record.get("series", {}).get(STEP_TIMES_S, [])
    return times[int(record.get("metrics", {}).get(WARMUP_STEPS) or 0):]


def _phases(record: dict[str, Any]) -> dict[str, float]:
    extra = record["extra"]
    phases = dict(extra.get("phases", {}))
    if extra.get("idle_gap_share") is not None:
        phases["idle"] = extra["idle_gap_share"] * float(np.median(_steady(record)))
    return phases


def _families(record: dict[str, Any]) -> dict[str, float] | None:
    return record["extra"].get("profile_families")


def diff(a: dict[str, Any], b: dict[str, Any], force: bool = False) -> Diff:
    incomparable = [f"{what}: {read(a)} vs {read(b)}" for what, read in COMPARABLE if read(a) != read(b)]
    if incomparable and not force:
        raise ValueError("not comparable (" + "; ".join(incomparable) + "); --force compares them anyway")
    samples_a, samples_b = (r.get("metrics", {}).get(SAMPLES_PER_STEP) for r in (a, b))
    unit = "sample" if samples_a and samples_b and samples_a != samples_b else "step"
    per_a, per_b = (samples_a, samples_b) if unit == "sample" else (1, 1)
    times_a, times_b = np.asarray(_steady(a)) / per_a, np.asarray(_steady(b)) / per_b
    step_a, step_b = float(np.median(times_a)), float(np.median(times_b))
    noise = math.hypot(_mad(times_a), _mad(times_b))
    rows, summed = [], {}
    unfamilied = [side for side, r in (("A", a), ("B", b)) if _families(r) is None]
    for kind, read in (("phase", _phases), ("op family", _families)):
        side_a, side_b = read(a), read(b)
        if side_a is None or side_b is None:
            continue
        deltas = {name: (side_a.get(name, 0.0) / per_a, side_b.get(name, 0.0) / per_b)
                  for name in dict.fromkeys([*side_a, *side_b])}
        moved = sum(abs(vb - va) for va, vb in deltas.values())
        summed[kind] = sum(vb - va for va, vb in deltas.values())
        for name, (va, vb) in deltas.items():
            delta = vb - va
            rows.append({"kind": kind, "name": name, "a_s": va, "b_s": vb, "delta_s": delta,
                         "share": delta / moved if moved else float("nan"), "cause": abs(delta) > noise})
    rows.sort(key=lambda r: (r["kind"] != "phase", -abs(r["delta_s"])))
    return Diff(a, b, rows, step_a, step_b, noise, incomparable, unit, unfamilied, summed)


PLURAL = {"phase": "phases", "op family": "op families"}


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:+.2f}" if seconds else "0"


def _table(d: Diff, kind: str) -> tuple[tuple[str, ...], list[tuple]]:
    u = d.unit
    headers = (kind, f"A ms/{u}", f"B ms/{u}", f"Δ ms/{u}", "share of Σ|Δ|", "")
    rows = [(r["name"], f"{r['a_s'] * 1e3:.2f}", f"{r['b_s'] * 1e3:.2f}", _ms(r["delta_s"]),
             "" if math.isnan(r["share"]) else f"{r['share']:.0%}", "cause" if r["cause"] else "within noise")
            for r in d.rows if r["kind"] == kind]
    return headers, rows


def _name(record: dict[str, Any]) -> str:
    samples = record.get("metrics", {}).get(SAMPLES_PER_STEP)
    return f"{record.get('label')} ({record.get('suite')}/{record.get('run_id')}; {samples} samples per step)"


def _blocks(d: Diff, plot: Path | None) -> list[Block]:
    """The diff as a document (benchbay.document): Markdown and HTML say the same."""
    head = [f"A: {_name(d.a)}", f"B: {_name(d.b)}",
            f"median step{' per sample' if d.unit == 'sample' else ''}: {d.step_a * 1e3:.2f} → "
            f"{d.step_b * 1e3:.2f} ms ({_ms(d.step_b - d.step_a)} ms); "
            f"noise floor ±{d.noise_s * 1e3:.2f} ms (step spread of both runs): a change inside it is not a cause"]
    if d.summed:
        head.append("share of Σ|Δ|: a row's change over the absolute changes of its kind added up (they can move "
                    "in opposite directions, so no share is of the step's change); their changes add up to "
                    + ", ".join(f"{_ms(total)} ms ({PLURAL[kind]})" for kind, total in d.summed.items())
                    + f" against the median step's {_ms(d.step_b - d.step_a)} ms, timed over other steps")
    if d.unit == "sample":
        head.append("the batches differ: every figure is per sample (the side's per-step figure over its samples "
                    "per step)")
    if d.incomparable:
        head.append("⚠ compared although not comparable (--force): " + "; ".join(d.incomparable))
    if d.unfamilied:
        sides = " and ".join(d.unfamilied)
        head.append(f"by phase only: {sides} {'was' if len(d.unfamilied) == 1 else 'were'} profiled before benchbay "
                    "recorded each op family's time (the record keeps only the top kernels); profile again "
                    "(`benchbay profile`) to compare op families")
    blocks: list[Block] = [Heading(f"benchbay diff: {d.a.get('label')} → {d.b.get('label')}", 1),
                           *(Text(f"- {line}") for line in head)]
    for kind in ("phase", "op family"):
        headers, rows = _table(d, kind)
        if rows:
            blocks += [Heading(f"By {kind}"), Table(pd.DataFrame(rows, columns=list(headers)))]
    if plot:
        blocks.append(Image(plot, "largest deltas"))
    return blocks


def format_markdown(d: Diff, plot: Path | None = None) -> str:
    return markdown(_blocks(d, plot))


def _plot(d: Diff, path: Path, top: int = 12) -> Path:
    from matplotlib.figure import Figure

    rows = sorted(d.rows, key=lambda r: -abs(r["delta_s"]))[:top][::-1]
    fig = Figure(figsize=(7, 0.4 * len(rows) + 1.2))
    ax = fig.subplots()
    ax.barh([f"{r['name']} ({r['kind']})" for r in rows], [r["delta_s"] * 1e3 for r in rows],
            color=["tab:red" if r["delta_s"] > 0 else "tab:green" for r in rows],
            alpha=1.0)
    ax.axvspan(-d.noise_s * 1e3, d.noise_s * 1e3, color="grey", alpha=0.2, label="noise floor")
    ax.set_xlabel(f"Δ ms per {d.unit} (B − A)")
    ax.legend(loc="best")
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, dpi=110, format="png")
    return write_atomic(path, png.getvalue())


def write_diff(d: Diff, out_dir: Path) -> Path:
    """``diff.md``, ``diff.html`` and ``diff_deltas.png`` in ``out_dir``; returns the Markdown's path."""
    out_dir = refuse_links(out_dir, Path(out_dir).parent)
    out_dir.mkdir(parents=True, exist_ok=True)
    plot = _plot(d, out_dir / "diff_deltas.png") if d.rows else None
    write_atomic(out_dir / "diff.html", html(_blocks(d, plot), "benchbay diff").encode())
    return write_atomic(out_dir / "diff.md", format_markdown(d, plot).encode())
