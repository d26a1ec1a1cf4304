"""compare and gate: a point whose candidate repeats mostly failed, and the cost row's reason."""

import re

import pytest

from benchbay.analysis.compare import compare
from benchbay.analysis.failed_repeats import failed_repeats
from benchbay.analysis.frame import records_to_frame
from benchbay.analysis.gate import gate
from tests.test_gate import run_records


def _failing(records: list[dict], label: str, repeats: set[int], status: str = "oom",
             reason: str = "CUDA out of memory. Tried to allocate 2.00 GiB\nTraceback ...") -> list[dict]:
    for record in records:
        if record["label"] == label and record["repeat"] in repeats:
            record.update(status=status, reason=reason, metrics={}, series={"step_times_s": [], "losses": []})
    return records


def test_a_point_whose_candidate_repeats_mostly_failed_fails_the_gate_and_says_which():
    """Baseline 3 ok, candidate 1 ok and 2 OOM: the one ok repeat read 'no change', exit 0 (review)."""
    base = records_to_frame(run_records(1, repeats=3, run_id="b"))
    cand = records_to_frame(_failing(run_records(2, repeats=3, run_id="c"), "+compile", {1, 2}))
    result = gate(base, cand, ["step_time:median:5%", "peak_mem:2%"])
    assert result.exit_code == 1
    failed = result.checks[~result.checks["passed"]]
    assert set(failed["point"]) == {"+compile"} and set(failed["verdict"]) == {"failed"}
    said = "2 of 3 candidate repeats failed (repeats 1, 2: oom, CUDA out of memory. Tried to allocate 2.00 GiB) " \
           "against 0 of 3 in the baseline"
    assert set(failed["reason"]) == {said}
    assert "#### Regressions" in result.markdown and said in result.markdown
    table = compare(base, cand, metrics=("step_time",)).set_index("point")
    assert table.loc["+compile", "verdict"] == "failed" and table.loc["+compile", "regression"]
    assert table.loc["baseline", "verdict"] != "failed"


def test_failures_the_baseline_shared_do_not_fail_the_point():
    base = records_to_frame(_failing(run_records(1, repeats=3, run_id="b"), "+compile", {2}))
    cand = records_to_frame(_failing(run_records(2, repeats=3, run_id="c"), "+compile", {0}, status="timeout",
                                     reason=None))
    assert gate(base, cand, ["step_time:median:5%"]).exit_code == 0  # 1 of 3 a side
    worse = records_to_frame(_failing(run_records(2, repeats=3, run_id="c"), "+compile", {0, 1}, status="timeout",
                                      reason=None))
    assert failed_repeats(base[base["label"] == "+compile"], worse[worse["label"] == "+compile"]) == \
        "2 of 3 candidate repeats failed (repeats 0, 1: timeout) against 1 of 3 in the baseline"


def test_a_batch_searchs_oom_probe_is_a_result_not_a_failed_repeat():
    base = records_to_frame(run_records(1, repeats=2, run_id="b"))
    records = _failing(run_records(2, repeats=2, run_id="c"), "+compile", {1})
    for record in records:
        record["extra"] = {"search_group": "g1"}
    assert failed_repeats(base, records_to_frame(records)) is None


def _interval(text: str) -> tuple[float, float]:
    low, high = re.search(r"\[([0-9.]+), ([0-9.]+)\]", text).groups()
    return float(low), float(high)


def test_the_cost_rows_reason_states_the_interval_its_row_shows():
    """The cost row showed [0.787, 1.58] beside a reason quoting the throughput's [0.634, 1.27] (review)."""
    base = records_to_frame(run_records(1, repeats=2, between=0.06, run_id="b"))
    cand = records_to_frame(run_records(7, repeats=2, between=0.06, slowdown=0.08, run_id="c"))
    table = compare(base, cand, metrics=("samples_per_s_per_gpu",), price_per_gpu_hour=3.0)
    unchanged = table[table["verdict"] == "not significant"]
    assert len(unchanged) == 2  # the +compile point's throughput and its cost
    for _, row in unchanged.iterrows():
        assert _interval(row["reason"]) == pytest.approx((row["ci_low"], row["ci_high"]), rel=2e-3)
    throughput, cost = unchanged["reason"]
    assert throughput != cost
