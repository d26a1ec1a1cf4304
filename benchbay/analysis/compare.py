"""Compare a candidate result set against a baseline, point by point and metric by metric.

Points are matched by suite, workload, params and knob values (the columns both frames share),
never by run or label. Each matched point and metric gets each side's figure (:func:`pooled_figure`,
the one ``show`` and the report print), their ratio candidate/baseline, and an interval, a p-value
and a verdict whose unit is the process (a repeat), never the step: one value per ok record
(:func:`process_values`), tested on the log scale by :func:`benchbay.analysis.stats.ratio_test`
with their spread pooled with what this machine's earlier runs of the point say of it
(:func:`earlier_spread`). Steps share their process's luck: their own spread only sets a floor.

- ``faster`` / ``slower`` (``less`` / ``more memory``, ``energy``, ``power``): the change is at
  least ``min_change`` AND real (the interval excludes 1: p < 1 - confidence);
- ``no change``: real but under ``min_change``, or the whole interval within ``min_change``;
- ``not significant``: the interval reaches past ``min_change`` yet holds no change (the reason
  says how many repeats a side would tell);
- ``cannot support a verdict``: one process a side and no earlier run of the point on this
  machine: nothing says how far processes spread, so there is no interval;
- ``failed``: the point ran in the baseline but not in the candidate (oom, crash, timeout...), or
  a larger share of the candidate's repeats failed than of the baseline's (the reason names them:
  the ok repeats alone would pass a point that mostly runs out of memory);
- ``not comparable``: the environments differ in GPU model, driver, CUDA or torch (the reason
  names which), the point is missing on one side, or a figure is missing.

Steady steps are ``step_times_s`` after ``warmup_steps``. A rate (samples/s, samples/s/GPU, MFU) is
samples per step over a step: a record's figure times the step it was computed over is its samples
per step, and a process's or a side's rate is that over the statistic of its steps (mirrored: the
p10 rate is at the p90 step). MFU is each record's over the one peak of its GPU model that the
report divides by (:func:`benchbay.analysis.mfu.row_mfu`), never the peak its run stored. A
loader's rate is what it delivered, as recorded. Memory peaks
repeat exactly: with one process a side the interval collapses to the ratio. Given a GPU-hour
price, each point also gets ``cost_per_m_samples`` (``cheaper`` / ``costlier``): its throughput
row through :func:`benchbay.analysis.cost.cost_per_million_samples`, the interval inverted.
``caution`` names a side whose steps were noisy or whose machine was busy (see
:mod:`benchbay.analysis.quality`); it never changes the verdict, it says why to doubt it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace

import numpy as np
import pandas as pd

from benchbay.analysis.cost import COST, cost_per_million_samples
from benchbay.analysis.failed_repeats import failed_repeats
from benchbay.analysis.frame import is_missing
from benchbay.analysis.metrics import DEFAULT_METRICS, METRICS, UNCHANGED, Metric, Verdict
from benchbay.analysis.mfu import row_mfu
from benchbay.analysis.points import MatchedPoint, describe_points, env_differences, match_points, point_groups
from benchbay.analysis.quality import cards_note, notes, warnings_of
from benchbay.analysis.stats import (
    MIRRORED,
    STATISTICS,
    STEP_STATISTIC,
    coefficient_of_variation,
    log_spread,
    per_process,
    ratio_test,
    repeats_needed,
)
from benchbay.record import (
    DELIVERED_RATE,
    MEASURED_STEPS,
    MFU,
    SAMPLES_PER_S_PER_GPU,
    SAMPLES_PER_STEP,
    STEP_TIME_S,
    STEP_TIMES_S,
    WARMUP_STEPS,
    Status,
)


@dataclass(frozen=True)
class Comparison:
    """One metric of one matched point: candidate against baseline, and the verdict."""

    metric: str
    statistic: str
    baseline: float = math.nan  # the side's figure (pooled_figure), as show prints it
    candidate: float = math.nan
    ratio: float = math.nan  # candidate / baseline
    ci_low: float = math.nan
    ci_high: float = math.nan
    p_value: float = math.nan
    worse_by: float = math.nan  # the relative change in the bad direction (positive = regression)
    verdict: Verdict = Verdict.NOT_COMPARABLE
    regression: bool = False
    reason: str | None = None
    baseline_processes: int = 0  # the ok processes (repeats) of each side: the test's samples
    candidate_processes: int = 0
    between_cv: float = math.nan  # the spread between processes the test used (sd of log values)
    earlier_df: int = 0  # the degrees of freedom of that spread from earlier runs on this machine
    repeats_needed: float = math.nan  # processes a side that tell a change of min_change (95% power)


@dataclass(frozen=True)
class CompareOptions:
    """How a comparison decides (the module docstring): the statistic of a process's steps (and of
    a side's pooled steps, its figure), the smallest change that counts, the interval's confidence
    (its test's alpha is 1 - confidence) and the power the repeats needed are sized for."""

    statistic: str = STEP_STATISTIC
    min_change: float = 0.02
    confidence: float = 0.95
    power: float = 0.95


DEFAULT_OPTIONS = CompareOptions()


def steady_step_times(row: pd.Series | dict) -> np.ndarray:
    """The measured steps of one record: ``step_times_s`` after ``warmup_steps``, at most ``measured_steps``."""
    times = row.get(STEP_TIMES_S)
    if not isinstance(times, (list, tuple, np.ndarray)) or len(times) == 0:
        return np.empty(0)
    warmup = row.get(WARMUP_STEPS)
    measured = row.get(MEASURED_STEPS)
    start = 0 if is_missing(warmup) else int(warmup)
    stop = None if is_missing(measured) else start + int(measured)
    values = np.asarray(times[start:stop], dtype=float)
    return values[np.isfinite(values)]


def figure_of(row: pd.Series | dict, metric: Metric) -> float | None:
    """A record's figure of ``metric``: as recorded, but MFU over the one peak of its GPU model
    that the report divides by (:func:`benchbay.analysis.mfu.row_mfu`), not the peak its run stored."""
    if metric.column == MFU:
        value = row_mfu(row)
        return None if math.isnan(value) else value
    value = row.get(metric.column)
    return None if is_missing(value) else float(value)


def _samples_per_step(row: pd.Series | dict, metric: Metric) -> float | None:
    """A rate's figure times the step it was computed over: its samples (or MFU) per step, whose
    ratio to a step is the rate; None for a step time, a loader's delivered rate, or no figure.
    The step is samples per step over samples/s/GPU where both are recorded (exact), else the
    recorded step (older records: the median)."""
    value = figure_of(row, metric)
    if not metric.per_step or metric.column == STEP_TIME_S or is_missing(value) \
            or not is_missing(row.get(f"extra.{DELIVERED_RATE}")):
        return None
    samples, per_gpu = row.get(SAMPLES_PER_STEP), row.get(SAMPLES_PER_S_PER_GPU)
    step = float(samples) / float(per_gpu) if not is_missing(samples) and not is_missing(per_gpu) and per_gpu > 0 \
        else row.get(STEP_TIME_S)
    return None if is_missing(step) else float(value) * float(step)


def _step_statistic(metric: Metric, statistic: str) -> str:
    return statistic if metric.column == STEP_TIME_S else MIRRORED.get(statistic, statistic)


def process_values(rows: pd.DataFrame, metric: Metric, statistic: str) -> tuple[np.ndarray, float]:
    """One value of ``metric`` per record (a process) of ``rows``: the statistic over its steady
    steps (a rate: its samples per step over that), else its recorded figure; and the floor its
    steps set on a value's variance (:func:`benchbay.analysis.stats.per_process`)."""
    values, floors = [], []
    for _, row in rows.iterrows():
        steps, per_step = steady_step_times(row), _samples_per_step(row, metric)
        if metric.per_step and steps.size and (steps > 0).all() and (metric.column == STEP_TIME_S or per_step):
            value, floor = per_process([steps], _step_statistic(metric, statistic))
            values.append(float(value[0]) if per_step is None else per_step / float(value[0]))
            floors.append(floor)
        elif (figure := figure_of(row, metric)) is not None:
            values.append(figure)
    return np.array(values, dtype=float), float(np.mean(floors)) if floors else 0.0


def pooled_figure(rows: pd.DataFrame, metric: Metric, statistic: str = STEP_STATISTIC) -> float:
    """The one figure of ``metric`` over ``rows`` (the ok records of a point, or of one run of it),
    as ``show``, the report and the progress line give it: a step time is the statistic over the
    pooled steady steps, a rate samples per step over that step (never a mean of per-step rates),
    another figure the statistic over the records' figures. NaN when none is recorded."""
    records = [row for _, row in rows.iterrows()]
    pooled = np.concatenate([steady_step_times(row) for row in records]) if records else np.empty(0)
    per_step = [x for x in (_samples_per_step(row, metric) for row in records) if x is not None]
    if metric.per_step and pooled.size and (metric.column == STEP_TIME_S or per_step):
        step = float(STATISTICS[_step_statistic(metric, statistic)](pooled))
        return step if metric.column == STEP_TIME_S else float(np.median(per_step)) / step
    values = np.array([x for x in (figure_of(row, metric) for row in records) if x is not None], dtype=float)
    return float(STATISTICS[statistic](values)) if values.size else math.nan


def _ok(rows: pd.DataFrame) -> pd.DataFrame:
    return rows[rows["status"] == Status.OK] if "status" in rows else rows


def _recorded(point: MatchedPoint, metric: Metric) -> bool:
    rows = _ok(point.rows)
    return metric.column in rows and rows[metric.column].notna().any()


def _statuses(rows: pd.DataFrame) -> str:
    return "/".join(sorted(rows["status"].astype(str).unique())) if "status" in rows and len(rows) else "absent"


def _code_of(row: pd.Series) -> str:
    """The runs whose processes ran the same code: those of one clean commit, else each run alone."""
    commit = row.get("env.git_commit")
    clean = isinstance(commit, str) and commit and not commit.endswith("-dirty")
    return f"commit {commit}" if clean else f"run {row.get('run_id')}"


def earlier_spread(point: MatchedPoint, earlier: pd.DataFrame | None, metric: Metric,
                   statistic: str) -> tuple[float, int]:
    """What this machine's earlier runs say about the spread between processes of the point
    (:func:`benchbay.analysis.stats.log_spread`): its ok records in ``earlier`` on the candidate's
    machine key, outside the two sides' runs, grouped by the code they ran (:func:`_code_of`)."""
    if earlier is None or earlier.empty:
        return 0.0, 0
    rows = _ok(earlier)
    sides = point.rows
    if "run_id" in rows and "run_id" in sides:
        rows = rows[~rows["run_id"].isin(set(sides["run_id"]))]
    if "env.machine_key" in rows and "env.machine_key" in point.candidate:
        rows = rows[rows["env.machine_key"].isin(set(point.candidate["env.machine_key"].dropna()))]
    return code_spread(rows, metric, statistic)


def code_spread(rows: pd.DataFrame, metric: Metric, statistic: str) -> tuple[float, int]:
    """:func:`benchbay.analysis.stats.log_spread` of the process values of ``rows`` (one point's ok
    records on one machine), grouped by the code they ran (:func:`_code_of`) and their configuration
    (a knob the comparison ignores still sets a level of its own)."""
    if rows.empty:
        return 0.0, 0
    codes = rows.apply(lambda row: f"{_code_of(row)} {row.get('point_id')}", axis=1)
    return log_spread(process_values(group, metric, statistic)[0] for _, group in rows.groupby(codes, sort=False))


def earlier_rows(earlier: pd.DataFrame | None, points: Sequence[MatchedPoint]) -> list[pd.DataFrame | None]:
    """Each matched point's records in ``earlier`` (matched on the points' key columns), or None."""
    if earlier is None or earlier.empty or not points:
        return [None] * len(points)
    keys = list(points[0].key)
    groups = point_groups(earlier.reindex(columns=list(dict.fromkeys([*earlier.columns, *keys]))), keys)
    return [earlier.iloc[groups.get(tuple(p.key.values()), [])] for p in points]


def compare_metric(point: MatchedPoint, metric: Metric, options: CompareOptions = DEFAULT_OPTIONS,
                   earlier: pd.DataFrame | None = None) -> Comparison:
    """Compare one metric of one matched point; see the module docstring for the verdicts.
    ``earlier``: this machine's earlier records of the point (:func:`earlier_rows`), or None."""
    statistic = options.statistic

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
    result = _compare_ok(point, metric, options, earlier)
    failed = failed_repeats(point.baseline, point.candidate)
    return replace(result, verdict=Verdict.FAILED, regression=True, reason=failed) if failed else result


def _compare_ok(point: MatchedPoint, metric: Metric, options: CompareOptions,
                earlier: pd.DataFrame | None) -> Comparison:
    """:func:`compare_metric` over the ok processes of two sides that both have some."""
    statistic, min_change = options.statistic, options.min_change

    def incomparable(reason: str) -> Comparison:
        return Comparison(metric.name, statistic, reason=reason)

    base_ok, cand_ok = _ok(point.baseline), _ok(point.candidate)
    (base, base_floor), (cand, cand_floor) = (process_values(rows, metric, statistic) for rows in (base_ok, cand_ok))
    if not base.size or not cand.size:
        return incomparable(f"no {metric.column} in " + ("baseline" if not base.size else "candidate"))
    base_figure, cand_figure = pooled_figure(base_ok, metric, statistic), pooled_figure(cand_ok, metric, statistic)
    if not base_figure or not cand_figure > 0 or not (base > 0).all() or not (cand > 0).all():
        return incomparable(f"a {statistic} of {metric.column} is 0: the ratio is undefined")
    known = earlier_spread(point, earlier, metric, statistic)
    test = ratio_test(base, cand, ratio=cand_figure / base_figure, earlier=known, floor=max(base_floor, cand_floor),
                      exact_when_unknown=metric.exact, confidence=options.confidence)
    worse_by = (1.0 - test.ratio) if metric.higher_is_better else (test.ratio - 1.0)
    needed = repeats_needed(test.log_sd, min_change, earlier_df=known[1], alpha=1 - options.confidence,
                            power=options.power) if test.known and min_change > 0 else math.nan
    if not test.known:
        verdict = Verdict.UNSUPPORTED
    else:
        within = 1.0 - min_change <= test.low and test.high <= 1.0 + min_change
        verdict = Verdict.NO_CHANGE if test.excludes_one or within else Verdict.NOT_SIGNIFICANT
        if test.excludes_one and abs(test.ratio - 1.0) >= min_change:
            verdict = metric.worse if worse_by > 0 else metric.better
    return Comparison(metric.name, statistic, base_figure, cand_figure, test.ratio, test.low, test.high, test.p_value,
                      worse_by, verdict, regression=verdict == metric.worse,
                      reason=_why(verdict, (test.low, test.high), test.confidence, min_change, needed,
                                  (base.size, cand.size)),
                      baseline_processes=base.size, candidate_processes=cand.size, between_cv=test.log_sd,
                      earlier_df=known[1], repeats_needed=needed)


def _why(verdict: str, interval: tuple[float, float], confidence: float, min_change: float, needed: float,
         sides: tuple[int, int]) -> str | None:
    """The one reason a verdict other than a clear change stands on, shown beside it: the interval
    (over processes, so a reader sees the unit), or what is missing for one."""
    low, high = interval
    excludes_one = low > 1.0 or high < 1.0  # False for NaN: no interval
    processes = f"{sides[0]} vs {sides[1]} processes"
    if verdict == Verdict.UNSUPPORTED:
        return (f"{processes} and no earlier run of this point on this machine: the spread between processes is "
                "unknown; run 2 or more repeats")
    if verdict == Verdict.NOT_SIGNIFICANT:
        more = f"; {needed:.0f} repeats a side would tell a {min_change:.0%} change" if needed > min(sides) else ""
        return f"the {confidence:.0%} interval over {processes} [{low:.3g}, {high:.3g}] holds no change{more}"
    if verdict == Verdict.NO_CHANGE and not excludes_one:
        return f"the interval over {processes} lies within ±{min_change:.0%}"
    if verdict == Verdict.NO_CHANGE:
        return f"a real change smaller than {min_change:.0%}"
    return None


def _inverse(value: float) -> float:
    return 1.0 / value if value else math.nan


def cost_comparison(throughput: Comparison, price_per_gpu_hour: float,
                    options: CompareOptions = DEFAULT_OPTIONS) -> Comparison:
    """The cost per 1M samples of a samples/s/GPU comparison: each side's figure at the price, the
    ratio and its interval inverted (a cost is a price over a throughput), and the reason of an
    unchanged verdict said of the inverted interval, the one its row shows."""
    verdict = {Verdict.FASTER: Verdict.CHEAPER, Verdict.SLOWER: Verdict.COSTLIER}.get(throughput.verdict,
                                                                                     throughput.verdict)
    low, high = _inverse(throughput.ci_high), _inverse(throughput.ci_low)
    reason = _why(verdict, (low, high), options.confidence, options.min_change, throughput.repeats_needed,
                  (throughput.baseline_processes, throughput.candidate_processes)) \
        if verdict in UNCHANGED else throughput.reason
    return replace(throughput, metric=COST, baseline=cost_per_million_samples(throughput.baseline, price_per_gpu_hour),
                   candidate=cost_per_million_samples(throughput.candidate, price_per_gpu_hour),
                   ratio=_inverse(throughput.ratio), ci_low=low, ci_high=high,
                   worse_by=_inverse(throughput.ratio) - 1, verdict=verdict, reason=reason)


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


def compare(
    baseline: pd.DataFrame,
    candidate: pd.DataFrame,
    *,
    metrics: Sequence[str] = DEFAULT_METRICS,
    options: CompareOptions = DEFAULT_OPTIONS,
    key_columns: Sequence[str] | None = None,
    ignore_knobs: Sequence[str] = (),
    price_per_gpu_hour: float | None = None,
    history: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """One row per matched point and metric: suite, point, the key columns, the fields of
    :class:`Comparison`, caution. ``history``: this machine's earlier runs of the suite, whose
    spread between processes stands in where the sides have too few (:func:`earlier_spread`).

    Metrics that neither side records for a point (e.g. MFU on CPU) are left out. With
    ``price_per_gpu_hour``, each point ends with its cost per 1M samples (:func:`cost_comparison`).
    """
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise ValueError(f"unknown metrics {unknown}; known: {list(METRICS)}")
    points = match_points(baseline, candidate, key_columns, ignore_knobs)
    rows = []
    names = describe_points([p.key for p in points], [p.label for p in points])
    for point, name, earlier in zip(points, names, earlier_rows(history, points), strict=True):
        caution = point_caution(point)
        results = {}
        for metric_name in metrics:
            metric = METRICS[metric_name]
            if metric_name != metrics[0] and not _recorded(point, metric):
                continue  # a figure neither side has (e.g. MFU on CPU); the first metric always shows
            results[metric_name] = compare_metric(point, metric, options, earlier)
        if price_per_gpu_hour is not None:
            throughput = results.get("samples_per_s_per_gpu") or compare_metric(
                point, METRICS["samples_per_s_per_gpu"], options, earlier)
            results[COST] = cost_comparison(throughput, price_per_gpu_hour, options)
        rows += [{"point": name, "label": point.label, **point.key, **asdict(result), "caution": caution}
                 for result in results.values()]
    return pd.DataFrame(rows)
