"""Compare a candidate result set against a baseline, point by point and metric by metric.

Points are matched by suite, workload, params and knob values (the columns both frames share),
never by run or label. For each matched point and metric the comparison gives the ratio
candidate/baseline of a statistic over the pooled steady-state samples (by default the mean,
``stats.STEP_STATISTIC``, the one the tables and plots show), a two-stage bootstrap
confidence interval (repeats, then steps), a Mann-Whitney p-value, and a verdict:

- ``faster`` / ``slower`` (``less memory`` / ``more memory`` for memory, ``less energy`` / ``more
  energy`` for joules per sample, ``less power`` / ``more power`` for watts): the change is at least
  ``min_change`` AND statistically real (the interval excludes 1, and p < alpha where the sample
  sizes let the rank test reach alpha at all);
- ``no change``: the change is real but under ``min_change``, or its whole interval lies within
  ``min_change`` of no change;
- ``not significant``: the interval reaches past ``min_change`` yet includes no change (or the
  rank test does not confirm it): the data cannot tell an effect from noise;
- ``failed``: the point ran in the baseline but not in the candidate (oom, crash, timeout...);
- ``not comparable``: the environments differ in GPU model, driver, CUDA or torch version (the
  reason names which), the point is missing on one side, or a figure is missing.

Per-step samples come from the steady window of ``step_times_s`` (after ``warmup_steps``). Rates
(samples/s, samples/s/GPU, MFU) are proportional to 1/step time within a record, so their per-step
samples are the recorded figure scaled by ``T / t``, T the step it was computed over: the mean
step of a training step (older records: the median), given exactly by samples per step over
samples/s/GPU; the median wait of a loader, whose figure is what it delivered. Peak memory has one value per
repeat; with a single repeat its interval collapses to the point (memory peaks are close to
deterministic) and the verdict rests on ``min_change`` alone.

Energy per sample and watts have one value per repeat, as memory. Given a GPU-hour price, each
point also gets a ``cost_per_m_samples`` row (``cheaper`` / ``costlier``): its throughput row
through :func:`benchbay.analysis.cost.cost_per_million_samples`, the interval inverted.

``caution`` names a side whose steady steps were noisy or whose machine was busy (see
:mod:`benchbay.analysis.quality`); it never changes the verdict, it says why to doubt it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from enum import StrEnum
from typing import Any

import numpy as np
import pandas as pd

from benchbay.analysis.cost import COST, cost_per_million_samples
from benchbay.analysis.frame import is_missing, knob_columns, param_columns
from benchbay.analysis.quality import cards_note, notes, warnings_of
from benchbay.analysis.stats import (
    STEP_STATISTIC,
    bootstrap_ratio,
    coefficient_of_variation,
    mann_whitney_floor,
    mann_whitney_p,
)
from benchbay.markdown import markdown_table
from benchbay.record import DELIVERED_RATE, FIGURES, Record, Status


class Verdict(StrEnum):
    """What a comparison says of a change (the module docstring says when each is given)."""

    FASTER = "faster"
    SLOWER = "slower"
    LESS_MEMORY = "less memory"
    MORE_MEMORY = "more memory"
    LESS_ENERGY = "less energy"
    MORE_ENERGY = "more energy"
    LESS_POWER = "less power"
    MORE_POWER = "more power"
    CHEAPER = "cheaper"
    COSTLIER = "costlier"
    NO_CHANGE = "no change"
    NOT_SIGNIFICANT = "not significant"
    FAILED = "failed"
    NOT_COMPARABLE = "not comparable"
    NO_INTERVAL = "no interval"  # the optimisation breakdown, where a side has no per-step samples


@dataclass(frozen=True)
class Metric:
    """A figure the comparison and the threshold grammar know by ``name``."""

    name: str
    column: str  # the flattened record column
    higher_is_better: bool
    per_step: bool  # samples derive from the steady per-step times
    better: Verdict
    worse: Verdict


_TIME, _MEMORY = (Verdict.FASTER, Verdict.SLOWER), (Verdict.LESS_MEMORY, Verdict.MORE_MEMORY)
METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("step_time", "step_time_s", False, True, *_TIME),
        Metric("samples_per_s", "samples_per_s", True, True, *_TIME),
        Metric("samples_per_s_per_gpu", "samples_per_s_per_gpu", True, True, *_TIME),
        Metric("mfu", "mfu", True, True, *_TIME),
        Metric("peak_mem", "peak_mem_allocated_gib", False, False, *_MEMORY),
        Metric("peak_mem_reserved", "peak_mem_reserved_gib", False, False, *_MEMORY),
        Metric("energy_per_sample", "energy_j_per_sample", False, False, Verdict.LESS_ENERGY, Verdict.MORE_ENERGY),
        Metric("power", "energy_watts", False, False, Verdict.LESS_POWER, Verdict.MORE_POWER),
    )
}
DEFAULT_METRICS = ("step_time", "samples_per_s_per_gpu", "peak_mem", "mfu", "energy_per_sample", "power")
#: verdicts that say nothing changed (or nothing can be said)
UNCHANGED = (Verdict.NO_CHANGE, Verdict.NOT_SIGNIFICANT)


@dataclass(frozen=True)
class Comparison:
    """One metric of one matched point: candidate against baseline, and the verdict."""

    metric: str
    statistic: str
    baseline: float = math.nan  # the statistic over all baseline samples pooled
    candidate: float = math.nan
    ratio: float = math.nan  # candidate / baseline
    ci_low: float = math.nan
    ci_high: float = math.nan
    p_value: float = math.nan
    worse_by: float = math.nan  # the relative change in the bad direction (positive = regression)
    verdict: Verdict = Verdict.NOT_COMPARABLE
    regression: bool = False
    reason: str | None = None


@dataclass(frozen=True)
class CompareOptions:
    """How a comparison decides (the module docstring): the statistic over the pooled samples, the
    smallest change that counts, the interval's confidence, the rank test's alpha, the bootstrap's
    resamples and seed."""

    statistic: str = STEP_STATISTIC
    min_change: float = 0.02
    confidence: float = 0.95
    alpha: float = 0.05
    n_boot: int = 2000
    seed: int = 0


DEFAULT_OPTIONS = CompareOptions()


#: environment fields that make two measurements incomparable when they differ
ENV_KEYS = ("gpu", "driver", "cuda", "torch")

#: columns that are not knobs, to find knob columns in a frame without ``knob_names``: the record's
#: fields, and the metrics and series that a flat frame spreads beside the knobs
_RECORD_FIELDS = frozenset({f.name for f in fields(Record)} | FIGURES)
_NON_KNOB_PREFIXES = ("env.", "extra.", "health.", "param.", "metrics.", "series.", "rank")


def _canonical(value: Any) -> str:
    """One spelling per value, so that 32, 32.0 and "32" from different loaders match."""
    if is_missing(value):
        return "null"
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return str(int(value))
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, sort_keys=True, default=str)
    return str(value)


def point_key_columns(df: pd.DataFrame) -> list[str]:
    """Columns that identify a point: suite, workload, ``param.*`` and the knobs.

    The knobs are those the rows name in ``knob_names`` (``records_to_frame`` keeps them); for a
    frame built another way, every column that is not a record field nor prefixed ``env.``,
    ``extra.``, ``param.``.
    """
    if "knob_names" in df:
        knobs = knob_columns(df)
    else:
        knobs = [c for c in df.columns if c not in _RECORD_FIELDS and not c.startswith(_NON_KNOB_PREFIXES)]
    fixed = [c for c in ("suite", "workload", "world_size") if c in df.columns]
    return fixed + sorted(param_columns(df)) + sorted(knobs)


def first_label(rows: pd.DataFrame) -> str | None:
    labels = rows["label"].dropna() if "label" in rows else ()
    return str(labels.iloc[0]) if len(labels) else None


@dataclass
class MatchedPoint:
    """The rows of one point on each side (all repeats, any status); either side may be empty."""

    key: dict[str, str]
    baseline: pd.DataFrame
    candidate: pd.DataFrame

    @property
    def label(self) -> str | None:
        return first_label(self.candidate) or first_label(self.baseline)

    @property
    def rows(self) -> pd.DataFrame:
        return pd.concat([self.baseline, self.candidate])


def point_groups(df: pd.DataFrame, key_columns: Sequence[str]) -> dict[tuple[str, ...], list[int]]:
    """Row positions of each point (all its repeats and runs), keyed by canonical key values."""
    groups: dict[tuple[str, ...], list[int]] = {}
    for pos, values in enumerate(df[list(key_columns)].itertuples(index=False, name=None)):
        groups.setdefault(tuple(_canonical(v) for v in values), []).append(pos)
    return groups


def match_points(
    baseline: pd.DataFrame, candidate: pd.DataFrame, key_columns: Sequence[str] | None = None,
    ignore_knobs: Sequence[str] = (),
) -> list[MatchedPoint]:
    """Pair the points of two frames on their shared key columns (baseline order, then new points);
    ``ignore_knobs`` do not take part, so a deliberate change of them (compile on -> off) is compared."""
    if key_columns is None:
        shared = set(point_key_columns(baseline)) & set(point_key_columns(candidate))
        key_columns = [c for c in point_key_columns(baseline) if c in shared and c not in ignore_knobs]
    keys = list(key_columns)
    if not keys:
        raise ValueError("the frames share no point columns (suite, workload, param.*, knobs) to match on")
    base_groups, cand_groups = point_groups(baseline, keys), point_groups(candidate, keys)
    order = list(base_groups) + [k for k in cand_groups if k not in base_groups]
    return [
        MatchedPoint(
            key=dict(zip(keys, key, strict=True)),
            baseline=baseline.iloc[base_groups.get(key, [])],
            candidate=candidate.iloc[cand_groups.get(key, [])],
        )
        for key in order
    ]


def env_differences(baseline: pd.DataFrame, candidate: pd.DataFrame, keys: Iterable[str] = ENV_KEYS) -> list[str]:
    """Human-readable differences in the environment fields, e.g. ``torch 2.11.0 vs 2.12.0``."""

    def values(rows: pd.DataFrame, column: str) -> str:
        found = sorted({_canonical(v) for v in rows[column]} - {"null"}) if column in rows else []
        return "/".join(found) or "unknown"

    out = []
    for key in keys:
        base, cand = values(baseline, f"env.{key}"), values(candidate, f"env.{key}")
        if base != cand:
            out.append(f"{key} {base} vs {cand}")
    return out


def steady_step_times(row: pd.Series | dict) -> np.ndarray:
    """The measured steps of one record: ``step_times_s`` after ``warmup_steps``, at most ``measured_steps``."""
    times = row.get("step_times_s")
    if not isinstance(times, (list, tuple, np.ndarray)) or len(times) == 0:
        return np.empty(0)
    warmup = row.get("warmup_steps")
    measured = row.get("measured_steps")
    start = 0 if is_missing(warmup) else int(warmup)
    stop = None if is_missing(measured) else start + int(measured)
    values = np.asarray(times[start:stop], dtype=float)
    return values[np.isfinite(values)]


def metric_samples(row: pd.Series | dict, metric: Metric) -> np.ndarray:
    """Samples of ``metric`` in one record: per steady step where the metric follows the step time,
    else the single recorded figure (empty when the record lacks it)."""
    value = row.get(metric.column)
    if metric.per_step:
        steps = steady_step_times(row)
        if steps.size and metric.column == "step_time_s":
            return steps
        step_time = _rated_step(row)
        if steps.size and not is_missing(value) and not is_missing(step_time) and (steps > 0).all():
            return float(value) * float(step_time) / steps
    return np.empty(0) if is_missing(value) else np.array([float(value)])


def _rated_step(row: pd.Series | dict) -> float | None:
    """The step time a record's rates were computed over (see the module docstring)."""
    samples, per_gpu = row.get("samples_per_step"), row.get("samples_per_s_per_gpu")
    if is_missing(row.get(f"extra.{DELIVERED_RATE}")) and not is_missing(samples) and not is_missing(per_gpu) \
            and per_gpu > 0:
        return float(samples) / float(per_gpu)
    return row.get("step_time_s")


def _ok(rows: pd.DataFrame) -> pd.DataFrame:
    return rows[rows["status"] == Status.OK] if "status" in rows else rows


def _recorded(point: MatchedPoint, metric: Metric) -> bool:
    rows = _ok(point.rows)
    return metric.column in rows and rows[metric.column].notna().any()


def _statuses(rows: pd.DataFrame) -> str:
    return "/".join(sorted(rows["status"].astype(str).unique())) if "status" in rows and len(rows) else "absent"


def compare_metric(point: MatchedPoint, metric: Metric, options: CompareOptions = DEFAULT_OPTIONS) -> Comparison:
    """Compare one metric of one matched point; see the module docstring for the verdicts."""
    statistic, min_change, alpha = options.statistic, options.min_change, options.alpha

    def incomparable(reason: str) -> Comparison:
        return Comparison(metric.name, statistic, reason=reason)

    if point.baseline.empty or point.candidate.empty:
        return incomparable("only in " + ("candidate" if point.baseline.empty else "baseline"))
    differences = env_differences(point.baseline, point.candidate)
    if differences:
        return incomparable("environment differs: " + "; ".join(differences))
    base_ok, cand_ok = _ok(point.baseline), _ok(point.candidate)
    if base_ok.empty:
        return incomparable(f"baseline status {_statuses(point.baseline)}")
    if cand_ok.empty:
        return Comparison(metric.name, statistic, verdict=Verdict.FAILED, regression=True,
                          reason=f"candidate status {_statuses(point.candidate)}")
    base = [s for s in (metric_samples(r, metric) for _, r in base_ok.iterrows()) if s.size]
    cand = [s for s in (metric_samples(r, metric) for _, r in cand_ok.iterrows()) if s.size]
    if not base or not cand:
        return incomparable(f"no {metric.column} in " + ("baseline" if not base else "candidate"))
    try:
        estimate = bootstrap_ratio(base, cand, statistic=statistic, confidence=options.confidence,
                                   n_boot=options.n_boot, seed=options.seed)
    except ZeroDivisionError as err:
        return incomparable(str(err))
    pooled_base, pooled_cand = np.concatenate(base), np.concatenate(cand)
    p_value = mann_whitney_p(pooled_base, pooled_cand)
    worse_by = (1.0 - estimate.ratio) if metric.higher_is_better else (estimate.ratio - 1.0)
    # the rank test vetoes only where it could reject: 3 repeats of a memory peak per side cannot
    test_can_reject = mann_whitney_floor(pooled_base.size, pooled_cand.size) < alpha
    real = estimate.excludes_one and (not test_can_reject or p_value < alpha)
    within = 1.0 - min_change <= estimate.low and estimate.high <= 1.0 + min_change
    verdict = Verdict.NO_CHANGE if real or within else Verdict.NOT_SIGNIFICANT
    if real and abs(estimate.ratio - 1.0) >= min_change:
        verdict = metric.worse if worse_by > 0 else metric.better
    return Comparison(metric.name, statistic, estimate.baseline, estimate.candidate, estimate.ratio, estimate.low,
                      estimate.high, p_value, worse_by, verdict, regression=verdict == metric.worse,
                      reason=_why(verdict, estimate, p_value, alpha, test_can_reject, min_change))


def _why(verdict: str, estimate, p_value: float, alpha: float, test_can_reject: bool, min_change: float) -> str | None:
    """The one reason a no-change or not-significant verdict stands on, shown beside it: a small p
    beside "not significant" reads as a contradiction unless the interval is named as the reason."""
    if verdict == Verdict.NOT_SIGNIFICANT:
        if not estimate.excludes_one:
            return (f"the {estimate.confidence:.0%} interval [{estimate.low:.3g}, {estimate.high:.3g}] holds no "
                    "change (repeats resampled)")
        if test_can_reject and p_value >= alpha:
            return f"the rank test's p {p_value:.2g} is not below {alpha:g}"
    if verdict == Verdict.NO_CHANGE and not estimate.excludes_one:
        return f"the interval lies within ±{min_change:.0%}"
    if verdict == Verdict.NO_CHANGE:
        return f"a real change smaller than {min_change:.0%}"
    return None


def _inverse(value: float) -> float:
    return 1.0 / value if value else math.nan


def cost_comparison(throughput: Comparison, price_per_gpu_hour: float) -> Comparison:
    """The cost per 1M samples of a samples/s/GPU comparison: each side's figure at the price, the
    ratio and its interval inverted (a cost is a price over a throughput)."""
    verdict = {Verdict.FASTER: Verdict.CHEAPER, Verdict.SLOWER: Verdict.COSTLIER}.get(throughput.verdict,
                                                                                     throughput.verdict)
    return replace(throughput, metric=COST, baseline=cost_per_million_samples(throughput.baseline, price_per_gpu_hour),
                   candidate=cost_per_million_samples(throughput.candidate, price_per_gpu_hour),
                   ratio=_inverse(throughput.ratio), ci_low=_inverse(throughput.ci_high),
                   ci_high=_inverse(throughput.ci_low), worse_by=_inverse(throughput.ratio) - 1, verdict=verdict)


def point_caution(point: MatchedPoint) -> str:
    """Why to doubt a comparison of this point: ``candidate noisy: CV 0.41; baseline busy CPU: ...``,
    or "" when both sides ran quietly."""
    parts = []
    for side, rows in (("baseline", point.baseline), ("candidate", point.candidate)):
        ok = _ok(rows)
        steps = [steady_step_times(r) for _, r in ok.iterrows()]
        pooled = np.concatenate(steps) if steps else np.empty(0)
        text = notes(coefficient_of_variation(pooled) if pooled.size > 1 else None, [*warnings_of(ok), cards_note(ok)])
        if text:
            parts.append(f"{side} {text}")
    return "; ".join(parts)


def describe_points(keys: Sequence[Mapping[str, str]], labels: Sequence[str | None]) -> list[str]:
    """A short name per point: its label, else the key values that vary across the points."""
    varying = [k for k in (keys[0] if keys else {}) if k != "suite" and len({key[k] for key in keys}) > 1]
    names = []
    for key, label in zip(keys, labels, strict=True):
        described = ", ".join(f"{k.removeprefix('param.')}={key[k]}" for k in varying)
        names.append(label or described or key.get("suite", "point"))
    return names


def compare(
    baseline: pd.DataFrame,
    candidate: pd.DataFrame,
    *,
    metrics: Sequence[str] = DEFAULT_METRICS,
    options: CompareOptions = DEFAULT_OPTIONS,
    key_columns: Sequence[str] | None = None,
    ignore_knobs: Sequence[str] = (),
    price_per_gpu_hour: float | None = None,
) -> pd.DataFrame:
    """One row per matched point and metric: suite, point, the key columns, metric, statistic,
    baseline, candidate, ratio, ci_low, ci_high, p_value, worse_by, verdict, regression, reason,
    caution.

    Metrics that neither side records for a point (e.g. MFU on CPU) are left out. With
    ``price_per_gpu_hour``, each point ends with its cost per 1M samples (:func:`cost_comparison`).
    """
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise ValueError(f"unknown metrics {unknown}; known: {list(METRICS)}")
    points = match_points(baseline, candidate, key_columns, ignore_knobs)
    rows = []
    names = describe_points([p.key for p in points], [p.label for p in points])
    for point, name in zip(points, names, strict=True):
        caution = point_caution(point)
        results = {}
        for metric_name in metrics:
            metric = METRICS[metric_name]
            if metric_name != metrics[0] and not _recorded(point, metric):
                continue  # a figure neither side has (e.g. MFU on CPU); the first metric always shows
            results[metric_name] = compare_metric(point, metric, options)
        if price_per_gpu_hour is not None:
            throughput = results.get("samples_per_s_per_gpu") or compare_metric(
                point, METRICS["samples_per_s_per_gpu"], options)
            results[COST] = cost_comparison(throughput, price_per_gpu_hour)
        rows += [{"point": name, "label": point.label, **point.key, **asdict(result), "caution": caution}
                 for result in results.values()]
    return pd.DataFrame(rows)


def format_note(*texts: Any) -> str:
    """The non-empty texts (a reason, a caution) joined."""
    return "; ".join(str(t) for t in texts if not is_missing(t) and str(t))


def format_value(value: Any) -> str:
    return "-" if is_missing(value) else f"{value:.4g}"


def format_ratio(row: pd.Series | dict) -> str:
    """``1.103 [1.095, 1.111]``, or ``-`` when there is no ratio."""
    if is_missing(row["ratio"]):
        return "-"
    if row["ci_low"] == row["ci_high"]:
        return f"{row['ratio']:.3f}"
    return f"{row['ratio']:.3f} [{row['ci_low']:.3f}, {row['ci_high']:.3f}]"


def format_compare(table: pd.DataFrame, *, only_changes: bool = False) -> str:
    """The comparison as a Markdown table (readable in a terminal too), reasons in the last column."""
    if table.empty:
        return "No points to compare."
    if only_changes:
        table = table[~table["verdict"].isin(UNCHANGED)]
        if table.empty:
            return "No changes."
    rows = [
        (r["point"], f"{r['metric']} ({r['statistic']})", format_value(r["baseline"]), format_value(r["candidate"]),
         format_ratio(r), format_value(r["p_value"]), r["verdict"], format_note(r["reason"], r.get("caution")))
        for _, r in table.iterrows()
    ]
    headers = ("point", "metric", "baseline", "candidate", "ratio [CI]", "p", "verdict", "note")
    return markdown_table(headers, rows) + caution_line(table)


def caution_line(table: pd.DataFrame) -> str:
    """A closing line when points ran noisy or on a busy machine, else ""."""
    doubtful = table.loc[table["caution"].astype(bool), "point"].nunique() if "caution" in table else 0
    if not doubtful:
        return ""
    return (f"\n\nCaution: {doubtful} of {table['point'].nunique()} points ran noisy or on a machine that was not "
            "quiet (see the notes): a verdict there may be noise; measure again on a quiet machine.")
