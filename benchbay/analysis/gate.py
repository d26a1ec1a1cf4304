"""Regression gate for CI: pass/fail a candidate run against a baseline, with a Markdown summary.

A threshold (see :mod:`benchbay.analysis.thresholds`) fails on a point when the candidate is worse
by at least its limit AND the change is statistically real (bootstrap interval of the ratio
excludes 1, Mann-Whitney p < alpha), or when the point ran in the baseline but failed in the
candidate (oom, crash, timeout...). Improvements and points that cannot be compared (different
GPU, driver, CUDA or torch; missing on one side) never fail the gate unless
``fail_on_incomparable`` is set; the summary lists them.

The convergence-equivalence gate checks that an optimised point trains like its reference (same
seed): :func:`loss_equivalence` compares the two loss curves step by step within
``atol + rtol * |reference|``; pass its results to :func:`gate` to fold them into the exit code.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchbay.analysis.compare import (
    DEFAULT_OPTIONS,
    METRICS,
    UNCHANGED,
    CompareOptions,
    Verdict,
    caution_line,
    compare_metric,
    describe_points,
    format_note,
    format_ratio,
    format_value,
    match_points,
    point_caution,
)
from benchbay.analysis.thresholds import Threshold, parse_threshold, value_matches
from benchbay.markdown import markdown_table, one_line
from benchbay.record import Status

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
    ``threshold``, ``point``, ``passed``); ``passed``: no check and no loss check failed."""

    checks: pd.DataFrame
    passed: bool
    loss_checks: list[LossEquivalence] = field(default_factory=list)
    markdown: str = ""

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1


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
) -> GateResult:
    """Check every threshold on every point it selects; exit code 1 on any regression.

    ``thresholds`` are strings in the threshold grammar or parsed :class:`Threshold` objects
    (default :data:`DEFAULT_THRESHOLDS`); a malformed string, or a selector that selects no point
    (a typo would pass every run), raises ValueError. Each threshold gives the statistic and the
    smallest change of its checks; ``options`` the rest. ``require_comparison``: fail when no check
    compared anything (a baseline of errors or without figures, no point shared, no finite step).
    """
    texts = DEFAULT_THRESHOLDS if thresholds is None else thresholds
    parsed = [t if isinstance(t, Threshold) else parse_threshold(t) for t in texts]
    points = match_points(baseline, candidate, key_columns, ignore_knobs)
    rows = []
    names = describe_points([p.key for p in points], [p.label for p in points])
    for point, name in zip(points, names, strict=True):
        where = _representative_row(point.candidate if len(point.candidate) else point.baseline)
        caution = point_caution(point)
        for threshold in parsed:
            if not threshold.applies_to(where):
                continue
            result = compare_metric(point, METRICS[threshold.metric],
                                    replace(options, statistic=threshold.statistic, min_change=threshold.limit))
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
    """A short Markdown summary for a CI job summary: verdict line, then only what needs a look."""
    checks = result.checks
    status = "FAIL" if result.exit_code else "pass"
    lines = [f"### benchbay gate: {'❌' if result.exit_code else '✅'} {status}", ""]
    if len(checks):
        counts = checks["verdict"].value_counts()
        summary = ", ".join(f"{n} {verdict}" for verdict, n in counts.items())
        lines.append(f"{len(checks)} checks on {checks['point'].nunique()} points: {summary}.")
    else:
        lines.append("No point was covered by a threshold.")
    lines.append("Thresholds: " + ", ".join(f"`{t}`" for t in thresholds) + ".")
    if len(checks):
        if caution := caution_line(checks):
            lines.append(caution.strip())
        lines += _section("Regressions", checks[checks["regression"]])
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
    losses = first.get("losses")
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
