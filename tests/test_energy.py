import pytest

from benchbay.collect import nvml
from benchbay.collect.energy import EnergyMeter, cost_per_million_samples


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
    figures = meter.metrics(samples=8)
    assert figures["energy_j_per_sample"] == 0.5 and figures["energy_watts"] > 0
    assert meter.note() == {"energy_source": "rapl"}


def test_unreadable_rapl_is_absent_and_said(tmp_path):
    meter = EnergyMeter(None, rapl_root=tmp_path / "none")
    meter.start()
    meter.stop()
    assert meter.metrics(samples=4) == {}
    assert "RAPL" in meter.note()["energy_absent"]


def test_nvml_counter(monkeypatch):
    readings = iter([10_000.0, 70_000.0])  # millijoules: 60 J
    monkeypatch.setattr(nvml, "total_energy_mj", lambda index: next(readings))
    meter = EnergyMeter(0)
    meter.start()
    meter.stop()
    assert meter.metrics(samples=30)["energy_j_per_sample"] == 2.0


def test_cost_per_million_samples():
    # 100 samples/s: 1e6 samples take 10,000 s, 2.78 GPU-hours at 3.6 an hour
    assert abs(cost_per_million_samples(100.0, 3.6) - 10.0) < 1e-9


def test_gemm_probe_is_measured_once_per_machine_key(tmp_path, monkeypatch):
    import torch

    from benchbay.collect import gemm_probe

    figure = gemm_probe.measured_tflops(torch.device("cpu"), "key1", tmp_path, seconds=0.05, side=64)
    assert figure["gemm_tflops"] > 0 and figure["gemm_dtype"] == "fp32"
    monkeypatch.setattr(gemm_probe, "probe", lambda *a, **k: pytest.fail("probed again"))
    assert gemm_probe.measured_tflops(torch.device("cpu"), "key1", tmp_path) == figure
