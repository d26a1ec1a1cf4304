import json

import pytest

from benchbay.analysis.diff import diff, family, profiled_record, write_diff
from benchbay.cli import main


def _record(label, step, backward, gemm, gpu="H200", spread=0.001):
    times = [step + spread * ((i % 3) - 1) for i in range(12)]
    return {"label": label, "suite": "s-profile", "run_id": label, "status": "ok", "workload": "toy",
            "world_size": 1, "env": {"gpu": gpu}, "metrics": {"warmup_steps": 2},
            "series": {"step_times_s": [5.0, 1.0, *times]},
            "extra": {"phases": {"forward": 0.02, "backward": backward, "optimizer": 0.01},
                      "idle_gap_share": 0.0,
                      "profile_top_ops": [{"name": "sm90_xmma_gemm_bf16", "time_s": gemm},
                                          {"name": "triton_poi_fused_add_0", "time_s": 0.0101},
                                          {"name": "other", "time_s": 0.005}]}}


def _run(tmp_path, record):
    run = tmp_path / record["label"]
    run.mkdir()
    (run / "records.jsonl").write_text(json.dumps(record) + "\n")
    return run


def test_change_is_explained_by_its_phase_and_family_and_noise_is_not_a_cause():
    d = diff(_record("a", 0.10, 0.05, 0.04), _record("b", 0.13, 0.08, 0.07))
    rows = {(r["kind"], r["name"]): r for r in d.rows}
    backward, gemm = rows[("phase", "backward")], rows[("op family", "gemm")]
    assert backward["cause"] and backward["delta_s"] == pytest.approx(0.03)
    assert backward["share"] == pytest.approx(1.0)
    assert gemm["cause"] and gemm["share"] == pytest.approx(1.0)
    assert not rows[("phase", "forward")]["cause"]  # no change
    assert d.noise_s > 0
    assert d.rows[0]["name"] == "backward"  # the largest phase change first


def test_incomparable_points_are_refused_unless_forced():
    a, b = _record("a", 0.1, 0.05, 0.04), _record("b", 0.1, 0.05, 0.04, gpu="A100")
    with pytest.raises(ValueError, match="GPU: H200 vs A100"):
        diff(a, b)
    assert diff(a, b, force=True).incomparable == ["GPU: H200 vs A100"]


def test_families():
    assert family("ampere_bf16_s16816gemm_relu") == "gemm"
    assert family("flash_fwd_kernel") == "attention"
    assert family("ncclDevKernel_AllReduce") == "communication"
    assert family("aten::mm") == "gemm"


def test_cli_writes_markdown_html_and_plot(tmp_path, capsys):
    a = _run(tmp_path, _record("a", 0.10, 0.05, 0.04))
    b = _run(tmp_path, _record("b", 0.13, 0.08, 0.07))
    assert main(["diff", str(a), str(b), "--out", str(tmp_path / "out")]) == 0
    assert "| backward |" in capsys.readouterr().out
    assert {p.name for p in (tmp_path / "out").iterdir()} == {"diff.md", "diff.html", "diff_deltas.png"}
    assert profiled_record(a, None)["label"] == "a"
    with pytest.raises(ValueError, match="no ok profiled record"):
        profiled_record(a, "missing")
    assert write_diff(diff(profiled_record(a, None), profiled_record(b, None)), tmp_path / "o2").exists()
