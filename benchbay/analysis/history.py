"""A metric across past runs (commits), point by point, with its change points flagged.

Feed it a frame of many runs (``load_runs`` over ``results/<suite>/*``): each point (suite,
params, knobs, and machine key, so that different machines never share a series) becomes a
series with one value per run, its figure as ``show`` gives it
(:func:`benchbay.analysis.compare.pooled_figure`), ordered by ``started_at`` then
``env.git_commit``. A change point is where :func:`benchbay.analysis.stats.find_change_points` finds
the level of that series step by at least ``min_relative_step`` and clear of the noise within the
levels on either side (so that a large step is flagged in a short series as a small one is in a
long one), at ``alpha`` over the many splits it tried (a series of no change gets one with
probability at most ``alpha``). A change point is a regression (or an improvement) only when
:func:`benchbay.analysis.compare.compare_metric`, over the processes of the runs on either side of
it, calls the change real the same way at that corrected level (the split was chosen on these
values: at 95% the largest of many gaps of noise would pass again); else it is ``noisy``, or
``cannot support a verdict`` where one process a side says nothing of their spread.
MFU is over one peak per GPU model (:func:`benchbay.analysis.compare.figure_of`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from benchbay.analysis.compare import CompareOptions, compare_metric, pooled_figure
from benchbay.analysis.metrics import METRICS, Metric, Verdict
from benchbay.analysis.points import MatchedPoint, describe_points, first_label, point_groups, point_key_columns
from benchbay.analysis.stats import STATISTICS, STEP_STATISTIC, find_change_points
from benchbay.record import Status


def _run_values(rows: pd.DataFrame, metric: str, statistic: str) -> pd.DataFrame:
    """One row per run of one point: that run's figure (as show gives it)."""
    out = []
    for run_id, run in rows.groupby("run_id", sort=False):
        commits = run["env.git_commit"].dropna() if "env.git_commit" in run else ()
        out.append({
            "run_id": run_id,
            "git_commit": commits.iloc[0] if len(commits) else None,
            "started_at": pd.to_datetime(run["started_at"], utc=True).min() if "started_at" in run else pd.NaT,
            "value": pooled_figure(run, METRICS[metric], statistic),
        })
    return pd.DataFrame(out).sort_values(["started_at", "git_commit"], na_position="last", kind="stable")


def _verdict(rows: pd.DataFrame, before: pd.Series, after: pd.Series, metric: Metric, statistic: str,
             alpha: float) -> str:
    """``regression``, ``improvement``, ``noisy`` (or ``not comparable``, ``cannot support a verdict``): what
    compare says of the processes of the runs of the level before a change point against those of the level it
    starts, at the level the split was found at."""
    point = MatchedPoint({}, rows[rows["run_id"].isin(before)], rows[rows["run_id"].isin(after)])
    verdict = compare_metric(point, metric, CompareOptions(statistic=statistic, confidence=1 - alpha)).verdict
    named = {metric.worse: "regression", metric.better: "improvement", Verdict.NOT_COMPARABLE: "not comparable",
             Verdict.UNSUPPORTED: Verdict.UNSUPPORTED.value}
    return named.get(verdict, "noisy")


def history(
    df: pd.DataFrame,
    metric: str = "step_time",
    *,
    statistic: str = STEP_STATISTIC,
    min_relative_step: float = 0.05,
    alpha: float = 0.05,
    key_columns: Sequence[str] | None = None,
) -> pd.DataFrame:
    """One row per point and run: point, label, the key columns, run_id, git_commit, started_at,
    value, change_point (a new level starts at this run), step (relative change of the level
    there), verdict (at a change point: regression, improvement, noisy or cannot support a verdict,
    see the module docstring) and regression (the verdict is one). Failed runs are left out. ``alpha``:
    the chance that a series of no change gets a change point.
    """
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}; known: {list(METRICS)}")
    if statistic not in STATISTICS:
        raise ValueError(f"unknown statistic {statistic!r}; known: {list(STATISTICS)}")
    ok = df[df["status"] == Status.OK] if "status" in df else df
    if key_columns is None:
        key_columns = point_key_columns(ok) + (["env.machine_key"] if "env.machine_key" in ok else [])
    groups = point_groups(ok, key_columns)
    keys = [dict(zip(key_columns, key, strict=True)) for key in groups]
    labels = [first_label(ok.iloc[positions]) for positions in groups.values()]
    frames = []
    for key, label, name, positions in zip(keys, labels, describe_points(keys, labels), groups.values(), strict=True):
        runs = _run_values(ok.iloc[positions], metric, statistic).dropna(subset=["value"])
        runs = runs[runs["value"] > 0]  # a figure of 0 (no samples) has no level to step from
        values = runs["value"].to_numpy()
        found = find_change_points(values, min_relative_step=min_relative_step, alpha=alpha) if values.size else []
        cuts = [c.index for c in found]
        bounds = [0, *cuts, values.size]
        means = [values[a:b].mean() for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
        step = np.full(values.size, np.nan)
        verdicts = [""] * values.size
        rows = ok.iloc[positions]
        for i, (cut, change) in enumerate(zip(cuts, found, strict=True)):
            step[cut] = means[i + 1] / means[i] - 1.0
            verdicts[cut] = _verdict(rows, runs["run_id"].iloc[bounds[i]:cut], runs["run_id"].iloc[cut:bounds[i + 2]],
                                     METRICS[metric], statistic, change.alpha)
        frames.append(runs.assign(point=name, label=label, **key, change_point=~np.isnan(step), step=step,
                                  verdict=verdicts, regression=[v == "regression" for v in verdicts]))
    columns = ["point", "label", *key_columns, "run_id", "git_commit", "started_at", "value", "change_point",
               "step", "verdict", "regression"]
    return pd.concat(frames, ignore_index=True)[columns] if frames else pd.DataFrame(columns=columns)
