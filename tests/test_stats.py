"""benchbay.analysis.stats: the process as the unit (per-process values, the pooled t-test on logs,
the repeats a test needs), CV, change points."""

import statistics

import numpy as np
import pytest
from scipy import stats as scipy_stats

from benchbay.analysis.stats import (
    SIZING_MARGIN,
    coefficient_of_variation,
    find_change_points,
    log_spread,
    mean_interval,
    per_process,
    ratio_test,
    repeats_needed,
)
from benchbay.collect.timing import summarize


def change_points(values, **options):
    return [c.index for c in find_change_points(values, **options)]


def noisy(rng, level, n, cv):
    return level * (1 + rng.normal(0, cv, n))


def test_coefficient_of_variation():
    assert coefficient_of_variation([2.0, 2.0, 2.0]) == 0.0
    assert coefficient_of_variation([1.0, 3.0]) == pytest.approx(np.std([1.0, 3.0], ddof=1) / 2.0)
    assert np.isnan(coefficient_of_variation([1.0]))


def test_bad_inputs():
    with pytest.raises(ValueError, match="unknown statistic 'avg'"):
        per_process([[1.0]], "avg")
    with pytest.raises(ValueError, match="no finite samples"):
        per_process([[np.nan]], "median")


def processes(rng, level, n, between, steps=30, within=0.01):
    """``n`` processes of ``steps`` steps: each process's level off by ``between`` (CV), its steps by ``within``."""
    return [level * (1 + rng.normal(0, between)) * (1 + rng.normal(0, within, steps)) for _ in range(n)]


def test_one_value_per_process_and_the_floor_its_steps_set():
    steps = [[1.0, 2.0, 4.0], [3.0, 3.0]]
    values, floor = per_process(steps, "median")
    assert list(values) == [2.0, 3.0]
    # only the first process has a spread: var(log steps) / steps, by hand, averaged over the processes
    assert floor == pytest.approx(statistics.variance([0.0, np.log(2), np.log(4)]) / 3 / 2)


def test_ratio_test_is_the_pooled_t_test_of_the_log_process_values():
    rng = np.random.default_rng(10)
    base, cand = rng.lognormal(0.0, 0.2, 4), rng.lognormal(0.3, 0.2, 5)
    test = ratio_test(base, cand)
    reference = scipy_stats.ttest_ind(np.log(cand), np.log(base), equal_var=True)
    assert test.p_value == pytest.approx(reference.pvalue)
    assert test.df == 7 and test.ratio == pytest.approx(np.exp(np.log(cand).mean() - np.log(base).mean()))
    ci = reference.confidence_interval(0.95)
    assert (test.low, test.high) == pytest.approx((np.exp(ci.low), np.exp(ci.high)))
    assert test.excludes_one == (test.p_value < 0.05)


def test_steps_are_not_samples_of_the_noise_between_processes():
    """Three processes a side, 30% apart from one another, steps within 1% inside each: the pooled steps
    look decisive, the processes say nothing."""
    rng = np.random.default_rng(11)
    base, cand = processes(rng, 1.0, 3, 0.3), processes(rng, 1.0, 3, 0.3)
    flat_p = scipy_stats.ttest_ind(np.concatenate(base), np.concatenate(cand)).pvalue
    test = ratio_test(per_process(base, "median")[0], per_process(cand, "median")[0])
    assert flat_p < 1e-3 and not test.excludes_one and test.p_value > 0.05


def test_earlier_runs_lend_their_spread_and_one_process_a_side_has_none():
    assert not ratio_test([1.0], [1.5]).known  # nothing says how far processes spread
    exact = ratio_test([1.0], [1.5], exact_when_unknown=True)  # a memory peak: it repeats exactly
    assert (exact.low, exact.high, exact.p_value) == (1.5, 1.5, 0.0)
    earlier = log_spread([[1.0, 1.01, 0.99], [2.0, 2.02]])  # two commits' processes, each around its own level
    assert earlier[1] == 3 and earlier[0] == pytest.approx(
        sum((x - np.mean(g)) ** 2 for g in (np.log([1.0, 1.01, 0.99]), np.log([2.0, 2.02])) for x in g))
    lent = ratio_test([1.0], [1.5], earlier=earlier)
    assert lent.df == 3 and lent.excludes_one
    # processes that agree exactly cannot claim more than their own noisy steps say
    assert not ratio_test([1.0, 1.0], [1.1, 1.1], floor=0.05).excludes_one


def test_repeats_needed_reach_their_power():
    """At the repeats it names, a simulated two-sided t-test on log process values (scipy) finds a
    change of its sizing margin's share about 95% of the time, one repeat fewer less often, and the
    whole change nearly always."""
    rng = np.random.default_rng(12)
    sd, change = 0.2, 0.25
    n = repeats_needed(sd, change)

    def power(k: int, found: float = change * SIZING_MARGIN) -> float:
        base = rng.normal(0.0, sd, (4000, k))
        cand = rng.normal(np.log1p(found), sd, (4000, k))
        return float((scipy_stats.ttest_ind(cand, base, axis=1).pvalue < 0.05).mean())

    assert power(n) >= 0.94 and power(n - 1) < power(n) and power(n, change) >= 0.99
    assert repeats_needed(0.3, 0.05) > repeats_needed(0.3, 0.25) > repeats_needed(0.01, 0.25)
    assert repeats_needed(0.0, 0.05) == 2 and repeats_needed(0.0, 0.05, earlier_df=4) == 1
    with pytest.raises(ValueError, match="must be > 0"):
        repeats_needed(0.1, 0.0)


def test_change_points_find_steps_and_ignore_noise():
    rng = np.random.default_rng(6)
    flat = noisy(rng, 1.0, 30, 0.01)
    assert change_points(flat) == []
    stepped = np.concatenate([noisy(rng, 1.0, 12, 0.01), noisy(rng, 1.15, 10, 0.01), noisy(rng, 1.0, 8, 0.01)])
    assert change_points(stepped) == [12, 22]
    small = np.concatenate([noisy(rng, 1.0, 12, 0.002), noisy(rng, 1.02, 12, 0.002)])
    assert change_points(small) == []  # real but under min_relative_step
    assert change_points(small, min_relative_step=0.01) == [12]


def test_change_point_in_the_newest_run_and_constant_series():
    assert change_points([1.0, 1.0, 1.0, 1.0, 1.2]) == [4]
    assert change_points([1.0]) == []
    with pytest.raises(ValueError, match="NaN"):
        change_points([1.0, np.nan])
    with pytest.raises(ValueError, match="<= 0"):
        change_points([1.0, 0.0])


@pytest.mark.parametrize("series, expected", [
    ([1.0, 1.01, 0.56], [2]),  # -44% in the newest of three runs
    ([1.0, 0.99, 1.72], [2]),  # +72%
    ([1.0, 1.01, 0.99, 0.56, 0.57, 0.96, 0.97, 0.86, 0.85], [3, 5, 7]),  # -44%, +72%, -11%
    ([1.0, 0.99, 1.01, 0.89, 0.9, 0.88], [3]),  # -11% alone
])
def test_large_steps_are_flagged_as_small_ones_are(series, expected):
    """The noise is measured within the levels, never across the step itself: a short series flags
    a -44% or +72% step as a long one flags -11% (issue 53)."""
    assert change_points(series) == expected


def test_a_records_cv_is_the_sample_cv_of_its_steps():
    times = [1.0, 1.1, 0.9, 1.05]
    assert summarize(times)["step_time_cv"] == pytest.approx(statistics.stdev(times) / statistics.mean(times))
    assert summarize([1.0])["step_time_cv"] is None  # one step has no spread to speak of


def test_the_mean_of_a_few_processes_has_a_t_interval_wider_than_their_range():
    """A percentile bootstrap of 3 values is their [min, max] at best: far too narrow (review)."""
    values = [10.0, 10.4, 10.2]
    low, high = mean_interval(values)
    half = scipy_stats.t.ppf(0.975, 2) * np.std(values, ddof=1) / np.sqrt(3)
    assert (low, high) == pytest.approx((10.2 - half, 10.2 + half))
    assert low < min(values) and high > max(values)
    assert mean_interval([5.0, 5.0]) == (5.0, 5.0)
    with pytest.raises(ValueError, match="two or more"):
        mean_interval([5.0])
    # it covers the true mean as often as it says
    rng = np.random.default_rng(0)
    covered = sum(lo <= 1.0 <= hi for lo, hi in (mean_interval(rng.normal(1.0, 0.05, 3)) for _ in range(400)))
    assert 0.92 <= covered / 400 <= 0.98
