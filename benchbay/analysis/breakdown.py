"""The optimisation breakdown: what each optimisation buys, with confidence intervals.

- :func:`waterfall`: the suite's ordered ``breakdown`` labels, each compared with the previous ok
  step (step time and throughput change) and with the first (cumulative speed-up).
- :func:`leave_one_out`: the best configuration against itself minus one optimisation: points
  labelled ``best-<opt>``, and points that differ from the best in exactly one knob or param at the
  same batch size (``<knob>=<best value>`` names what was removed).

Step-time changes are ratios of the means of the pooled steady-state steps (``stats.STEP_STATISTIC``,
the step the tables show), divided by the ratio of samples per step: the change of the time per
sample, which is the step's where the batch is the same. Their interval is over processes (each
repeat's mean step, :func:`benchbay.analysis.stats.ratio_test` on the log scale): the steps of one
process share its luck and are no samples of the noise between processes, so a point of one
repeat against another of one has no interval (``no interval``), never one that credits a lever
with a process's luck. Throughput changes are the reciprocal, interval included, so a shorter
time per sample is always faster. A change whose interval includes no change is ``not
significant`` (its ``verdict``); the cumulative speed-up has an interval of its own. The
per-sample figures the summary has (cost per 1M samples, energy: benchbay.analysis.cost) follow
throughput. ``notes`` carries each point's noise and health notes, and names the runs where a
change compares points measured in two. When a label names several points (a labelled point
crossed with a grid), the first is used.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from benchbay.analysis.cost import present, say_absent
from benchbay.analysis.frame import is_missing, knob_columns, param_columns
from benchbay.analysis.metrics import Verdict
from benchbay.analysis.stats import STATISTICS, STEP_STATISTIC, per_process, ratio_test
from benchbay.record import SAMPLES_PER_S_PER_GPU, SAMPLES_PER_STEP, STEP_TIME_S, Status

BEST_PREFIX = "best-"
_CHANGE_COLUMNS = ("step_change", "step_change_low", "step_change_high",
                   "throughput_change", "throughput_change_low", "throughput_change_high", "verdict")


def point_changes(base: pd.Series, cand: pd.Series, confidence: float = 0.95,
                  statistic: str = STEP_STATISTIC) -> dict[str, Any]:
    """Relative change of the time per sample (``step_change``: the step time's ``statistic`` over
    samples per step, the step's own change where the batch is the same) and of throughput from
    ``base`` to ``cand`` (0.1 = +10 %), with bounds over processes (NaN where a side has no per-step
    samples, or neither side more than one process), and the verdict on throughput."""
    out = dict.fromkeys(_CHANGE_COLUMNS, np.nan)
    if base["steady_samples"] and cand["steady_samples"]:
        (base_values, base_floor), (cand_values, cand_floor) = (
            per_process(side["steady_samples"], statistic) for side in (base, cand))
        pooled = [float(STATISTICS[statistic](np.concatenate(side["steady_samples"]))) for side in (base, cand)]
        test = ratio_test(base_values, cand_values, ratio=pooled[1] / pooled[0], floor=max(base_floor, cand_floor),
                          confidence=confidence)
        ratio, low, high = test.ratio, test.low, test.high
    else:
        ratio = cand[STEP_TIME_S] / base[STEP_TIME_S]
        low = high = np.nan
    # samples each GPU processes per step, cand over base (exact: set by the configuration); a
    # larger batch's longer step may still be faster, so the change is per sample
    per_step = cand[SAMPLES_PER_STEP] / base[SAMPLES_PER_STEP]
    per_step = per_step if np.isfinite(per_step) else 1.0
    out.update(step_change=ratio / per_step - 1, step_change_low=low / per_step - 1,
               step_change_high=high / per_step - 1, throughput_change=per_step / ratio - 1,
               throughput_change_low=per_step / high - 1, throughput_change_high=per_step / low - 1)
    out["verdict"] = _verdict(out["throughput_change_low"], out["throughput_change_high"])
    return out


def _verdict(low: float, high: float) -> Verdict:
    """faster / slower when the throughput interval lies on one side of no change."""
    if not (np.isfinite(low) and np.isfinite(high)):
        return Verdict.NO_INTERVAL
    return Verdict.FASTER if low > 0 else Verdict.SLOWER if high < 0 else Verdict.NOT_SIGNIFICANT


def knob_changes(base: pd.Series, cand: pd.Series, columns: Sequence[str]) -> str:
    """``knob: old -> new`` for every column that differs. Between two workloads, the workload first,
    then only the columns both have: a knob or param of one workload alone is not a change of it."""
    changes = []
    if base.get("workload") != cand.get("workload"):
        changes.append(f"workload: {base.get('workload')} -> {cand.get('workload')}")
        columns = [c for c in columns if not is_missing(base[c]) and not is_missing(cand[c])]
    return ", ".join(changes + [f"{c.removeprefix('param.')}: {base[c]} -> {cand[c]}"
                                for c in columns if str(base[c]) != str(cand[c])])


def _identity_columns(summary: pd.DataFrame) -> list[str]:
    return knob_columns(summary) + param_columns(summary)


def _first_with_label(summary: pd.DataFrame, label: str) -> pd.Series | None:
    found = summary[summary["label"] == label] if "label" in summary else summary.iloc[:0]
    return found.iloc[0] if len(found) else None


def _figures(point: pd.Series, figures: Sequence[str], base: pd.Series | None = None) -> dict[str, Any]:
    notes = [point.get("notes", ""), _across_runs(base, point) if base is not None else ""]
    return {STEP_TIME_S: point[STEP_TIME_S], SAMPLES_PER_S_PER_GPU: point[SAMPLES_PER_S_PER_GPU],
            **{c: point[c] for c in figures}, "notes": "; ".join(n for n in notes if isinstance(n, str) and n)}


def _across_runs(base: pd.Series, point: pd.Series) -> str:
    """A change between points of two runs holds what else differed between them (the day, the
    card's clocks, the versions): said beside it, never silently credited to the knobs."""
    runs = (base.get("run_id"), point.get("run_id"))
    return f"measured in run {runs[1]}, its base in run {runs[0]}" if all(runs) and runs[0] != runs[1] else ""


def _table(rows: list[dict[str, Any]], columns: list[str]) -> pd.DataFrame:
    table = pd.DataFrame(rows, columns=columns)
    return say_absent(table, table["status"] == Status.OK)


def waterfall(summary: pd.DataFrame, labels: Sequence[str], confidence: float = 0.95) -> pd.DataFrame:
    """One row per label: its figures, its change from the previous ok label, and its throughput
    relative to the first ok label (``speedup``)."""
    figures = present(summary)
    columns = ["label", "status", "changes", STEP_TIME_S, SAMPLES_PER_S_PER_GPU, *figures, *_CHANGE_COLUMNS,
               "speedup", "speedup_low", "speedup_high", "fidelity", "notes"]
    identity = _identity_columns(summary)
    rows: list[dict[str, Any]] = []
    previous = first = None
    for label in labels:
        point = _first_with_label(summary, label)
        if point is None:
            rows.append({"label": label, "status": "missing"})
            continue
        row = {"label": label, "status": point["status"], **_figures(point, figures, previous),
               "fidelity": point.get("fidelity", ""),
               "changes": knob_changes(previous, point, identity) if previous is not None else ""}
        if point["status"] == Status.OK:
            if previous is not None:
                changes = point_changes(previous, point, confidence)
                overall = changes if previous is first else point_changes(first, point, confidence)
                row.update(changes)
                row.update(speedup=1 + overall["throughput_change"], speedup_low=1 + overall["throughput_change_low"],
                           speedup_high=1 + overall["throughput_change_high"])
            else:
                row["speedup"] = 1.0
            previous = point
            first = point if first is None else first
        rows.append(row)
    return _table(rows, columns)


def leave_one_out(summary: pd.DataFrame, best_label: str, knob: str = "mbs", confidence: float = 0.95) -> pd.DataFrame:
    """The best point minus each optimisation: change of each such point relative to the best
    (a positive step change means the removed optimisation was saving time)."""
    figures = present(summary)
    columns = ["without", "point", "status", "changes", STEP_TIME_S, SAMPLES_PER_S_PER_GPU, *figures,
               *_CHANGE_COLUMNS, "notes"]
    best = _first_with_label(summary, best_label)
    if best is None or best["status"] != Status.OK:
        return pd.DataFrame(columns=columns)
    identity = _identity_columns(summary)
    rows = []
    for _, point in summary[summary["suite"] == best["suite"]].iterrows():
        if point["point_id"] == best["point_id"]:
            continue
        differs = [c for c in identity if str(point[c]) != str(best[c])]
        label = point["label"] if isinstance(point["label"], str) else ""
        if label.startswith(BEST_PREFIX):
            without = label.removeprefix(BEST_PREFIX)
        elif len(differs) == 1 and differs[0] != knob:
            without = f"{differs[0].removeprefix('param.')}={best[differs[0]]}"
        else:
            continue
        row = {"without": without, "point": point["name"], "status": point["status"],
               "changes": knob_changes(best, point, identity), **_figures(point, figures, best)}
        if point["status"] == Status.OK:
            row.update(point_changes(best, point, confidence))
        rows.append(row)
    return _table(rows, columns)
