"""Small statistics for comparing benchmark runs, with the process as the unit.

Timings come with structure: a point is run ``repeats`` times (fresh processes), each repeat
measures many steps. Steps within one process share that process's luck (clocks, placement,
allocator state, page cache): on a 2-core CPU the same code runs 30% apart from one process to
the next while its steps agree within 2%. Steps are therefore no samples of the noise a verdict
must clear; a verdict stands on one value per process (:func:`per_process`), on the log scale
(a slowdown is a ratio), with a t-test suited to few samples (:func:`ratio_test`). What the two
sides cannot say about their spread, this machine's earlier runs of the point can
(:func:`log_spread`, pooled into the test with their degrees of freedom); where nothing says it,
there is no interval. :func:`repeats_needed` sizes a run from that spread.

What is here:

- :func:`coefficient_of_variation`: std / mean of a sample.
- :func:`per_process`, :func:`log_spread`, :func:`ratio_test`, :func:`repeats_needed`: above.
- :func:`mean_interval`: the t-interval of the mean of a few process values.
- :func:`find_change_points`: circular binary segmentation on the log of a series (one value per
  run), keeping a split when the step is large (relative) and clear of the noise within the levels
  at a level corrected for the many splits tried (each change point says that level).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

#: statistics a threshold or comparison may name, as reductions along the last axis
STATISTICS: dict[str, Callable[..., np.ndarray]] = {
    "median": functools.partial(np.median, axis=-1),
    "mean": functools.partial(np.mean, axis=-1),
    "min": functools.partial(np.min, axis=-1),
    "max": functools.partial(np.max, axis=-1),
    "p10": functools.partial(np.percentile, q=10, axis=-1),
    "p90": functools.partial(np.percentile, q=90, axis=-1),
}

#: the one statistic of a step everywhere (tables, plots, breakdown, compare, history): the mean over
#: the steady window, the step throughput is computed over (benchbay.runner: the median hides the
#: waits of loader workers delivering batches together), so samples/s = samples per step / step
STEP_STATISTIC = "mean"
#: the statistic of the steps that a rate's statistic is (a rate is samples per step over a step):
#: the 10th percentile of samples/s is at the 90th percentile of the step
MIRRORED = {"min": "max", "max": "min", "p10": "p90", "p90": "p10"}


def coefficient_of_variation(samples: Sequence[float]) -> float:
    """Sample standard deviation over mean (NaN for fewer than two samples or a zero mean)."""
    values = np.asarray(samples, dtype=float)
    if values.size < 2 or values.mean() == 0:
        return float("nan")
    return float(values.std(ddof=1) / values.mean())


def _as_repeats(repeats: Sequence[Sequence[float]]) -> list[np.ndarray]:
    arrays = [np.asarray(r, dtype=float) for r in repeats]
    arrays = [a[np.isfinite(a)] for a in arrays]
    arrays = [a for a in arrays if a.size]
    if not arrays:
        raise ValueError("no finite samples: need at least one repeat with one sample")
    return arrays


def _check_statistic(name: str) -> None:
    if name not in STATISTICS:
        raise ValueError(f"unknown statistic {name!r}; expected one of {sorted(STATISTICS)}")


def mean_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """The t-interval of the mean of a few independent values (one per process). Not a bootstrap:
    resampling 3 values can only reach their own range ([min, max] at 95%), far too narrow for
    what a fourth process might read. ValueError for fewer than two finite values."""
    sample = np.asarray(values, dtype=float)
    sample = sample[np.isfinite(sample)]
    if sample.size < 2:
        raise ValueError("mean_interval: needs two or more finite values (one per process)")
    mean, sem = float(sample.mean()), float(sample.std(ddof=1) / math.sqrt(sample.size))
    if sem == 0:
        return mean, mean
    from scipy import stats

    low, high = stats.t.interval(confidence, sample.size - 1, loc=mean, scale=sem)
    return float(low), float(high)


def per_process(steps_by_process: Sequence[Sequence[float]], statistic: str) -> tuple[np.ndarray, float]:
    """One value per process, ``statistic`` over its steps, and the floor its own steps set on a
    process value's variance on the log scale (the mean over processes of var(log step) / steps):
    a process value is known no better than its steps say, however close the processes agree."""
    _check_statistic(statistic)
    processes = _as_repeats(steps_by_process)
    values = np.array([float(STATISTICS[statistic](steps)) for steps in processes])
    own = [np.var(np.log(steps), ddof=1) / steps.size for steps in processes if steps.size > 1 and (steps > 0).all()]
    return values, float(np.mean(own)) if own else 0.0


def log_spread(groups: Iterable[Sequence[float]]) -> tuple[float, int]:
    """The sum of squared deviations of the log values around each group's own mean, and its degrees
    of freedom (values - groups, over the groups of two or more): a spread between processes that
    the groups' levels (another commit, another side of a comparison) take no part in."""
    squares, df = 0.0, 0
    for group in groups:
        values = np.asarray(group, dtype=float)
        values = np.log(values[np.isfinite(values) & (values > 0)])
        if values.size > 1:
            squares += float(((values - values.mean()) ** 2).sum())
            df += values.size - 1
    return squares, df


@dataclass(frozen=True)
class ProcessTest:
    """candidate / baseline with its interval and two-sided p-value from the spread between processes."""

    ratio: float
    low: float  # NaN where no spread is known: one process a side and nothing else to say it
    high: float
    p_value: float
    log_sd: float  # the spread between processes used, sd of log values (about the CV)
    df: int  # its degrees of freedom: the two sides' own and the earlier runs'
    confidence: float

    @property
    def known(self) -> bool:
        """The spread is known: the interval and the p-value mean something."""
        return bool(np.isfinite(self.low))

    @property
    def excludes_one(self) -> bool:
        """True when the whole interval lies on one side of 1 (the change is not noise)."""
        return self.known and (self.low > 1.0 or self.high < 1.0)


def ratio_test(baseline: Sequence[float], candidate: Sequence[float], *, ratio: float | None = None,
               earlier: tuple[float, int] = (0.0, 0), floor: float = 0.0, exact_when_unknown: bool = False,
               confidence: float = 0.95) -> ProcessTest:
    """A pooled-variance t-test of the log process values of two sides.

    ``ratio``: the figure to judge (the two sides' shown figures, candidate over baseline; by default
    the ratio of the geometric means). The variance is pooled from both sides' spreads and
    ``earlier`` (:func:`log_spread` of this machine's earlier runs of the point), never below
    ``floor`` (:func:`per_process`'s). With no degree of freedom, there is no interval unless
    ``exact_when_unknown`` (a figure that repeats exactly, such as a memory peak): then it collapses
    to the ratio. ValueError for a side without a positive finite value.
    """
    sides = [np.asarray(side, dtype=float) for side in (baseline, candidate)]
    sides = [side[np.isfinite(side) & (side > 0)] for side in sides]
    if not all(side.size for side in sides):
        raise ValueError("ratio_test: each side needs at least one positive finite value (one per process)")
    base, cand = sides
    if ratio is None:
        ratio = float(np.exp(np.log(cand).mean() - np.log(base).mean()))
    squares, df = log_spread(sides)
    squares, df = squares + earlier[0], df + earlier[1]
    if not df and not exact_when_unknown:
        return ProcessTest(ratio, math.nan, math.nan, math.nan, math.nan, 0, confidence)
    variance = max(squares / df if df else 0.0, floor)
    se = math.sqrt(variance * (1.0 / base.size + 1.0 / cand.size))
    if se == 0:
        return ProcessTest(ratio, ratio, ratio, 1.0 if ratio == 1.0 else 0.0, 0.0, df, confidence)
    from scipy import stats  # a second to import: workers import this module for the CV alone

    dist = stats.t(df) if df else stats.norm
    half = float(dist.ppf(0.5 + confidence / 2)) * se
    p_value = float(2 * dist.sf(abs(math.log(ratio)) / se))
    return ProcessTest(ratio, ratio * math.exp(-half), ratio * math.exp(half), p_value, math.sqrt(variance), df,
                       confidence)


#: the share of a change that the repeats are sized to find: a slowdown measures less than its size
#: (the gate's calibration on a 2-core CPU: +25% of the work measured +22.4% and +23.7%), and the
#: spread between processes has heavier tails than normal (sized for the change itself, the gate
#: caught 87.6% and 92.0% of them, not 95%)
SIZING_MARGIN = 0.8


def repeats_needed(log_sd: float, change: float, *, earlier_df: int = 0, alpha: float = 0.05,
                   power: float = 0.95) -> int:
    """Processes a side at which :func:`ratio_test` (two-sided, at ``alpha``) finds a change of
    ``change`` (0.05 = 5%) with probability ``power``, the spread between processes being
    ``log_sd`` and ``earlier_df`` degrees of freedom known before the run (noncentral t); sized
    for ``SIZING_MARGIN`` of the change."""
    if not change > 0:
        raise ValueError(f"repeats_needed: the change to detect must be > 0, got {change!r}")
    smallest = 1 if earlier_df else 2  # with nothing known before, two a side to measure the spread
    if not log_sd > 0:
        return smallest
    from scipy import stats

    delta = math.log1p(change * SIZING_MARGIN)
    normal = 2 * ((stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)) * log_sd / delta) ** 2
    # the normal approximation is a lower bound; the t's heavier tails add a few at most
    n = np.arange(max(smallest, math.floor(normal)), math.ceil(normal) + 64)
    df = 2 * n - 2 + earlier_df
    reached = stats.nct.sf(stats.t.ppf(1 - alpha / 2, df), df, delta / (log_sd * np.sqrt(2.0 / n))) >= power
    return int(n[np.argmax(reached)]) if reached.any() else int(n[-1])


@dataclass(frozen=True)
class ChangePoint:
    """Where a series' level steps (the index of the first new value), and the level its split was
    tested at: the family's alpha over the candidate splits of the segment it was found in."""

    index: int
    alpha: float


def find_change_points(values: Sequence[float], *, min_relative_step: float = 0.05, alpha: float = 0.05,
                       min_size: int = 1) -> list[ChangePoint]:
    """Where the level of ``values`` (positive: times, rates, sizes) steps to a new one, in order.

    Circular binary segmentation on the logs: in a segment, find the stretch whose level differs
    most from the rest (largest ``n_in*n_out/n * (mean_in - mean_out)^2``; a stretch at either end
    is a single step), keep its ends as change points when the step is at least
    ``min_relative_step`` AND its t against the noise within the stretch and within the rest (their
    pooled sd, n - 2 degrees of freedom: a step is never its own noise, so a -44% step in a short
    series stands out as a -11% one does in a long one) is significant at ``alpha`` over the number
    of candidate splits (Bonferroni: the largest of some hundred t's of pure noise clears 3 in one
    series of two), then recurse into the parts. Under no change (normal noise on the log scale), a
    series gets a change point with probability at most ``alpha``. Three values are the fewest that
    can show one (two say nothing of the noise). ``min_size`` is the shortest segment allowed; with
    1, a one-off spike shows as two change points, and a change in the newest run is flagged at once
    when it clears the noise.
    """
    x = np.asarray(values, dtype=float)
    if np.isnan(x).any():
        raise ValueError("change_points: the series holds NaN; drop missing runs first")
    if (x <= 0).any():
        raise ValueError("change_points: the series holds a value <= 0; expected times, rates or sizes")
    x = np.log(x)
    found: list[ChangePoint] = []

    def split(lo: int, hi: int) -> None:
        n = hi - lo
        if n < max(3, 2 * min_size):
            return
        sums = np.concatenate([[0.0], np.cumsum(x[lo:hi])])
        squares = np.concatenate([[0.0], np.cumsum(x[lo:hi] ** 2)])
        start, stop = np.triu_indices(n + 1, k=1)  # the stretch x[start:stop] against the rest
        inside, before, after = stop - start, start, n - stop
        allowed = (inside >= min_size) & ((before == 0) | (before >= min_size)) & ((after == 0) | (after >= min_size)) \
            & (inside < n)
        start, stop, inside = start[allowed], stop[allowed], inside[allowed]
        if not start.size:
            return
        # distinct splits: the stretch [0:k] against the rest is [k:n] against the rest
        tested = len(set(zip(np.where(start == 0, stop, start).tolist(), np.where(start == 0, n, stop).tolist(),
                             strict=True)))
        sum_in, square_in = sums[stop] - sums[start], squares[stop] - squares[start]
        mean_in, mean_out = sum_in / inside, (sums[-1] - sum_in) / (n - inside)
        gain = inside * (n - inside) / n * (mean_in - mean_out) ** 2
        best = int(np.argmax(gain))
        m, step = int(inside[best]), float(mean_in[best] - mean_out[best])
        within = (square_in[best] - sum_in[best] ** 2 / m) + \
            (squares[-1] - square_in[best] - (sums[-1] - sum_in[best]) ** 2 / (n - m))
        se = math.sqrt(max(within, 0.0) / (n - 2) * (1.0 / m + 1.0 / (n - m)))
        if abs(math.expm1(step)) < min_relative_step or not _significant(abs(step), se, n - 2, alpha / tested):
            return
        cuts = [lo + int(c) for c in (start[best], stop[best]) if 0 < c < n]
        found.extend(ChangePoint(cut, alpha / tested) for cut in cuts)
        bounds = [lo, *cuts, hi]
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            split(a, b)

    split(0, x.size)
    return sorted(found, key=lambda c: c.index)


def _significant(step: float, se: float, df: int, alpha: float) -> bool:
    """A two-sided t-test of a step against its standard error; a step over no noise at all is one."""
    if se <= 1e-12 * max(step, 1.0):  # rounding of equal logs
        return step > 0
    from scipy import stats

    return bool(2 * stats.t.sf(step / se, df) <= alpha)
