"""The gate's calibration (benchbay.analysis.gate_calibration): resampled A/A and A/B gate decisions
from a pool of processes, the repeats they are sized to, the document written from the result, and
the suite's own step run end to end (tiny)."""

from pathlib import Path

import numpy as np
import pytest

from benchbay.analysis.frame import records_to_frame
from benchbay.analysis.gate_calibration import SAME, SLOWER, SUITE, calibrate, main, write_doc
from benchbay.analysis.stats import repeats_needed
from benchbay.runner import SuiteRunner
from benchbay.store import load_runs
from benchbay.suite import load

ENV = {"machine_key": "cpu-test-x2-torch2.13.0", "cpu": "test", "torch": "2.13.0", "git_commit": "c0"}


def pool(seed, *, same=20, slower=10, slowdown=0.25, between=0.1, steps=20):
    """A calibration run's records: ``same`` and ``slower`` processes, each a level off by ``between``
    (CV) with steps within 1% of it; the slower point's level ``slowdown`` above."""
    rng = np.random.default_rng(seed)
    out = []
    for label, knob, count in ((SAME, 0.0, same), (SLOWER, 0.25, slower)):
        for repeat in range(count):
            level = 0.04 * (1 + (slowdown if label == SLOWER else 0.0)) * np.exp(rng.normal(0, between))
            times = level * (1 + rng.normal(0, 0.01, steps))
            out.append({
                "schema": 1, "suite": "gate-calibration", "run_id": "cal", "point_id": label, "label": label,
                "repeat": repeat, "workload": "matmul-step", "params": {"width": 256}, "knobs": {"mbs": 8,
                                                                                                "slowdown": knob},
                "status": "ok", "metrics": {"step_time_s": float(np.median(times)), "warmup_steps": 0,
                                            "measured_steps": steps},
                "series": {"step_times_s": times.tolist()}, "env": ENV, "started_at": "2026-12-01T00:00:00+00:00",
                "health": {"warnings": ["busy CPU: 0.9 of 2 CPUs"] if repeat == 0 else []},
            })
    return records_to_frame(out)


@pytest.mark.slow  # a thousand resampled gates: 16 s
def test_a_large_planted_slowdown_is_always_caught_and_identical_code_rarely_fails():
    result = calibrate(pool(0, slowdown=1.0), "step_time:median:25%", draws=200)
    assert result.pool == (20, 10) and result.draws == 200 and result.busy == 2
    assert result.repeats_asked == repeats_needed(result.between_cv, 0.25)
    assert result.repeats == min(result.repeats_asked, 10)
    assert result.measured == pytest.approx(1.0, abs=0.15)
    assert result.detection_rate == 1.0 and result.ab_unsupported == 0
    assert result.false_alarm_rate <= 0.05 and result.false_alarms + result.aa_unsupported <= result.draws


def test_the_doc_holds_the_results_figures_and_says_when_the_pool_was_short(tmp_path):
    result = calibrate(pool(1, same=6, slower=3, between=0.3), "step_time:median:25%", draws=40)
    assert result.repeats_asked > result.repeats == 3  # 30% between processes: more than the pool holds
    text = write_doc(result, tmp_path / "cal.md", "python -m benchbay.analysis.gate_calibration --draws 40").read_text()
    assert text.startswith("# Gate calibration") and "--draws 40" in text
    asked = "repeats a side the gate asks for (alpha 5%, power 95% at 80% of the threshold)"
    assert f"| {asked} | {result.repeats_asked} |" in text
    assert f"| A/A false alarms (gate failed identical code) | {result.false_alarms}/40 = " in text
    assert f"| A/B detections (gate failed the slowed code) | {result.caught}/40 = " in text
    assert f"| between-process CV of same (sd of log values) | {result.between_cv:.1%} |" in text
    assert f"the pool allowed 3 a side of the {result.repeats_asked} asked for" in text and "met" not in text


def test_a_run_without_the_two_points_is_refused():
    frame = pool(2)
    with pytest.raises(ValueError, match="needs 2 or more ok processes of point 'same' and one of 'slower'"):
        calibrate(frame[frame["label"] == SAME], "step_time:median:25%")


def test_the_suites_step_runs_and_the_command_analyses_its_run(tmp_path, in_process, capsys):
    """The calibration suite itself, tiny (3 processes a point, 3 steps, a narrow step), in-process;
    then the one command's analysis of the stored run writes the document."""
    suite = load(SUITE, ["repeats=3", "steps.warmup=1", "steps.measure=3", "workload.params.width=32"])
    run = SuiteRunner(suite, tmp_path / "results", launcher=in_process).run_all().run
    frame = load_runs([run])
    assert sorted(frame["label"]) == [SAME] * 3 + [SLOWER] * 3 and set(frame["status"]) == {"ok"}
    assert main(["--run", str(run), "--results", str(tmp_path / "results"), "--doc", str(tmp_path / "doc.md"),
                 "--draws", "5"]) == 0
    assert "A/A false alarms" in capsys.readouterr().out
    assert "| processes (same, slower) | 3, 3 |" in (tmp_path / "doc.md").read_text()


GPU_RUN = Path(__file__).resolve().parents[1] / "results" / "gate-calibration-gpu" / "20261205-103552-1994"


@pytest.mark.slow  # 1,000 resampled gate decisions, as the document drew them
@pytest.mark.skipif(not GPU_RUN.is_dir(), reason="the committed GPU calibration run is not here")
def test_the_committed_gpu_calibration_says_what_its_run_says():
    """docs/gate-calibration-gpu.md against its run (an H100: a +5% plant, processes 0.2% apart)."""
    result = calibrate(load_runs([GPU_RUN]), "step_time:median:5%")
    text = (GPU_RUN.parents[2] / "docs" / "gate-calibration-gpu.md").read_text()
    assert result.repeats == 2 and result.detection_rate >= 0.95 and result.false_alarm_rate <= 0.05
    for count in (result.caught, result.false_alarms):
        assert f"| {count}/{result.draws} = " in text
    assert f"+{result.measured:.1%}" in text
