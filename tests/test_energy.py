"""Energy and cost per sample: the meter, the cost per 1M samples in tables, compare and the
breakdown, the suite's price key and the command line's; the GEMM probe."""

import math

import numpy as np
import pytest

from benchbay.analysis.breakdown import waterfall
from benchbay.analysis.compare import compare
from benchbay.analysis.cost import ABSENT, NO_PRICE, cost_notes, cost_per_million_samples, prices
from benchbay.analysis.frame import records_to_frame
from benchbay.analysis.tables import KEY_COLUMNS, point_summary, sweep_table
from benchbay.cli import main
from benchbay.collect import Window, nvml
from benchbay.collect.energy import EnergyMeter
from benchbay.suite import SuiteError, from_dict
from benchbay.suite.model import SuiteMeta
from tests.fixtures.records import record, write_run


def _zone(root, name, uj):
    zone = root / name
    zone.mkdir(parents=True, exist_ok=True)
    (zone / "energy_uj").write_text(str(uj))
    return zone


def test_rapl_packages_summed_and_sub_domains_left_out(tmp_path):
    a, b = _zone(tmp_path, "intel-rapl:0", 1_000_000), _zone(tmp_path, "intel-rapl:1", 2_000_000)
    _zone(tmp_path, "intel-rapl:0:0", 5_000_000)  # core, inside package 0: not counted twice
    meter = EnergyMeter(None, rapl_root=tmp_path)
    meter.start()
    (a / "energy_uj").write_text("3000000")
    (b / "energy_uj").write_text("4000000")  # 4 J in all
    meter.stop()
    figures = meter.figures(Window(samples=8))
    assert figures.metrics["energy_j_per_sample"] == 0.5 and figures.metrics["energy_watts"] > 0
    assert figures.extra == {"energy_source": "rapl"}


def test_unreadable_rapl_is_absent_and_said(tmp_path):
    meter = EnergyMeter(None, rapl_root=tmp_path / "none")
    meter.start()
    meter.stop()
    figures = meter.figures(Window(samples=4))
    assert figures.metrics == {} and "RAPL" in figures.extra["energy_absent"]


def test_nvml_counter(monkeypatch):
    readings = iter([10_000.0, 70_000.0])  # millijoules: 60 J
    monkeypatch.setattr(nvml, "total_energy_mj", lambda index: next(readings))
    meter = EnergyMeter(0)
    meter.start()
    meter.stop()
    assert meter.figures(Window(samples=30)).metrics["energy_j_per_sample"] == 2.0


def test_cost_per_million_samples():
    # 100 samples/s: 1e6 samples take 10,000 s, 2.78 GPU-hours at 3.6 an hour
    assert abs(cost_per_million_samples(100.0, 3.6) - 10.0) < 1e-9
    assert math.isnan(cost_per_million_samples(float("nan"), 3.6))  # no rate, no cost (never 0)


ENV = {"machine_key": "cpu-test", "gpu": None, "driver": None, "cuda": None, "torch": "2.11.0"}


def records(run_id="r", slowdown=0.0, energy=True, seed=0):
    """Two points of 4 samples a step, 3 repeats each; with ``energy``, the first point's joules
    per sample and watts (the second's meter could not read its counter)."""
    rng = np.random.default_rng(seed)
    out = []
    for label, step in (("base", 0.2), ("+fast", 0.1)):
        for repeat in range(3):
            times = step * (1 + slowdown) * (1 + rng.normal(0, 0.005, 30))
            metrics = {"step_time_s": float(np.median(times)), "warmup_steps": 0, "measured_steps": 30,
                       "samples_per_step": 4, "samples_per_s_per_gpu": 4 / float(np.mean(times))}
            extra = {"energy_absent": "RAPL (/sys/class/powercap) not readable here"}
            if energy and label == "base":
                metrics |= {"energy_j_per_sample": 2.0 * (1 + slowdown), "energy_watts": 40.0}
                extra = {"energy_source": "rapl"}
            out.append(record(suite="toy", run_id=run_id, point_id=label, label=label, repeat=repeat,
                              knobs={"opt": label}, metrics=metrics, series={"step_times_s": times.tolist()},
                              extra=extra, env=ENV))
    return out


def test_the_tables_cost_is_the_price_over_their_throughput_and_energy_is_shown_or_said_absent():
    summary = point_summary(records_to_frame(records()), price_per_gpu_hour=2.5)
    for _, point in summary.iterrows():
        assert point["samples_per_s_per_gpu"] == pytest.approx(4 / point["step_time_s"])
        assert point["cost_per_m_samples"] == pytest.approx(2.5 / 3600 / point["samples_per_s_per_gpu"] * 1e6)
    table = sweep_table(summary, KEY_COLUMNS).set_index("name")
    assert {"cost_per_m_samples", "energy_j_per_sample", "energy_watts"} <= set(table.columns)
    assert table.loc["base", "energy_j_per_sample"] == pytest.approx(2.0)
    assert table.loc["+fast", "energy_j_per_sample"] == ABSENT == table.loc["+fast", "energy_watts"]
    assert cost_notes(summary) == ["cost per 1M samples at 2.5 per GPU-hour (in the price's currency), "
                                   "over samples/s/GPU"]


def test_without_a_price_or_energy_the_columns_are_left_out_and_said_absent():
    summary = point_summary(records_to_frame(records(energy=False)))
    assert summary["cost_per_m_samples"].isna().all()
    table = sweep_table(summary, KEY_COLUMNS)
    assert not {"cost_per_m_samples", "energy_j_per_sample", "energy_watts"} & set(table.columns)
    assert cost_notes(summary) == [NO_PRICE, "energy per sample: absent (RAPL (/sys/class/powercap) not "
                                               "readable here)"]


def test_prices_per_suite_and_the_override():
    assert prices({"a": SuiteMeta(name="a", price_per_gpu_hour=2), "b": SuiteMeta(name="b")}) == {"a": 2.0}
    assert prices({"a": SuiteMeta(name="a", price_per_gpu_hour=2)}, 3.0) == 3.0
    summary = point_summary(records_to_frame(records()), price_per_gpu_hour={"other": 1.0})
    assert summary["cost_per_m_samples"].isna().all()  # a price of another suite only
    for bad in (0, -1, "2", float("nan"), float("inf"), True):
        with pytest.raises(ValueError, match="price per GPU-hour > 0"):
            prices({"a": SuiteMeta.from_raw({"price_per_gpu_hour": bad})})  # a stored manifest is not trusted
    with pytest.raises(ValueError, match="--price-per-gpu-hour"):
        prices({}, -2.0)


def test_the_suite_key_is_typed_and_validated():
    raw = {"name": "s", "workload": "tests.fixtures.tinywork:Tiny"}
    assert from_dict({**raw, "price_per_gpu_hour": 2.5}).price_per_gpu_hour == 2.5
    assert from_dict(raw).price_per_gpu_hour is None
    for bad in (-1, 0, "two", True):
        with pytest.raises(SuiteError, match="price_per_gpu_hour"):
            from_dict({**raw, "price_per_gpu_hour": bad})


def test_compare_gives_each_point_its_cost_from_its_throughput_and_its_energy():
    table = compare(records_to_frame(records()), records_to_frame(records("c", slowdown=0.1, seed=1)),
                    price_per_gpu_hour=2.5)
    base = table[table["point"] == "base"].set_index("metric")
    rate, cost = base.loc["samples_per_s_per_gpu"], base.loc["cost_per_m_samples"]
    for side in ("baseline", "candidate"):
        assert cost[side] == pytest.approx(2.5 / 3600 / rate[side] * 1e6)
    assert cost["ratio"] == pytest.approx(1 / rate["ratio"])
    assert cost["ci_low"] == pytest.approx(1 / rate["ci_high"]) and cost["ci_high"] == pytest.approx(1 / rate["ci_low"])
    assert rate["verdict"] == "slower" and cost["verdict"] == "costlier" and cost["regression"]
    assert base.loc["energy_per_sample", "verdict"] == "more energy"
    assert base.loc["energy_per_sample", "ratio"] == pytest.approx(1.1)
    assert base.loc["power", "verdict"] == "no change"
    fast = table[table["point"] == "+fast"].set_index("metric")
    assert "energy_per_sample" not in fast.index  # neither side has it
    assert "cost_per_m_samples" not in set(compare(records_to_frame(records()), records_to_frame(records()))["metric"])


def test_the_breakdown_carries_cost_and_energy():
    summary = point_summary(records_to_frame(records()), price_per_gpu_hour=2.5)
    table = waterfall(summary, ["base", "+fast"]).set_index("label")
    assert table.loc["+fast", "cost_per_m_samples"] == pytest.approx(
        2.5 / 3600 / table.loc["+fast", "samples_per_s_per_gpu"] * 1e6)
    assert table.loc["base", "energy_watts"] == 40.0 and table.loc["+fast", "energy_watts"] == ABSENT
    assert "energy_j_per_sample" not in waterfall(point_summary(records_to_frame(records(energy=False))),
                                                  ["base", "+fast"])


def _store(root, run_id, price=None, **kwargs):
    suite = {"name": "toy"} | ({"price_per_gpu_hour": price} if price is not None else {})
    return write_run(root, records(run_id, **kwargs), {"suite_as_run": suite})


def test_show_report_and_compare_take_the_suites_price_or_the_command_lines(tmp_path, capsys):
    a, b = _store(tmp_path, "r1", price=3.6), _store(tmp_path, "r2", slowdown=0.1, seed=1)
    assert main(["show", str(a)]) == 0
    out = capsys.readouterr().out
    assert "cost / 1M samples" in out and "J/sample" in out and "W/device" in out and "absent" in out
    assert main(["show", str(b)]) == 0
    assert NO_PRICE in capsys.readouterr().out
    assert main(["show", str(b), "--price-per-gpu-hour", "1.5"]) == 0
    assert "cost / 1M samples" in capsys.readouterr().out
    assert main(["compare", str(b), str(a)]) == 0  # the candidate's suite has a price
    assert "cost_per_m_samples" in capsys.readouterr().out
    assert main(["compare", str(a), str(b)]) == 0
    assert NO_PRICE in capsys.readouterr().out
    plain = _store(tmp_path, "r3", energy=False)
    assert main(["compare", str(plain), str(plain), "--price-per-gpu-hour", "2"]) == 0
    out = capsys.readouterr().out
    assert NO_PRICE not in out and "energy per sample: absent (RAPL" in out
    assert main(["report", str(a), "--out", str(tmp_path / "report")]) == 0
    assert "cost / 1M samples" in (tmp_path / "report" / "report.md").read_text()
    assert main(["show", str(a), "--price-per-gpu-hour", "-1"]) == 2
    assert "--price-per-gpu-hour: a price per GPU-hour > 0, got -1.0" in capsys.readouterr().err


def test_gemm_probe_is_measured_once_per_machine_key(tmp_path, monkeypatch):
    import torch

    from benchbay.collect import gemm_probe

    figure = gemm_probe.measured_tflops(torch.device("cpu"), "key1", tmp_path, seconds=0.05, side=64)
    assert figure["gemm_tflops"] > 0 and figure["gemm_dtype"] == "fp32"
    monkeypatch.setattr(gemm_probe, "probe", lambda *a, **k: pytest.fail("probed again"))
    assert gemm_probe.measured_tflops(torch.device("cpu"), "key1", tmp_path) == figure


def test_the_ceiling_is_read_from_the_cache_probed_in_a_child_and_absent_on_cpu_said(tmp_path, monkeypatch):
    import subprocess

    from benchbay.collect import env, gemm_probe

    assert "no GPU" in env.fingerprint()["gemm_absent"]  # this CPU machine: no probe, said so
    failed = gemm_probe.ceiling("no-cuda-here", True, tmp_path)  # a real child, which finds no CUDA
    assert failed["gemm_absent"].startswith("the GEMM probe failed: ")
    (tmp_path / "gemm-h200.json").write_text('{"gemm_tflops": 812.5, "gemm_dtype": "bf16"}')
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("probed although cached"))
    assert gemm_probe.ceiling("h200", True, tmp_path) == {"gemm_tflops": 812.5, "gemm_dtype": "bf16"}


def test_every_mfu_names_its_peak_one_per_gpu_model_the_probe_only_where_the_table_lacks_it():
    from benchbay.analysis.mfu import datasheet_mfu_column, mfu_column, peak_flops_for, peak_label_column

    achieved = 4e14  # flops_per_sample x samples/s/GPU
    rows = records_to_frame([
        {"label": "unlisted", "env": {"gpu": "NVIDIA B300", "gemm_tflops": 800.0}},
        {"label": "h200", "env": {"gpu": "NVIDIA H200", "gemm_tflops": 660.0}, "metrics": {"peak_flops": 799e12}},
        {"label": "h100", "env": {"gpu": "NVIDIA H100 80GB HBM3", "gemm_tflops": 800.0}},
        {"label": "cpu", "env": {"gpu": None}},
    ]).assign(flops_per_sample=1e12, samples_per_s_per_gpu=400.0)
    assert list(mfu_column(rows).round(4)) == [0.5, round(achieved / 698e12, 4), round(achieved / 989e12, 4)] + [
        pytest.approx(float("nan"), nan_ok=True)]
    assert list(peak_label_column(rows)) == ["800 TFLOP/s (GEMM probe)", "698 TFLOP/s (table, sustained)",
                                             "989 TFLOP/s (datasheet)", ""]
    datasheet = datasheet_mfu_column(rows)
    assert datasheet[1] == pytest.approx(achieved / 989e12)
    assert datasheet[[0, 2, 3]].isna().all()  # no table entry, the measured MFU is already the datasheet's, none
    assert list(peak_label_column(rows, 5e14))[:3] == ["500 TFLOP/s (override)"] * 3
    assert peak_flops_for("NVIDIA H200", None, 812.5) == 698e12  # the runner's denominator: the model's
    assert peak_flops_for("NVIDIA B300", None, 812.5) == 812.5e12
    summary = point_summary(rows.assign(suite="s", point_id=rows["label"], status="ok", workload="w"))
    assert list(sweep_table(summary, KEY_COLUMNS)["mfu_peak"])[:3] == list(peak_label_column(rows))[:3]


def test_a_points_mfu_does_not_move_with_its_runs_probe():
    # one point measured on two H200 hosts whose GEMM probes differ (800 and 650 TFLOP/s): its figure
    # is its newest run's, its MFU over the one sustained peak of the H200, beside its datasheet MFU
    rows = records_to_frame([
        {"label": "p", "run_id": "a", "env": {"gpu": "NVIDIA H200", "gemm_tflops": 800.0}},
        {"label": "p", "run_id": "b", "env": {"gpu": "NVIDIA H200", "gemm_tflops": 650.0}},
    ]).assign(flops_per_sample=1e12, samples_per_s_per_gpu=400.0)
    summary = point_summary(rows.assign(suite="s", point_id="p", status="ok", workload="w")).iloc[0]
    assert summary["mfu_peak"] == "698 TFLOP/s (table, sustained)"
    assert summary["mfu"] == pytest.approx(4e14 / 698e12)
    assert summary["mfu_datasheet"] == pytest.approx(4e14 / 989e12)


def test_an_fp8_points_mfu_is_also_stated_over_the_fp8_peak_and_labelled():
    from benchbay.analysis.mfu import fp8_mfu_column

    rows = records_to_frame([
        {"label": "fp8", "knobs": {"float8": "tensorwise"}, "env": {"gpu": "NVIDIA H200"}},
        {"label": "bf16", "knobs": {"float8": "off"}, "env": {"gpu": "NVIDIA H200"}},
        {"label": "a100", "knobs": {"float8": "tensorwise"}, "env": {"gpu": "NVIDIA A100-SXM4-80GB"}},  # no FP8 peak
        {"label": "h100", "knobs": {"float8": "rowwise"}, "env": {"gpu": "NVIDIA H100 80GB HBM3"}},
    ]).assign(flops_per_sample=1e12, samples_per_s_per_gpu=400.0)
    fp8 = fp8_mfu_column(rows)
    assert fp8[0] == pytest.approx(4e14 / 1320e12) and fp8[3] == pytest.approx(4e14 / 1979e12)
    assert fp8[[1, 2]].isna().all()  # a bf16 point, and a card without FP8 tensor cores
    summary = point_summary(rows.assign(suite="s", point_id=rows["label"], status="ok", workload="w"))
    table = sweep_table(summary, KEY_COLUMNS)
    assert table.set_index("name")["mfu_fp8"]["fp8"] == pytest.approx(4e14 / 1320e12)
    assert table.set_index("name")["mfu"]["fp8"] == pytest.approx(4e14 / 698e12)  # beside it, over the bf16 peak
    from benchbay.report import DISPLAY_NAMES

    assert DISPLAY_NAMES["mfu_fp8"] == "MFU (trained, FP8 peak)"
    # the bf16 MFU's title names no kind of peak (a sustained one on an H200, the datasheet's on an H100):
    # the column beside it says which
    assert DISPLAY_NAMES["mfu"] == "MFU (trained)" and DISPLAY_NAMES["mfu_peak"] == "MFU's peak"
    from benchbay.analysis.mfu import fp8_peak_sources

    sources = fp8_peak_sources(summary)  # the report's footnote under that column: each card's FP8 peak
    assert list(sources) == ["NVIDIA H200", "NVIDIA H100 80GB HBM3"]
    assert sources["NVIDIA H200"].startswith("1,320 TFLOP/s (sustained: dense fp8")
    assert sources["NVIDIA H100 80GB HBM3"] == "1,979 TFLOP/s (NVIDIA H100 datasheet, SXM, dense fp8)"
