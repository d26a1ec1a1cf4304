"""Regression gate for CI: pass/fail a candidate run against a baseline, with a Markdown summary.

Each check compares one point's processes (:func:`benchbay.analysis.compare.compare_metric`: one
value per repeat, the spread between processes pooled with this machine's earlier runs of the
point). A threshold of N% (see :mod:`benchbay.analysis.thresholds`) fails on a point when the
candidate is worse by at least half of N (:data:`~benchbay.analysis.thresholds.FAIL_SHARE`) AND
the change is real (the 95% interval of the ratio excludes 1), or when the point ran in the
baseline but failed in the candidate (oom, crash, timeout...), in every repeat or in a larger share
of them than in the baseline (the check names the repeats and how they failed). It passes when the interval rules
out a slowdown of N% (its worse end short of it). Between the two, the check ``cannot support a
verdict``: the run has too few repeats to tell an N% slowdown from the noise between processes,
and says how many a side it needs (:func:`benchbay.analysis.stats.repeats_needed`: alpha 5%,
power 95% at 80% of the threshold, from the spread measured). Such a check does not fail CI (exit code 0, as a pass):
a gate that failed on noise would be switched off, and the summary's header says it gated nothing
there. Improvements and points that cannot be compared (different GPU, driver, CUDA or torch;
missing on one side) never fail the gate unless ``fail_on_incomparable`` is set; the summary lists
them.

The convergence-equivalence gate checks that an optimised point trains like its reference (same
seed): :func:`loss_equivalence` compares the two loss curves step by step within
``atol + rtol * |reference|``; pass its results to :func:`gate` to fold them into the exit code.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchbay.analysis.compare import (
    DEFAULT_OPTIONS,
    CompareOptions,
    Comparison,
    code_spread,
    compare_metric,
    earlier_rows,
    point_caution,
)
from benchbay.analysis.compare_format import caution_line, format_note, format_ratio, format_value
from benchbay.analysis.metrics import METRICS, UNCHANGED, Verdict
from benchbay.analysis.points import describe_points, first_label, match_points, point_groups, point_key_columns
from benchbay.analysis.stats import repeats_needed
from benchbay.analysis.thresholds import FAIL_SHARE, Threshold, parse_threshold, value_matches
from benchbay.markdown import markdown_table, one_line
from benchbay.record import LOSSES, Status

DEFAULT_THRESHOLDS = ("step_time:median:5%",)
#: loss curves that should train alike: bf16 eager against compiled (kernels reorder sums)
LOSS_RTOL, LOSS_ATOL = 0.02, 1e-3
_MAX_TABLE_ROWS = 20  # a CI summary should stay short


@dataclass
class LossEquivalence:
    """Whether a candidate's loss curve stays within tolerance of the reference's."""

    reference: str
    candidate: str
    rtol: float
    atol: float
    reference_losses: np.ndarray
    candidate_losses: np.ndarray
    passed: bool
    max_abs_diff: float
    max_rel_diff: float
    first_bad_step: int | None
    message: str


@dataclass
class GateResult:
    """``checks``: one row per threshold and covered point (the fields of :class:`Comparison` plus
    ``threshold``, ``point``, ``passed``); ``passed``: no check and no loss check failed (a check that
    cannot support a verdict passes: ``unsupported`` counts them)."""

    checks: pd.DataFrame
    passed: bool
    loss_checks: list[LossEquivalence] = field(default_factory=list)
    markdown: str = ""

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1

    @property
    def unsupported(self) -> int:
        return int((self.checks["verdict"] == Verdict.UNSUPPORTED).sum()) if len(self.checks) else 0


def _representative_row(rows: pd.DataFrame) -> Mapping[str, Any]:
    return rows.iloc[0].to_dict() if len(rows) else {}


def gate(
    baseline: pd.DataFrame,
    candidate: pd.DataFrame,
    thresholds: Sequence[str | Threshold] | None = None,
    *,
    loss_checks: Sequence[LossEquivalence] = (),
    options: CompareOptions = DEFAULT_OPTIONS,
    fail_on_incomparable: bool = False,
    require_comparison: bool = False,
    key_columns: Sequence[str] | None = None,
    ignore_knobs: Sequence[str] = (),
    history: pd.DataFrame | None = None,
) -> GateResult:
    """Check every threshold on every point it selects; exit code 1 on any regression.

    ``thresholds`` are strings in the threshold grammar or parsed :class:`Threshold` objects
    (default :data:`DEFAULT_THRESHOLDS`); a malformed string, or a selector that selects no point
    (a typo would pass every run), raises ValueError. Each threshold gives the statistic and the
    slowdown of its checks (the module docstring); ``options`` the rest. ``history``: this
    machine's earlier runs of the suite, whose spread between processes stands in where the run
    has too few. ``require_comparison``: fail when no check compared anything (a baseline of
    errors or without figures, no point shared, no finite step).
    """
    texts = DEFAULT_THRESHOLDS if thresholds is None else thresholds
    parsed = [t if isinstance(t, Threshold) else parse_threshold(t) for t in texts]
    points = match_points(baseline, candidate, key_columns, ignore_knobs)
    rows = []
    names = describe_points([p.key for p in points], [p.label for p in points])
    for point, name, earlier in zip(points, names, earlier_rows(history, points), strict=True):
        where = _representative_row(point.candidate if len(point.candidate) else point.baseline)
        caution = point_caution(point)
        for threshold in parsed:
            if not threshold.applies_to(where):
                continue
            result = _check(point, threshold, options, earlier)
            incomparable = result.verdict == Verdict.NOT_COMPARABLE
            passed = not result.regression and not (fail_on_incomparable and incomparable)
            rows.append({"point": name, "label": point.label, "threshold": str(threshold), **point.key,
                         **asdict(result), "caution": caution, "passed": passed})
    _check_selectors(parsed, rows)
    checks = pd.DataFrame(rows)
    compared = not checks.empty and (checks["verdict"] != Verdict.NOT_COMPARABLE).any()
    failed = (
        (not checks.empty and not checks["passed"].all())
        or any(not c.passed for c in loss_checks)
        or (fail_on_incomparable and checks.empty)
        or (require_comparison and not compared)
    )
    result = GateResult(checks=checks, passed=not failed, loss_checks=list(loss_checks))
    result.markdown = format_gate(result, parsed)
    return result


def _check(point, threshold: Threshold, options: CompareOptions, earlier: pd.DataFrame | None) -> Comparison:
    """One threshold on one point: compare's verdict at half the threshold (at the whole of it for a
    figure that repeats exactly: there is no noise to size for), then ``cannot support a verdict``
    where that is no regression yet the interval does not rule out the threshold's slowdown."""
    metric = METRICS[threshold.metric]
    share = 1.0 if metric.exact else FAIL_SHARE
    result = compare_metric(point, metric, replace(options, statistic=threshold.statistic,
                                                   min_change=threshold.limit * share), earlier)
    if result.verdict == Verdict.NOT_COMPARABLE:
        return result
    if math.isnan(result.between_cv) or result.between_cv == 0:  # no spread known; none at all: one tells
        needed = math.nan if math.isnan(result.between_cv) else 1
    else:
        needed = repeats_needed(result.between_cv, threshold.limit, earlier_df=result.earlier_df,
                                alpha=1 - options.confidence, power=options.power)
    result = replace(result, repeats_needed=needed)  # a point whose repeats failed in part still sizes the run
    if result.verdict == Verdict.FAILED:
        return result
    worst = (1.0 - result.ci_low) if metric.higher_is_better else (result.ci_high - 1.0)  # NaN: no interval
    if result.regression or worst < threshold.limit:
        return result
    cv = "" if math.isnan(needed) else f", between-process CV {result.between_cv:.1%}"
    need = "2 or more repeats a side to measure the spread between processes" if math.isnan(needed) else \
        f"{needed:.0f} repeats a side on this machine"
    return replace(result, verdict=Verdict.UNSUPPORTED, regression=False,
                   reason=f"cannot rule out a {threshold.limit:.0%} regression with {result.baseline_processes} vs "
                          f"{result.candidate_processes} processes"
                          f"{cv}: needs {need}")


def _check_selectors(thresholds: Sequence[Threshold], rows: list[dict[str, Any]]) -> None:
    """ValueError for a threshold whose selector chose no point: a mistyped key or label gates nothing."""
    used = {row["threshold"] for row in rows}
    unused = [str(t) for t in thresholds if t.selector and str(t) not in used]
    if unused:
        raise ValueError(f"threshold {', '.join(map(repr, unused))}: its selector matches no point of the baseline or "
                         "the candidate (a mistyped key or value?)")


def _check_rows(checks: pd.DataFrame) -> list[tuple]:
    return [
        (r["point"], f"`{r['threshold']}`", format_value(r["baseline"]), format_value(r["candidate"]),
         format_ratio(r), format_value(r["p_value"]),
         r["verdict"] + (f" ({format_note(r['reason'])})" if format_note(r["reason"]) else "")
         + (" ⚠" if r["caution"] else ""))
        for _, r in checks.head(_MAX_TABLE_ROWS).iterrows()
    ]


def _section(title: str, checks: pd.DataFrame) -> list[str]:
    if checks.empty:
        return []
    headers = ("point", "threshold", "baseline", "candidate", "ratio [95% CI]", "p", "verdict")
    lines = ["", f"#### {title}", "", markdown_table(headers, _check_rows(checks))]
    if len(checks) > _MAX_TABLE_ROWS:
        lines.append(f"\n... and {len(checks) - _MAX_TABLE_ROWS} more")
    return lines


def format_gate(result: GateResult, thresholds: Sequence[Threshold]) -> str:
    """A short Markdown summary for a CI job summary: verdict line, the repeats each threshold needs on
    this machine, then only what needs a look."""
    checks = result.checks
    if result.exit_code:
        head = "❌ FAIL"
    elif result.unsupported:
        head = f"⚠️ cannot support a verdict on {result.unsupported} of {len(checks)} checks (too few repeats)"
    else:
        head = "✅ pass"
    lines = [f"### benchbay gate: {head}", ""]
    if len(checks):
        counts = checks["verdict"].value_counts()
        summary = ", ".join(f"{n} {verdict}" for verdict, n in counts.items())
        lines.append(f"{len(checks)} checks on {checks['point'].nunique()} points: {summary}.")
    else:
        lines.append("No point was covered by a threshold.")
    lines.append("Thresholds: " + ", ".join(f"`{t}`" for t in thresholds) + ".")
    if len(checks):
        lines += [f"- {line}" for line in repeats_lines(checks)]
        if caution := caution_line(checks):
            lines.append(caution.strip())
        lines += _section("Regressions", checks[checks["regression"]])
        lines += _section("Cannot support a verdict", checks[checks["verdict"] == Verdict.UNSUPPORTED])
        improved = checks[~checks["regression"] & ~checks["verdict"].isin([*UNCHANGED, Verdict.NOT_COMPARABLE])]
        lines += _section("Improvements", improved)
        incomparable = checks[checks["verdict"] == Verdict.NOT_COMPARABLE]
        if len(incomparable):
            lines += ["", "#### Not comparable", ""]
            reasons = incomparable.groupby("reason", sort=False)["point"].unique()
            for reason, names in reasons.items():
                shown = ", ".join(map(str, names[:8])) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
                lines.append(one_line(f"- {shown}: {reason}"))
        doubtful = checks[checks["caution"].astype(bool)].drop_duplicates("point")
        if len(doubtful):
            lines += ["", "#### Caution", ""]
            lines += [one_line(f"- {r['point']}: {r['caution']}") for _, r in doubtful.head(_MAX_TABLE_ROWS).iterrows()]
    if result.loss_checks:
        headers = ("reference", "candidate", "steps", "max abs diff", "max rel diff", "tolerance", "result")
        rows = [(c.reference, c.candidate, len(c.candidate_losses), format_value(c.max_abs_diff),
                 format_value(c.max_rel_diff), f"rtol {c.rtol:g}, atol {c.atol:g}",
                 "pass" if c.passed else f"FAIL: {c.message}") for c in result.loss_checks]
        lines += ["", "#### Loss equivalence", "", markdown_table(headers, rows)]
    return "\n".join(lines) + "\n"


def repeats_lines(checks: pd.DataFrame) -> list[str]:
    """Per threshold: the repeats a side it needs on this machine at its noisiest point (alpha 5%, power
    95% for its slowdown, from the spread between processes measured), against the run's."""
    out = []
    for threshold, rows in checks.groupby("threshold", sort=False):
        sized = rows[rows["repeats_needed"].notna()] if "repeats_needed" in rows else rows.iloc[:0]
        has = rows.loc[rows["candidate_processes"] > 0, "candidate_processes"]
        run = f"; this run has {has.min()}" if len(has) else ""
        if sized.empty:
            if (rows["verdict"] == Verdict.UNSUPPORTED).any():
                out.append(f"`{threshold}`: the spread between processes is unknown here (one process a side and no "
                           f"earlier run of these points on this machine): run 2 or more repeats{run}")
            continue
        worst = sized.loc[sized["repeats_needed"].idxmax()]
        out.append(f"`{threshold}` needs {worst['repeats_needed']:.0f} repeats a side on this machine to catch its "
                   f"slowdown 95% of the time (noisiest point {worst['point']}: between-process CV "
                   f"{worst['between_cv']:.1%}){run}")
    return out


def repeats_on_record(history: pd.DataFrame | None, thresholds: Sequence[str | Threshold], repeats: int) -> list[str]:
    """What a suite's gate needs, per machine that ran it (``history``: the suite's stored runs): for
    each threshold, the repeats a side that catch its slowdown 95% of the time (alpha 5%) at the
    noisiest point, from the spread between its processes on that machine; against ``repeats``."""
    parsed = [t if isinstance(t, Threshold) else parse_threshold(t) for t in thresholds or DEFAULT_THRESHOLDS]
    ok = history[history["status"] == Status.OK] if history is not None and len(history) else None
    if ok is None or ok.empty or "env.machine_key" not in ok:
        return [f"gate: the repeats a side it needs are unknown until the suite has run on a machine with 2 or more "
                f"repeats (or twice at one clean commit); `benchbay gate` says them then (this suite runs {repeats})"]
    lines = []
    for machine, rows in ok.groupby("env.machine_key", sort=False):
        columns = point_key_columns(rows)
        groups = point_groups(rows, columns)
        points = [rows.iloc[positions] for positions in groups.values()]
        keys = [dict(zip(columns, key, strict=True)) for key in groups]
        names = describe_points(keys, [first_label(point) for point in points])
        for threshold in parsed:
            sized = []
            for name, point in zip(names, points, strict=True):
                if not threshold.applies_to(point.iloc[0]):
                    continue
                squares, df = code_spread(point, METRICS[threshold.metric], threshold.statistic)
                if df:
                    sd = math.sqrt(squares / df)
                    sized.append((repeats_needed(sd, threshold.limit, earlier_df=df), name, sd))
            if not sized:
                lines.append(f"gate on {machine}: `{threshold}`: no point ran there with 2 or more repeats (or twice "
                             f"at one clean commit): the spread between processes is unknown")
                continue
            needed, name, sd = max(sized, key=lambda x: x[0])
            lines.append(f"gate on {machine}: `{threshold}` needs {needed} repeats a side to catch its slowdown 95% of "
                         f"the time (alpha 5%; noisiest point {name}: between-process CV {sd:.1%}); this suite runs "
                         f"{repeats}")
    return lines


def format_no_baseline(machine_key: str, name: str | None, where: str | Path, required: bool) -> str:
    """The verdict when there is nothing to gate against: a warning, or a failure when required."""
    head = "❌ FAIL: no baseline" if required else "⚠️ no baseline: nothing was gated"
    return (f"### benchbay gate: {head}\n\nNo baseline for {machine_key} (name {name!r}) under {where}; save one "
            "with `benchbay baseline save RUN --name NAME`" + (" (--require-baseline)" if required else "") + ".\n")


def _loss_curve(df: pd.DataFrame, label: str, where: Mapping[str, Any] | None) -> np.ndarray:
    rows = df[(df["label"] == label) & (df["status"] == Status.OK)]
    for key, wanted in (where or {}).items():
        rows = rows[rows[key].map(lambda v: value_matches(v, str(wanted)))]
    if rows.empty:
        raise ValueError(f"no ok point labelled {label!r}" + (f" with {dict(where)}" if where else ""))
    if rows["point_id"].nunique() > 1:
        raise ValueError(f"label {label!r} names {rows['point_id'].nunique()} points; "
                         "pick one with where={knob: value}")
    first = rows.sort_values("repeat").iloc[0]
    losses = first.get(LOSSES)
    if not isinstance(losses, (list, tuple, np.ndarray)) or len(losses) == 0:
        raise ValueError(f"point labelled {label!r} recorded no losses")
    return np.asarray(losses, dtype=float)


def loss_equivalence(
    df: pd.DataFrame,
    reference_label: str,
    candidate_label: str,
    *,
    rtol: float = LOSS_RTOL,
    atol: float = LOSS_ATOL,
    where: Mapping[str, Any] | None = None,
) -> LossEquivalence:
    """Does the candidate's loss follow the reference's at every step?

    Both points must have run with the same seed and data (the harness seeds every point alike).
    A step passes when ``|candidate - reference| <= atol + rtol * |reference|``; a NaN or a curve
    of different length fails. Defaults suit bf16 eager vs compiled (kernels reorder sums); use
    ``rtol=1e-3`` for runs that should repeat bit-for-bit. ``where`` narrows each label to one
    point when a label spans several (e.g. ``{"mbs": 4}``); the first repeat is used.
    """
    return compare_losses(_loss_curve(df, reference_label, where), _loss_curve(df, candidate_label, where),
                          reference_label, candidate_label, rtol=rtol, atol=atol)


def compare_losses(ref: np.ndarray, cand: np.ndarray, reference_label: str, candidate_label: str, *,
                   rtol: float = LOSS_RTOL, atol: float = LOSS_ATOL) -> LossEquivalence:
    """Two loss curves step by step (see :func:`loss_equivalence`)."""
    n = min(ref.size, cand.size)
    diff = np.abs(cand[:n] - ref[:n])
    within = diff <= atol + rtol * np.abs(ref[:n])  # False for NaN
    bad = np.flatnonzero(~within)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = diff / np.abs(ref[:n])
    if ref.size != cand.size:
        message = f"{cand.size} candidate steps vs {ref.size} reference steps"
    elif bad.size:
        message = f"step {bad[0]}: {cand[bad[0]]:.6g} vs {ref[bad[0]]:.6g}"
    else:
        message = f"{n} steps within tolerance"
    return LossEquivalence(
        reference=reference_label, candidate=candidate_label, rtol=rtol, atol=atol,
        reference_losses=ref, candidate_losses=cand, passed=ref.size == cand.size and not bad.size,
        max_abs_diff=float(np.nanmax(diff)) if n else float("nan"),
        max_rel_diff=float(np.nanmax(rel)) if n else float("nan"),
        first_bad_step=int(bad[0]) if bad.size else None, message=message,
    )
