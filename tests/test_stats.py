"""benchbay.analysis.stats: bootstrap ratio with repeat structure, Mann-Whitney, CV, change points."""

import numpy as np
import pytest

from benchbay.analysis.stats import (
    STATISTICS,
    bootstrap_ratio,
    change_points,
    coefficient_of_variation,
    mann_whitney_floor,
    mann_whitney_p,
)
from benchbay.collect.timing import summarize


def noisy(rng, level, n, cv):
    return level * (1 + rng.normal(0, cv, n))


def test_coefficient_of_variation():
    assert coefficient_of_variation([2.0, 2.0, 2.0]) == 0.0
    assert coefficient_of_variation([1.0, 3.0]) == pytest.approx(np.std([1.0, 3.0], ddof=1) / 2.0)
    assert np.isnan(coefficient_of_variation([1.0]))


def test_ratio_of_medians_and_interval_cover_the_true_change():
    rng = np.random.default_rng(0)
    base = [noisy(rng, 1.0, 40, 0.02) for _ in range(3)]
    cand = [noisy(rng, 1.1, 40, 0.02) for _ in range(3)]
    est = bootstrap_ratio(base, cand)
    assert est.ratio == pytest.approx(np.median(np.concatenate(cand)) / np.median(np.concatenate(base)))
    assert est.baseline == pytest.approx(np.median(np.concatenate(base)))
    assert est.low < 1.1 < est.high
    assert est.excludes_one
    assert est.confidence == 0.95


def test_same_seed_same_interval():
    rng = np.random.default_rng(1)
    base, cand = [noisy(rng, 1.0, 30, 0.02)], [noisy(rng, 1.0, 30, 0.02)]
    assert bootstrap_ratio(base, cand, seed=7) == bootstrap_ratio(base, cand, seed=7)


def test_disagreeing_repeats_widen_the_interval():
    """Resampling repeats first: three repeats at different levels are not 3x the evidence."""
    rng = np.random.default_rng(2)
    levels = (0.95, 1.0, 1.05)
    base = [noisy(rng, lv, 30, 0.005) for lv in levels]
    cand = [noisy(rng, lv, 30, 0.005) for lv in levels]
    nested = bootstrap_ratio(base, cand)
    flat = bootstrap_ratio([np.concatenate(base)], [np.concatenate(cand)])
    assert nested.high - nested.low > 2 * (flat.high - flat.low)


def test_ragged_repeats_and_single_values():
    rng = np.random.default_rng(3)
    est = bootstrap_ratio([noisy(rng, 1.0, 10, 0.01), noisy(rng, 1.0, 25, 0.01)], [noisy(rng, 2.0, 17, 0.01)])
    assert est.ratio == pytest.approx(2.0, rel=0.02)
    assert est.low > 1.9
    one = bootstrap_ratio([[10.0]], [[10.5]])  # e.g. one peak-memory figure per side
    assert (one.ratio, one.low, one.high) == pytest.approx((1.05, 1.05, 1.05))
    assert one.excludes_one


@pytest.mark.parametrize("statistic", sorted(STATISTICS))
def test_every_statistic(statistic):
    rng = np.random.default_rng(4)
    est = bootstrap_ratio([noisy(rng, 1.0, 30, 0.01)] * 2, [noisy(rng, 1.5, 30, 0.01)] * 2, statistic=statistic,
                          n_boot=200)
    assert est.ratio == pytest.approx(1.5, rel=0.05)


def test_bad_inputs():
    with pytest.raises(ValueError, match="unknown statistic 'avg'"):
        bootstrap_ratio([[1.0]], [[1.0]], statistic="avg")
    with pytest.raises(ValueError, match="no finite samples"):
        bootstrap_ratio([[np.nan]], [[1.0]])
    with pytest.raises(ZeroDivisionError, match="baseline median is 0"):
        bootstrap_ratio([[0.0]], [[1.0]])


def test_mann_whitney():
    rng = np.random.default_rng(5)
    a, b = noisy(rng, 1.0, 50, 0.02), noisy(rng, 1.1, 50, 0.02)
    assert mann_whitney_p(a, b) < 1e-6
    assert mann_whitney_p([1.0, 1.0], [1.0, 1.0]) == 1.0
    assert np.isnan(mann_whitney_p([1.0], [1.0, 2.0]))


def test_mann_whitney_floor():
    assert mann_whitney_floor(3, 3) == pytest.approx(0.1)  # 3 vs 3 can never reach p < 0.05
    assert mann_whitney_floor(4, 4) < 0.05
    assert mann_whitney_floor(0, 5) == 1.0


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


def test_a_records_cv_is_the_sample_cv_of_its_steps():
    times = [1.0, 1.1, 0.9, 1.05]
    assert summarize(times)["step_time_cv"] == pytest.approx(coefficient_of_variation(times))
    assert summarize([1.0])["step_time_cv"] is None  # one step has no spread to speak of
