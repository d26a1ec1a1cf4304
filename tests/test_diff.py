import json
import re
import shlex

import numpy as np
import pytest

from benchbay.analysis.diff import diff, format_markdown, profiled_record, write_diff
from benchbay.cli import main
from benchbay.collect.op_family import family


def _record(label, step, backward, gemm, gpu="H200", spread=0.001):
    times = [step + spread * ((i % 3) - 1) for i in range(12)]
    return {"label": label, "point_id": label, "suite": "s-profile", "run_id": label, "status": "ok", "workload": "toy",
            "world_size": 1, "env": {"gpu": gpu}, "metrics": {"warmup_steps": 2},
            "series": {"step_times_s": [5.0, 1.0, *times]},
            "extra": {"phases": {"forward": 0.02, "backward": backward, "optimizer": 0.01},
                      "idle_gap_share": 0.0,
                      "profile_families": {"gemm": gemm, "triton (fused)": 0.0101, "other": 0.005}}}


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


def test_phases_that_move_apart_share_their_summed_changes_not_the_steps():
    """forward +6 ms and backward -4 ms of a step 2 ms slower: 60% and -40% of what moved, never 300%
    of the step's change, and the markdown says what the shares are of and what the changes add to."""
    a, b = _record("a", 0.10, 0.05, 0.04), _record("b", 0.102, 0.01, 0.04)
    b["extra"]["phases"]["forward"] = 0.08
    d = diff(a, b)
    shares = {r["name"]: r["share"] for r in d.rows if r["kind"] == "phase"}
    assert shares["forward"] == pytest.approx(0.6) and shares["backward"] == pytest.approx(-0.4)
    assert all(abs(r["share"]) <= 1 for r in d.rows if not np.isnan(r["share"]))
    assert d.summed["phase"] == pytest.approx(0.02)
    text = format_markdown(d)
    assert "| forward | 20.00 | 80.00 | +60.00 | 60% |" in text and "300%" not in text
    assert "share of Σ|Δ|: a row's change over the absolute changes of its kind added up" in text
    assert "add up to +20.00 ms (phases), 0 ms (op families) against the median step's +2.00 ms" in text


def test_a_profile_without_family_totals_is_compared_by_phase_alone():
    # records of before profile_families kept their top 15 kernels: one that fell out of the list
    # would read as a saving of its whole time
    old = _record("a", 0.10, 0.05, 0.04)
    old["extra"]["profile_top_ops"] = [{"name": "sm90_xmma_gemm_bf16", "time_s": 0.04}]
    del old["extra"]["profile_families"]
    d = diff(old, _record("b", 0.13, 0.08, 0.07))
    assert {r["kind"] for r in d.rows} == {"phase"} and d.unfamilied == ["A"]
    assert "by phase only: A was profiled before" in format_markdown(d)


def test_unlike_batches_are_compared_per_sample():
    a, b = _record("a", 0.10, 0.05, 0.04), _record("b", 0.16, 0.08, 0.07)
    a["metrics"]["samples_per_step"], b["metrics"]["samples_per_step"] = 10, 20
    d = diff(a, b)
    backward = next(r for r in d.rows if r["name"] == "backward")
    assert d.unit == "sample" and d.step_b - d.step_a == pytest.approx(0.008 - 0.010)
    assert backward["delta_s"] == pytest.approx(0.004 - 0.005)  # per sample: the larger batch saves time
    assert "ms/sample" in format_markdown(d)


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


# ---- gate and compare point to the diff; profile --from-gate -------------------------------------

ENV = {"machine_key": "h200-key", "gpu": "H200", "driver": "580", "cuda": "13.0", "torch": "2.11.0"}


def _measured(suite, run_id, commit, slow=0.0, labels=("p", "q")):
    """Records of a two-point suite, 3 repeats of 30 steps; the point ``p`` ``slow`` times slower."""
    rng = np.random.default_rng(len(run_id))
    out = []
    for label in labels:
        for repeat in range(3):
            times = 0.1 * (1 + (slow if label == "p" else 0.0)) * (1 + rng.normal(0, 0.004, 30))
            out.append({"suite": suite, "run_id": run_id, "point_id": label, "label": label, "repeat": repeat,
                        "workload": "toy", "params": {}, "knobs": {"opt": label}, "status": "ok", "world_size": 1,
                        "metrics": {"step_time_s": float(np.median(times)), "warmup_steps": 0, "measured_steps": 30},
                        "series": {"step_times_s": times.tolist()}, "env": {**ENV, "git_commit": commit}})
    return out


def _write(root, records):
    run = root / records[0]["suite"] / records[0]["run_id"]
    run.mkdir(parents=True)
    (run / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (run / "manifest.json").write_text(json.dumps({"suite": records[0]["suite"], "run_id": records[0]["run_id"],
                                                   "env": {**ENV, "git_commit": records[0]["env"]["git_commit"]}}))
    return run


def _profile(root, commit, run_id, step):
    record = _record("p", step, step / 2, step / 3)
    record.update(suite="toy-profile", run_id=run_id, env={**ENV, "git_commit": commit})
    return _write(root, [record])


def test_gate_and_compare_point_a_regression_to_the_exact_diff_of_its_profiles(tmp_path, capsys):
    from benchbay.analysis.diff_pointer import find_profile

    base = _write(tmp_path, _measured("toy", "r1", "c1"))
    cand = _write(tmp_path, _measured("toy", "r2", "c2", slow=0.3))
    _profile(tmp_path, "c1", "p1", 0.10)
    assert main(["gate", str(cand), "--baseline", str(base), "--results", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "- p: no profile of the candidate" in out and "--from-gate" in out  # only the baseline was profiled
    assert "- q:" not in out  # not regressed
    cand_profile = _profile(tmp_path, "c2", "p2", 0.13)
    _profile(tmp_path, "other-commit", "p3", 0.2)  # newer, but of another commit: not this run's code
    assert find_profile(cand, "p", tmp_path) == cand_profile
    assert main(["compare", str(base), str(cand), "--results", str(tmp_path)]) == 0
    command = re.search(r"`(benchbay diff [^`]+)`", capsys.readouterr().out).group(1)
    assert command == (f"benchbay diff {tmp_path / 'toy-profile' / 'p1'} {cand_profile} --label-a p --label-b p")
    assert main(shlex.split(command)[1:]) == 0  # the command runs as written
    assert "| backward |" in capsys.readouterr().out


def test_profile_from_gate_profiles_the_regressed_points(tmp_path, monkeypatch, capsys):
    from benchbay import profiling

    suite = tmp_path / "toy.yaml"
    suite.write_text("name: toy\nworkload: tests.fixtures.tinywork:Tiny\nsweep:\n  points:\n"
                     "    - {label: p, mbs: 1}\n    - {label: q, mbs: 2}\n")
    asked = []
    monkeypatch.setattr(profiling, "profile_points", lambda suite, labels, *a, **k: asked.append(labels) or tmp_path)
    base = _write(tmp_path, _measured("toy", "r1", "c1"))
    quiet = _write(tmp_path, _measured("toy", "r2", "c1"))
    slow = _write(tmp_path, _measured("toy", "r3", "c2", slow=0.3))
    assert main(["profile", str(suite), "--from-gate", str(quiet), "--baseline", str(base)]) == 0
    assert asked == [] and "nothing to profile" in capsys.readouterr().out
    assert main(["profile", str(suite), "--from-gate", str(slow), "--baseline", str(base)]) == 0
    assert asked == [["p"]]
    assert main(["profile", str(suite), "--from-gate", str(slow), "--results", str(tmp_path / "none")]) == 2
