"""Small statistics for comparing benchmark runs.

Timings come with structure: a point is run ``repeats`` times (fresh processes), each repeat
measures many steps. Steps within one repeat share that process's luck (clocks, placement,
allocator state), so the honest unit of variation is the repeat, then the step. The bootstrap
here resamples in that order (a two-stage, "hierarchical" bootstrap): it does not treat 3 x 30
steps as 90 independent draws when the repeats disagree.

What is here:

- :func:`coefficient_of_variation`: std / mean of a sample.
- :func:`bootstrap_ratio`: ratio candidate/baseline of a statistic (median by default) with a
  percentile confidence interval from the two-stage bootstrap.
- :func:`mann_whitney_p`: two-sided Mann-Whitney U p-value of the pooled samples (scipy); a
  distribution-free check that the two sides differ at all. :func:`mann_whitney_floor` says
  whether the sample sizes let it reach a given alpha at all.
- :func:`change_points`: binary segmentation on the mean of a series (one value per run), keeping
  a split only when the step is both large (relative) and clear of the series' noise.

Known limits: successive steps of one repeat are autocorrelated (thermal drift, periodic hiccups);
the step stage of the bootstrap ignores that, so with a single repeat the interval is too narrow.
Run at least 2-3 repeats where a decision depends on it.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

# each statistic's reduction, plain and NaN-skipping (for padded repeats of unequal length)
_REDUCTIONS: dict[str, tuple[Callable[..., np.ndarray], Callable[..., np.ndarray]]] = {
    "median": (np.median, np.nanmedian),
    "mean": (np.mean, np.nanmean),
    "min": (np.min, np.nanmin),
    "max": (np.max, np.nanmax),
    "p10": (functools.partial(np.percentile, q=10), functools.partial(np.nanpercentile, q=10)),
    "p90": (functools.partial(np.percentile, q=90), functools.partial(np.nanpercentile, q=90)),
}
#: statistics a threshold or comparison may name, as reductions along the last axis
STATISTICS: dict[str, Callable[..., np.ndarray]] = {
    name: functools.partial(plain, axis=-1) for name, (plain, _) in _REDUCTIONS.items()}
# the same, skipping NaN; slower, so used only then
_NAN_STATISTICS: dict[str, Callable[..., np.ndarray]] = {
    name: functools.partial(nan, axis=-1) for name, (_, nan) in _REDUCTIONS.items()}

#: the one statistic of a step everywhere (tables, plots, breakdown, compare, history): the mean over
#: the steady window, the step throughput is computed over (benchbay.runner: the median hides the
#: waits of loader workers delivering batches together), so samples/s = samples per step / step
STEP_STATISTIC = "mean"

# bootstrap draws are processed in chunks so that one chunk holds at most this many samples
_CHUNK_ELEMENTS = 2_000_000


@dataclass(frozen=True)
class RatioEstimate:
    """candidate / baseline of one statistic, with its bootstrap confidence interval."""

    baseline: float  # the statistic over all baseline samples pooled
    candidate: float
    ratio: float
    low: float
    high: float
    confidence: float

    @property
    def excludes_one(self) -> bool:
        """True when the whole interval lies on one side of 1 (the change is not noise)."""
        return self.low > 1.0 or self.high < 1.0


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


def _bootstrap_statistic(
    repeats: list[np.ndarray], statistic: str, n_boot: int, rng: np.random.Generator
) -> np.ndarray:
    """``n_boot`` values of ``statistic`` over two-stage resamples: repeats, then steps within each.

    Repeats of unequal length are padded with NaN; a resampled repeat keeps its own length, so
    the statistic always sees the same amount of data as the original.
    """
    lengths = np.array([r.size for r in repeats])
    padded = np.full((len(repeats), lengths.max()), np.nan)
    for i, r in enumerate(repeats):
        padded[i, : r.size] = r
    ragged = lengths.min() != lengths.max()
    reduce = (_NAN_STATISTICS if ragged else STATISTICS)[statistic]
    n_rep, width = padded.shape
    chunk = max(1, _CHUNK_ELEMENTS // (n_rep * width))
    out = np.empty(n_boot)
    for start in range(0, n_boot, chunk):
        b = min(chunk, n_boot - start)
        picked = rng.integers(n_rep, size=(b, n_rep))  # stage 1: which repeats
        picked_len = lengths[picked][..., None]
        steps = (rng.random((b, n_rep, width)) * picked_len).astype(int)  # stage 2: which steps
        drawn = padded[picked[..., None], steps]
        if ragged:
            drawn[np.arange(width) >= picked_len] = np.nan  # a short repeat contributes only its length
        out[start : start + b] = reduce(drawn.reshape(b, n_rep * width))
    return out


def bootstrap_ratio(
    baseline: Sequence[Sequence[float]],
    candidate: Sequence[Sequence[float]],
    *,
    statistic: str = "median",
    confidence: float = 0.95,
    n_boot: int = 2000,
    seed: int | np.random.Generator | None = 0,
) -> RatioEstimate:
    """Ratio candidate/baseline of ``statistic`` over the pooled samples, with a percentile CI.

    ``baseline`` and ``candidate`` are lists of repeats, each a list of per-step samples (a repeat
    may hold a single value, e.g. a peak-memory figure). Each bootstrap draw resamples repeats
    with replacement, then steps with replacement within every drawn repeat, on both sides
    independently. With one sample per side the interval collapses to the point estimate: there
    is no noise estimate to widen it. Raises ValueError for an unknown statistic or a side without
    finite samples, ZeroDivisionError when the baseline statistic is 0.
    """
    _check_statistic(statistic)
    base, cand = _as_repeats(baseline), _as_repeats(candidate)
    reduce = STATISTICS[statistic]
    base_value = float(reduce(np.concatenate(base)))
    cand_value = float(reduce(np.concatenate(cand)))
    if base_value == 0:
        raise ZeroDivisionError(f"baseline {statistic} is 0: the ratio is undefined")
    ratio = cand_value / base_value
    rng = np.random.default_rng(seed)
    boot = _bootstrap_statistic(cand, statistic, n_boot, rng) / _bootstrap_statistic(base, statistic, n_boot, rng)
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(boot, [tail, 100.0 - tail])
    # the percentile interval of a skewed bootstrap can miss the point estimate by a hair
    return RatioEstimate(baseline=base_value, candidate=cand_value, ratio=ratio, low=float(min(low, ratio)),
                         high=float(max(high, ratio)), confidence=confidence)


def mean_interval(values: Sequence[float], confidence: float = 0.95, n_boot: int = 2000,
                  seed: int = 0) -> tuple[float, float]:
    """A percentile bootstrap interval of the mean of a few independent values (one per process)."""
    sample = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    means = sample[rng.integers(0, sample.size, (n_boot, sample.size))].mean(axis=1)
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(means, [tail, 100.0 - tail])
    return float(low), float(high)


def mann_whitney_p(baseline: Sequence[float], candidate: Sequence[float]) -> float:
    """Two-sided Mann-Whitney U p-value of two pooled samples (NaN if a side has < 2 samples).

    It treats every sample as independent, so pass pooled steady-state steps; it answers "do the
    two sides differ at all", not "by how much".
    """
    a = np.asarray(baseline, dtype=float)
    b = np.asarray(candidate, dtype=float)
    a, b = a[np.isfinite(a)], b[np.isfinite(b)]
    if a.size < 2 or b.size < 2:
        return float("nan")
    if np.ptp(np.concatenate([a, b])) == 0:
        return 1.0  # identical constants: scipy would warn and return NaN
    from scipy import stats  # a second to import: workers import this module for the CV alone

    return float(stats.mannwhitneyu(a, b, alternative="two-sided").pvalue)


def mann_whitney_floor(n: int, m: int) -> float:
    """The smallest two-sided p-value Mann-Whitney can give for sample sizes ``n`` and ``m``
    (complete separation): with 3 vs 3 samples it is 0.1, so such a test can never reject at 0.05."""
    if not (n and m):
        return 1.0
    # in log space: pytest-benchmark's thousands of rounds make comb() too large for a float
    log_comb = math.lgamma(n + m + 1) - math.lgamma(n + 1) - math.lgamma(m + 1)
    return min(1.0, math.exp(math.log(2.0) - log_comb))


def _robust_noise(values: np.ndarray) -> float:
    """Noise standard deviation from successive differences (a step shows up as one outlier)."""
    if values.size < 3:
        return 0.0
    diffs = np.diff(values)
    mad = np.median(np.abs(diffs - np.median(diffs)))
    return float(1.4826 * mad / np.sqrt(2.0))


def change_points(
    values: Sequence[float], *, min_relative_step: float = 0.05, z: float = 3.0, min_size: int = 1
) -> list[int]:
    """Indices where the mean of ``values`` steps to a new level (index of the first new value).

    Binary segmentation: split a segment where the split explains the most variance (largest
    ``nL*nR/n * (meanL - meanR)^2``), keep the split when the step is at least
    ``min_relative_step`` of the left mean AND at least ``z`` standard errors of the series'
    noise (estimated robustly from successive differences), then recurse into both halves.
    ``min_size`` is the shortest segment allowed; with 1, a one-off spike shows as two change
    points (up, then down), and a regression in the newest run can be flagged at once.
    """
    x = np.asarray(values, dtype=float)
    if np.isnan(x).any():
        raise ValueError("change_points: the series holds NaN; drop missing runs first")
    sigma = _robust_noise(x)
    found: list[int] = []

    def split(lo: int, hi: int) -> None:
        n = hi - lo
        if n < 2 * min_size:
            return
        seg = x[lo:hi]
        cuts = np.arange(min_size, n - min_size + 1)
        csum = np.cumsum(seg)
        left_mean = csum[cuts - 1] / cuts
        right_mean = (csum[-1] - csum[cuts - 1]) / (n - cuts)
        gain = cuts * (n - cuts) / n * (left_mean - right_mean) ** 2
        best = int(np.argmax(gain))
        k, step, base = int(cuts[best]), right_mean[best] - left_mean[best], left_mean[best]
        large = abs(step) >= min_relative_step * abs(base)
        clear = abs(step) > z * sigma * np.sqrt(1.0 / k + 1.0 / (n - k))
        if large and clear:
            found.append(lo + k)
            split(lo, lo + k)
            split(lo + k, hi)

    split(0, x.size)
    return sorted(found)
