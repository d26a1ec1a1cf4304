"""MFU: one peak per GPU model, in the report as in compare, gate and history; and which peak a
device's name gets."""

import pytest

from benchbay.analysis.compare import compare
from benchbay.analysis.frame import records_to_frame
from benchbay.analysis.gate import gate
from benchbay.analysis.history import history
from benchbay.analysis.mfu import lookup_peak, peak_flops_for
from benchbay.analysis.tables import point_summary
from tests.test_gate import run_records

FLOPS = 3e14  # per sample


def _run(seed: int, peak: float, run_id: str, *, with_flops: bool = True, **kwargs) -> list[dict]:
    """A run of one H200 whose records hold the peak its own probe measured, as the committed
    wallx-frontier runs do (799, 663 and 658 TFLOP/s)."""
    records = run_records(seed, repeats=3, run_id=run_id, **kwargs)
    for record in records:
        metrics = record["metrics"]
        metrics["peak_flops"] = peak
        metrics["mfu"] = FLOPS * metrics["samples_per_s_per_gpu"] / peak
        if with_flops:
            metrics["flops_per_sample"] = FLOPS
    return records


@pytest.mark.parametrize("with_flops", [True, False], ids=["flops recorded", "mfu and its peak only"])
def test_gate_and_compare_judge_mfu_over_one_peak_per_gpu_as_the_report_shows_it(with_flops):
    """The same speed recorded over two probes' peaks read 'MFU -18%' and failed mfu:5% (review)."""
    base = records_to_frame(_run(1, 6.58e14, "b", with_flops=with_flops))
    cand = records_to_frame(_run(2, 7.99e14, "c", with_flops=with_flops))
    result = gate(base, cand, ["mfu:5%", "samples_per_s_per_gpu:5%"])
    assert result.exit_code == 0 and set(result.checks["verdict"]) == {"no change"}
    table = compare(base, cand, metrics=("samples_per_s_per_gpu", "mfu")).set_index(["point", "metric"])
    shown = point_summary(base).set_index("label")["mfu"]
    for point in ("baseline", "+compile"):
        assert table.loc[(point, "mfu"), "ratio"] == pytest.approx(table.loc[(point, "samples_per_s_per_gpu"), "ratio"])
        assert table.loc[(point, "mfu"), "baseline"] == pytest.approx(shown[point])


def test_history_sees_no_change_in_mfu_where_only_the_recorded_peak_moved():
    peaks = [6.58e14, 7.99e14, 6.63e14, 7.99e14, 6.58e14, 6.63e14]
    runs = [r for i, peak in enumerate(peaks)
            for r in _run(i, peak, f"run{i}", started_at=f"2026-11-{10 + i:02d}T00:00:00+00:00",
                          env={"git_commit": f"commit{i}"})]
    table = history(records_to_frame(runs), "mfu")
    assert not table["change_point"].any()
    per_point = table.groupby("point")["value"]
    assert (per_point.max() / per_point.min()).max() < 1.05  # over 799 vs 658, it would be 21% apart


@pytest.mark.parametrize("device, flops", [
    ("NVIDIA H100 NVL", 835.5e12),  # not the SXM's 989
    ("NVIDIA H100 PCIe", 756e12),
    ("NVIDIA H100 80GB HBM3", 989e12),
    ("NVIDIA GH200 480GB", 989e12),  # not the H200's sustained 698
    ("NVIDIA GH200 144G HBM3e", 989e12),
    ("NVIDIA H200", 698e12),
    ("NVIDIA H200 NVL", 835.5e12),
    ("NVIDIA A100-SXM4-80GB", 312e12),
    ("NVIDIA RTX PRO 6000 Blackwell Server Edition", 500e12),
])
def test_a_device_name_gets_its_own_models_peak(device, flops):
    assert peak_flops_for(device) == flops


def test_a_name_that_only_contains_a_listed_one_is_not_that_model():
    assert lookup_peak("NVIDIA RTX A1000") is None  # holds "A100"
    assert lookup_peak("NVIDIA H2000") is None
    assert lookup_peak(None) is None and lookup_peak("") is None
    gh200 = records_to_frame(_run(1, 7.99e14, "b", env={"gpu": "NVIDIA GH200 480GB"}))
    assert set(point_summary(gh200)["mfu_peak"]) == {"989 TFLOP/s (datasheet)"}
