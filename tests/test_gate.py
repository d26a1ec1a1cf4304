"""Regression gating: threshold grammar, compare, gate, loss equivalence, history, baselines."""

import json
import re

import numpy as np
import pytest

from benchbay.analysis.compare import compare, format_compare, point_key_columns
from benchbay.analysis.frame import records_to_frame
from benchbay.analysis.gate import format_no_baseline, gate, loss_equivalence
from benchbay.analysis.history import history
from benchbay.analysis.thresholds import format_threshold, parse_threshold
from benchbay.baselines import find_baseline, list_baselines, save_baseline
from benchbay.record import Record
from benchbay.runner import SuiteRunner
from benchbay.store import append_record, load_runs, read_records, write_manifest
from benchbay.suite import load
from tests.conftest import ROOT, TINY, write_suite

ENV = {"machine_key": "nvidia-h200x1-cuda13.0-torch2.11.0", "gpu": "NVIDIA H200", "gpu_count": 1,
       "driver": "580.159", "cuda": "13.0", "torch": "2.11.0", "python": "3.12.3", "git_commit": "c0"}
POINTS = (
    {"label": "baseline", "knobs": {"mbs": 1, "compile": "off"}, "step_s": 1.8, "mem": 60.0},
    {"label": "+compile", "knobs": {"mbs": 1, "compile": "blocks"}, "step_s": 1.2, "mem": 58.0},
)


def run_records(seed, *, slowdown=0.0, slow_labels=None, cv=0.015, repeats=3, steps=30, warmup=3, env=None,
                mem_growth=0.0, status="ok", run_id="run", started_at="2026-11-29T16:15:00+00:00",
                losses=None):
    """Synthetic records of a two-point suite with GPU-like noise: per-step CV ``cv``, a smaller
    per-repeat offset, slow warm-up steps, and 3% of steps hit by a 30% hiccup."""
    rng = np.random.default_rng(seed)
    out = []
    for p in POINTS:
        slow = slowdown if slow_labels is None or p["label"] in slow_labels else 0.0
        for repeat in range(repeats):
            level = p["step_s"] * (1 + slow) * (1 + rng.normal(0, cv / 3))
            times = level * (1 + rng.normal(0, cv, steps))
            times[rng.random(steps) < 0.03] *= 1.3
            median = float(np.median(times))
            ok = status == "ok"
            out.append({
                "schema": 1, "suite": "toy", "run_id": run_id, "point_id": p["label"], "label": p["label"],
                "repeat": repeat, "workload": "toy", "params": {"preset": "tiny"}, "knobs": p["knobs"],
                "status": status, "reason": None if ok else "CUDA out of memory",
                "metrics": {"step_time_s": median, "warmup_steps": warmup, "measured_steps": steps,
                            "samples_per_s_per_gpu": 1 / median, "mfu": 0.4 * p["step_s"] / median,
                            "peak_mem_allocated_gib": p["mem"] * (1 + mem_growth)} if ok else {},
                "series": {"step_times_s": [3 * level] * warmup + times.tolist() if ok else [],
                           "losses": list(losses if losses is not None else np.linspace(2.0, 1.0, 20))},
                "env": {**ENV, **(env or {})}, "started_at": started_at,
            })
    return out


def run_frame(seed, **kwargs):
    return records_to_frame(run_records(seed, **kwargs))


def failed(result):
    return result.checks[~result.checks["passed"]]


# ---- threshold grammar -------------------------------------------------------------------------

def test_threshold_grammar():
    t = parse_threshold("step_time:median:5%")
    assert (t.metric, t.statistic, t.limit, t.selector) == ("step_time", "median", 0.05, ())
    assert parse_threshold("peak_mem:2%").statistic == "median"
    assert parse_threshold("samples_per_s:mean:3.5%").limit == pytest.approx(0.035)
    t = parse_threshold("label=+compile*,mbs=32/step_time:p90:5%")
    assert t.selector == (("label", "+compile*"), ("mbs", "32"))
    assert t.applies_to({"label": "+compile mbs=32", "mbs": 32.0})
    assert not t.applies_to({"label": "baseline", "mbs": 32})
    assert not t.applies_to({"label": "+compile", "mbs": 16})
    assert parse_threshold(format_threshold(t)) == t


@pytest.mark.parametrize("text, problem", [
    ("", "it is empty"),
    ("step_time", "1 ':'-separated parts"),
    ("step_time:median:5%:x", "4 ':'-separated parts"),
    ("walltime:5%", "unknown metric 'walltime'"),
    ("step_time:avg:5%", "unknown statistic 'avg'"),
    ("step_time:median:5", "limit '5' is not a percentage"),
    ("step_time:-5%", "limit '-5%' is not a percentage"),
    ("/step_time:5%", "nothing before '/'"),
    ("label/step_time:5%", "part 'label' is not key=value"),
])
def test_malformed_thresholds_say_what_was_expected(text, problem):
    with pytest.raises(ValueError, match=re.escape(problem)) as err:
        parse_threshold(text)
    assert "expected '[key=value[,key=value...]/]metric[:statistic]:N%'" in str(err.value)


def test_gate_rejects_malformed_threshold_before_work():
    with pytest.raises(ValueError, match="unknown metric"):
        gate(run_frame(0), run_frame(1), ["latency:5%"])


# ---- gate statistics ---------------------------------------------------------------------------

def test_aa_comparisons_never_fail_the_default_gate():
    """A/A: baseline and candidate drawn from the same distribution (CV 2% per step, 3 repeats x
    30 steps, 3% hiccups), 100 seeds x 2 points at the default gate (step_time:median:5%).

    Measured false-positive rate of the gate: 0/200 checks (0%) here, and 0/500 over 250 seeds at
    both CV 1% and 2% while developing. The statistical test alone ("interval excludes 1 and
    Mann-Whitney p < 0.05", no threshold) fires on 51/1000 A/A checks (5.1%, the nominal 5%); the
    5% threshold is what keeps noise from failing CI: the largest A/A change seen was 2.4%.
    """
    checks = [gate(run_frame(1000 + s, cv=0.02), run_frame(5000 + s, cv=0.02)) for s in range(100)]
    assert [r.exit_code for r in checks] == [0] * 100
    assert sum(len(r.checks) for r in checks) == 200


@pytest.mark.parametrize("cv", [0.01, 0.02])
def test_ten_percent_slowdown_always_fails(cv):
    for seed in range(25):
        result = gate(run_frame(seed, cv=cv), run_frame(100 + seed, cv=cv, slowdown=0.10))
        assert result.exit_code == 1
        assert set(failed(result)["verdict"]) == {"slower"}
        assert len(failed(result)) == 2


def test_change_under_the_threshold_passes():
    for seed in range(25):
        result = gate(run_frame(seed, cv=0.02), run_frame(100 + seed, cv=0.02, slowdown=0.03))
        assert result.exit_code == 0


def test_improvement_passes_and_is_reported():
    result = gate(run_frame(0), run_frame(1, slowdown=-0.2))
    assert result.exit_code == 0
    assert set(result.checks["verdict"]) == {"faster"}
    assert "#### Improvements" in result.markdown


def test_a_deliberate_knob_change_is_compared_when_that_knob_is_ignored():
    """Compile switched off in the candidate: unmatched by default, flagged slower when compile is
    ignored in the matching."""
    base = records_to_frame([r for r in run_records(0) if r["label"] == "+compile"])
    cand = records_to_frame([{**r, "knobs": {**r["knobs"], "compile": "off"}} for r in run_records(1)
                             if r["label"] == "baseline"])
    assert set(compare(base, cand)["verdict"]) == {"not comparable"}
    result = gate(base, cand, ["step_time:median:5%"], ignore_knobs=["compile"])
    assert result.exit_code == 1 and set(failed(result)["verdict"]) == {"slower"}


def test_selector_limits_a_threshold_to_matching_points():
    base, cand = run_frame(0), run_frame(1, slowdown=0.10, slow_labels={"baseline"})
    assert gate(base, cand, ["label=+compile/step_time:median:5%"]).exit_code == 0
    result = gate(base, cand, ["compile=off/step_time:median:5%"])
    assert result.exit_code == 1
    assert list(result.checks["point"]) == ["baseline"]


@pytest.mark.parametrize("repeats", [1, 2, 3])
def test_memory_threshold(repeats):
    """One peak per repeat: too few values for a rank test to ever reject, so the (collapsed)
    interval alone decides; a 5% growth still fails a 2% threshold at 1-3 repeats."""
    base = run_frame(0, repeats=repeats)
    assert gate(base, run_frame(1, mem_growth=0.05, repeats=repeats), ["peak_mem:2%"]).exit_code == 1
    assert gate(base, run_frame(1, mem_growth=0.01, repeats=repeats), ["peak_mem:2%"]).exit_code == 0


def test_failed_point_fails_the_gate():
    result = gate(run_frame(0), run_frame(1, status="oom"))
    assert result.exit_code == 1
    assert set(result.checks["verdict"]) == {"failed"}
    assert "candidate status oom" in result.markdown


def test_mismatched_environment_is_not_comparable():
    cand = run_frame(1, slowdown=0.5, env={"torch": "2.12.0", "driver": "590.10"})
    table = compare(run_frame(0), cand)
    assert set(table["verdict"]) == {"not comparable"}
    reason = table["reason"].iloc[0]
    assert "driver 580.159 vs 590.10" in reason and "torch 2.11.0 vs 2.12.0" in reason
    assert "gpu" not in reason and "cuda" not in reason
    result = gate(run_frame(0), cand)
    assert result.exit_code == 0  # cannot judge: reported, not failed ...
    assert "#### Not comparable" in result.markdown and "torch 2.11.0 vs 2.12.0" in result.markdown
    assert gate(run_frame(0), cand, fail_on_incomparable=True).exit_code == 1  # ... unless asked


def test_compare_table_and_format():
    table = compare(run_frame(0), run_frame(1, slowdown=0.10))
    assert set(table["metric"]) == {"step_time", "samples_per_s_per_gpu", "peak_mem", "mfu"}
    by_metric = table[table["point"] == "baseline"].set_index("metric")
    assert by_metric.loc["step_time", "verdict"] == "slower"
    assert by_metric.loc["samples_per_s_per_gpu", "verdict"] == "slower"  # rates follow step times
    assert by_metric.loc["samples_per_s_per_gpu", "ratio"] == pytest.approx(1 / by_metric.loc["step_time", "ratio"],
                                                                            rel=1e-3)
    assert by_metric.loc["peak_mem", "verdict"] == "no change"
    assert by_metric.loc["step_time", "ci_low"] > 1.05
    text = format_compare(table)
    assert text.startswith("| point | metric |") and "slower" in text


def test_knob_columns_found_without_knob_names():
    base, cand = run_frame(0).drop(columns="knob_names"), run_frame(1).drop(columns="knob_names")
    table = compare(base, cand, metrics=["step_time"])
    assert list(table["point"]) == ["baseline", "+compile"]
    assert {"mbs", "compile", "param.preset"} <= set(table.columns)


def test_no_figure_of_a_record_passes_for_a_knob(tmp_path, in_process):
    """Without ``knob_names``, compare takes each column it does not know for a knob: every field and
    figure of a record must be one it knows (benchbay.record.FIGURES): the stored runs' (GPU points,
    ooms, errors, a timeout) and a fresh CPU point's (a figure added since the last stored run)."""
    path = write_suite(tmp_path / "fresh.yaml", f"""
name: fresh
workload: {{name: "{TINY}"}}
knobs: {{precision: fp32}}
steps: {{warmup: 1, measure: 2}}
timeout: 120
""")
    fresh = SuiteRunner(load(path), tmp_path / "results", launcher=in_process).run_all()
    records = read_records(fresh.run) + [r for run in sorted(ROOT.glob("results/*/*/records.jsonl"))
                                         for r in read_records(run.parent)]
    frame = records_to_frame(records)
    # no more than the knobs: the decoders' ``device`` knob shares the record's ``device`` column
    # (one a frame without knob_names cannot tell), so not all of them
    assert set(point_key_columns(frame.drop(columns="knob_names"))) <= set(point_key_columns(frame))


def test_points_missing_on_one_side():
    base = run_frame(0)
    cand = base[base["label"] == "baseline"]
    table = compare(base, cand, metrics=["step_time"])
    assert table.set_index("point").loc["+compile", "reason"] == "only in baseline"


# ---- loss equivalence --------------------------------------------------------------------------

def equivalence_frame(compiled_losses):
    eager = np.exp(-np.linspace(0, 2, 30)) + 0.1
    records = run_records(0, losses=eager)
    records[3]["series"]["losses"] = list(compiled_losses(eager))  # +compile, repeat 0
    return records_to_frame(records)


def test_loss_equivalence_passes_within_tolerance():
    df = equivalence_frame(lambda eager: eager * (1 + 0.005 * np.sin(np.arange(eager.size))))
    check = loss_equivalence(df, "baseline", "+compile", rtol=0.01, atol=1e-4)
    assert check.passed and check.first_bad_step is None
    assert 0 < check.max_rel_diff <= 0.005 + 1e-12


def test_loss_equivalence_fails_on_drift_and_fails_the_gate():
    df = equivalence_frame(lambda eager: eager + np.where(np.arange(eager.size) >= 20, 0.05, 0.0))
    check = loss_equivalence(df, "baseline", "+compile", rtol=0.01, atol=1e-4)
    assert not check.passed and check.first_bad_step == 20
    result = gate(run_frame(0), run_frame(1), loss_checks=[check])
    assert result.exit_code == 1
    assert "#### Loss equivalence" in result.markdown and "FAIL: step 20" in result.markdown


def test_loss_equivalence_needs_one_point_per_label():
    df = run_frame(0)
    with pytest.raises(ValueError, match="no ok point labelled 'nope'"):
        loss_equivalence(df, "baseline", "nope")


# ---- history -----------------------------------------------------------------------------------

def test_history_flags_the_run_that_regressed():
    runs = []
    for i in range(8):
        slowdown = 0.12 if i >= 5 else 0.0
        runs += run_records(i, slowdown=slowdown, repeats=1, run_id=f"run{i}",
                            started_at=f"2026-11-{10 + i:02d}T00:00:00+00:00",
                            env={"git_commit": f"commit{i}"})
    table = history(records_to_frame(runs[::-1]), "step_time")  # order comes from started_at
    one = table[table["point"] == "baseline"]
    assert list(one["git_commit"]) == [f"commit{i}" for i in range(8)]
    flagged = one[one["change_point"]]
    assert list(flagged["git_commit"]) == ["commit5"]
    assert flagged["step"].iloc[0] == pytest.approx(0.12, abs=0.02)
    assert flagged["regression"].iloc[0]
    rates = history(records_to_frame(runs), "samples_per_s_per_gpu")
    assert rates[rates["change_point"]]["regression"].all()  # fewer samples/s is also a regression


# ---- baselines ---------------------------------------------------------------------------------

def write_run(root, records):
    run = root / records[0]["suite"] / records[0]["run_id"]
    write_manifest(run, {"suite": records[0]["suite"], "run_id": records[0]["run_id"], "env": ENV})
    for record in records:
        append_record(run, Record.from_json(record))
    return run


def test_save_and_find_baseline(tmp_path):
    results = tmp_path / "results"
    first = write_run(results, run_records(0, run_id="r1"))
    saved = save_baseline(first, "toy", results)
    assert saved == results / "baselines" / ENV["machine_key"] / "toy"
    assert sorted(p.name for p in saved.iterdir()) == ["manifest.json", "records.jsonl"]
    assert find_baseline(results, ENV["machine_key"], suite="toy") == saved
    assert find_baseline(results, ENV["machine_key"], name="toy") == saved
    assert find_baseline(results, "nvidia-h100x1-cuda12.8-torch2.11.0", suite="toy") is None
    assert find_baseline(results, ENV["machine_key"], suite="other") is None

    second = write_run(results, run_records(1, run_id="r2", slowdown=0.1))
    save_baseline(second, "toy", results)  # replaces the old one as a whole
    assert {json.loads(line)["run_id"] for line in (saved / "records.jsonl").read_text().splitlines()} == {"r2"}
    assert list_baselines(results) == [saved]
    assert gate(load_runs([saved]), load_runs([second])).exit_code == 0
    assert gate(load_runs([first]), load_runs([second])).exit_code == 1

    both = save_baseline([first, second], "parts", results)  # a suite measured in several runs
    assert [json.loads(line)["run_id"] for line in (both / "records.jsonl").read_text().splitlines()] == \
        ["r1"] * len(run_records(0)) + ["r2"] * len(run_records(1))
    other = write_run(results, run_records(2, run_id="r3", env={"machine_key": "nvidia-h100x1-cuda12.8-torch2.11.0"}))
    with pytest.raises(ValueError, match="several machines"):
        save_baseline([first, other], "mixed", results)

    with pytest.raises(ValueError, match="invalid baseline name"):
        save_baseline(first, "../escape", results)
    with pytest.raises(FileNotFoundError, match="no records.jsonl"):
        save_baseline(tmp_path, "x", results)


# ---- noise and busy machines -------------------------------------------------------------------

def test_a_wide_interval_is_not_significant_and_a_narrow_one_no_change():
    """A/A at 40% step CV with 5 steps: the medians differ, the interval says nothing."""
    noisy = compare(run_frame(0, cv=0.4, repeats=1, steps=5), run_frame(1, cv=0.4, repeats=1, steps=5),
                    metrics=["step_time"])
    assert set(noisy["verdict"]) == {"not significant"}
    assert all("noisy: CV" in c for c in noisy["caution"])
    assert "Caution: 2 of 2 points ran noisy" in format_compare(noisy)
    assert format_compare(noisy, only_changes=True) == "No changes."
    # compare's mean step carries the 3% hiccups: 120 steps keep its interval within 2%
    quiet = compare(run_frame(0, cv=0.005, steps=120), run_frame(1, cv=0.005, slowdown=0.001, steps=120),
                    metrics=["step_time"])
    assert set(quiet["verdict"]) == {"no change"} and set(quiet["caution"]) == {""}


def test_compare_and_gate_say_when_a_side_ran_on_a_busy_machine():
    busy = run_records(1, slowdown=0.10)
    for record in busy:
        record["health"] = {"warnings": ["busy CPU: other processes used 0.95 of 2 CPUs"]}
    table = compare(run_frame(0), records_to_frame(busy), metrics=["step_time"])
    assert set(table["caution"]) == {"candidate busy CPU: other processes used 0.95 of 2 CPUs"}
    assert "candidate busy CPU" in format_compare(table)
    result = gate(run_frame(0), records_to_frame(busy))
    assert result.exit_code == 1  # the verdict stands; the summary says why to doubt it
    assert "#### Caution" in result.markdown and "2 of 2 points ran noisy or on a machine that was not quiet" in \
        result.markdown


def test_no_baseline_is_the_gate_verdict():
    text = format_no_baseline("cpu-x", "quickstart", "results/baselines", required=False)
    assert text.startswith("### benchbay gate: ⚠️ no baseline: nothing was gated")
    assert "cpu-x" in text and "benchbay baseline save" in text
    assert format_no_baseline("cpu-x", "quickstart", "results/baselines", required=True).startswith(
        "### benchbay gate: ❌ FAIL: no baseline")


def test_a_command_line_with_newlines_and_pipes_keeps_the_gates_markdown_whole():
    busy = run_records(1, slowdown=0.10)
    for record in busy:  # a busy process's command line, as the health check names it
        record["health"] = {"warnings": ["busy CPU: python -c import sys;\nimport benchbay | head (pid 2715) 0.9 CPUs"]}
    markdown = gate(run_frame(0), records_to_frame(busy)).markdown
    lines = markdown.splitlines()
    assert not any(line.startswith("import benchbay") for line in lines)
    caution = [line for line in lines if line.startswith("- ") and "pid 2715" in line]
    assert caution and all("import sys; import benchbay | head" in line for line in caution)
    for line in (line for line in lines if line.startswith("|")):  # every row as wide as its header
        assert line.replace("\\|", "").count("|") == 8, line
