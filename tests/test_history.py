"""History's change points: noise between runs is not a change, a real step still is."""

import numpy as np
import pytest

from benchbay.analysis.frame import records_to_frame
from benchbay.analysis.history import history
from benchbay.analysis.stats import find_change_points
from tests.test_gate import run_records


def _history(trial: int, runs: int, *, repeats: int = 1, step_at: int | None = None, step: float = 0.2):
    """Two points over ``runs`` runs, processes 5% apart (between-process sd), levels stepping by
    ``step`` from run ``step_at`` on."""
    records = []
    for i in range(runs):
        slowdown = step if step_at is not None and i >= step_at else 0.0
        records += run_records(1000 * trial + i, repeats=repeats, between=0.05, slowdown=slowdown, run_id=f"run{i}",
                               started_at=f"2026-11-{10 + i:02d}T00:00:00+00:00", env={"git_commit": f"commit{i}"})
    return history(records_to_frame(records), "step_time")


@pytest.mark.parametrize("repeats", [1, 2])
def test_noise_between_runs_is_rarely_a_change_point(repeats):
    """At z=3 over every stretch, with no correction, half of these series got one (review)."""
    flagged = series = 0
    for trial in range(30):
        for _, rows in _history(trial, 8, repeats=repeats).groupby("point"):
            series += 1
            flagged += bool(rows["change_point"].any())
    assert series == 60 and flagged <= 3


def test_a_planted_step_is_still_found_and_called_a_regression():
    found = series = 0
    for trial in range(10):
        for _, rows in _history(trial, 12, step_at=6).groupby("point"):
            series += 1
            at = rows[rows["git_commit"] == "commit6"].iloc[0]
            found += bool(at["change_point"] and at["verdict"] == "regression")
    assert found >= 0.8 * series


def test_a_change_point_says_the_corrected_level_it_was_found_at():
    rng = np.random.default_rng(3)
    values = np.exp(np.concatenate([rng.normal(0, 0.01, 10), rng.normal(0.2, 0.01, 10)]))
    (found,) = find_change_points(values)
    assert found.index == 10
    # 19 splits into a head and a tail, 171 stretches inside: the family's 5% over 190 splits
    assert found.alpha == pytest.approx(0.05 / (19 + 19 * 18 // 2))


def test_pure_noise_series_rarely_split():
    rng = np.random.default_rng(0)
    hits = sum(bool(find_change_points(np.exp(rng.normal(0, 0.05, 12)))) for _ in range(200))
    assert hits <= 10  # at most alpha = 5% of them, give or take the draw
    assert find_change_points([1.0, 1.3]) == []  # two values say nothing of the noise
