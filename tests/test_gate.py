"""Regression gating: threshold grammar, compare, gate, loss equivalence, history, baselines, and the
process as the statistical unit (issue 53)."""

import json
import re

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from benchbay.analysis.compare import compare
from benchbay.analysis.compare_format import format_compare
from benchbay.analysis.frame import records_to_frame
from benchbay.analysis.gate import format_no_baseline, gate, loss_equivalence
from benchbay.analysis.history import history
from benchbay.analysis.points import point_key_columns
from benchbay.analysis.stats import repeats_needed
from benchbay.analysis.tables import point_summary
from benchbay.analysis.thresholds import format_threshold, parse_threshold
from benchbay.baselines import find_baseline, list_baselines, save_baseline
from benchbay.cli import main
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


def run_records(seed, *, slowdown=0.0, slow_labels=None, cv=0.015, between=None, repeats=3, steps=30, warmup=3,
                env=None, mem_growth=0.0, status="ok", run_id="run", started_at="2026-11-29T16:15:00+00:00",
                losses=None):
    """Synthetic records of a two-point suite with GPU-like noise: per-step CV ``cv``, a per-repeat
    (process) offset of CV ``between`` (default a third of ``cv``), slow warm-up steps, and 3% of
    steps hit by a 30% hiccup."""
    rng = np.random.default_rng(seed)
    out = []
    for p in POINTS:
        slow = slowdown if slow_labels is None or p["label"] in slow_labels else 0.0
        for repeat in range(repeats):
            level = p["step_s"] * (1 + slow) * np.exp(rng.normal(0, cv / 3 if between is None else between))
            times = level * (1 + rng.normal(0, cv, steps))
            times[rng.random(steps) < 0.03] *= 1.3
            median = float(np.median(times))
            ok = status == "ok"
            out.append({
                "schema": 1, "suite": "toy", "run_id": run_id, "point_id": p["label"], "label": p["label"],
                "repeat": repeat, "workload": "toy", "params": {"preset": "tiny"}, "knobs": p["knobs"],
                "status": status, "reason": None if ok else "CUDA out of memory",
                "metrics": {"step_time_s": median, "warmup_steps": warmup, "measured_steps": steps,
                            "samples_per_step": 1,
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
    """A/A: baseline and candidate drawn from the same distribution (CV 2% per step, 0.7% between
    processes, 3 repeats x 30 steps, 3% hiccups), 100 seeds x 2 points at the default gate
    (step_time:median:5%): no check fails, and every one is a verdict (3 repeats rule out 5% here)."""
    checks = [gate(run_frame(1000 + s, cv=0.02), run_frame(5000 + s, cv=0.02)) for s in range(100)]
    assert [r.exit_code for r in checks] == [0] * 100
    assert sum(len(r.checks) for r in checks) == 200 and sum(r.unsupported for r in checks) == 0


@pytest.mark.parametrize("cv", [0.01, 0.02])
def test_ten_percent_slowdown_always_fails(cv):
    for seed in range(25):
        result = gate(run_frame(seed, cv=cv), run_frame(100 + seed, cv=cv, slowdown=0.10))
        assert result.exit_code == 1
        assert set(failed(result)["verdict"]) == {"slower"}
        assert len(failed(result)) == 2


def test_a_real_change_under_half_the_threshold_passes():
    """A 5% threshold fails on a real slowdown of 2.5% or more (thresholds.FAIL_SHARE); 1% passes."""
    for seed in range(25):
        result = gate(run_frame(seed, cv=0.01), run_frame(100 + seed, cv=0.01, slowdown=0.01))
        assert result.exit_code == 0 and result.unsupported == 0


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
    """One peak per repeat, the same in every process: the (collapsed) interval is the ratio, and
    the threshold itself decides; a 5% growth fails a 2% threshold at 1-3 repeats, 1% passes."""
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
    """A/A at 40% step CV with 5 steps, 3 processes a side: the means differ, the interval says nothing
    (each process's value is known no better than its 5 noisy steps say)."""
    noisy = compare(run_frame(0, cv=0.4, steps=5), run_frame(1, cv=0.4, steps=5), metrics=["step_time"])
    assert set(noisy["verdict"]) == {"not significant"}
    assert all("holds no change" in r and "3 vs 3 processes" in r for r in noisy["reason"])
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


# ---- the process is the unit (issue 53) ---------------------------------------------------------

NOISY = {"cv": 0.01, "between": 0.3}  # a 2-core CPU: processes ~30% apart, steps within 1% of their own


def steady(records, label):
    """Each process's steady steps of one point, by hand (warm-up steps dropped)."""
    return [np.array(r["series"]["step_times_s"][r["metrics"]["warmup_steps"]:]) for r in records
            if r["label"] == label]


def test_thirty_percent_between_processes_does_not_fail_identical_code():
    """A/A with tight steps and 30% between processes: a test of the pooled steps calls most pairs
    different; with the process as the unit at most 5% of checks fail, and at 3 repeats a 5% gate
    cannot support a verdict (it passes, and says so)."""
    pairs = [(run_records(2000 + s, **NOISY), run_records(6000 + s, **NOISY)) for s in range(50)]
    steps_differ = [scipy_stats.mannwhitneyu(np.concatenate(steady(a, "baseline")),
                                             np.concatenate(steady(b, "baseline"))).pvalue < 0.05 for a, b in pairs]
    assert np.mean(steps_differ) > 0.5
    results = [gate(records_to_frame(a), records_to_frame(b)) for a, b in pairs]
    checks = pd.concat([r.checks for r in results])
    assert len(checks) == 100 and (~checks["passed"]).sum() <= 5
    assert (checks["verdict"] == "cannot support a verdict").mean() > 0.9
    assert [r.exit_code for r in results] == [int(not r.checks["passed"].all()) for r in results]


def test_a_slowdown_larger_than_the_noise_is_caught():
    """2.5x slower against 30% between processes, 10 repeats a side: every check fails."""
    for seed in range(20):
        result = gate(run_frame(seed, repeats=10, **NOISY), run_frame(100 + seed, repeats=10, slowdown=1.5, **NOISY))
        assert result.exit_code == 1 and set(failed(result)["verdict"]) == {"slower"} and len(failed(result)) == 2


def test_too_few_repeats_cannot_support_a_verdict_and_do_not_fail_ci():
    one = gate(run_frame(0, repeats=1), run_frame(1, repeats=1, slowdown=0.5))
    assert one.exit_code == 0 and one.unsupported == 2
    assert set(one.checks["verdict"]) == {"cannot support a verdict"}
    assert one.markdown.startswith("### benchbay gate: ⚠️ cannot support a verdict on 2 of 2 checks (too few repeats)")
    assert "#### Cannot support a verdict" in one.markdown and "needs 2 or more repeats a side" in one.markdown
    # three repeats of 30% noise: the spread is known and too wide for 5%; the gate names the repeats it needs
    noisy = gate(run_frame(0, **NOISY), run_frame(1, **NOISY))
    assert noisy.exit_code == 0 and noisy.unsupported == 2
    for _, row in noisy.checks.iterrows():
        assert row["repeats_needed"] == repeats_needed(row["between_cv"], 0.05) > 100
        assert f"needs {row['repeats_needed']:.0f} repeats a side on this machine" in row["reason"]
    worst = noisy.checks["repeats_needed"].max()
    assert f"`step_time:median:5%` needs {worst:.0f} repeats a side on this machine" in noisy.markdown
    assert "this run has 3" in noisy.markdown


def test_earlier_runs_of_one_commit_say_the_spread_one_repeat_cannot():
    """One repeat a side, and three earlier runs of the same clean commit with three repeats each: their
    spread (8 degrees of freedom a point) supports the verdict; another machine's runs and a dirty
    tree's single repeats add nothing."""
    earlier = [r for i in range(3) for r in run_records(50 + i, run_id=f"old{i}")]
    earlier += run_records(60, run_id="elsewhere", slowdown=2.0, env={"machine_key": "cpu-other"})
    earlier += run_records(61, run_id="dirty", repeats=1, env={"git_commit": "c0-dirty"})
    history_frame = records_to_frame(earlier)
    base = run_frame(0, repeats=1, run_id="b")
    slow, same = run_frame(1, repeats=1, run_id="c", slowdown=0.2), run_frame(2, repeats=1, run_id="c")
    assert gate(base, slow).unsupported == 2  # alone, nothing says the spread
    caught = gate(base, slow, history=history_frame)
    assert caught.exit_code == 1 and set(caught.checks["earlier_df"]) == {8}
    passed = gate(base, same, history=history_frame)
    assert passed.exit_code == 0 and passed.unsupported == 0
    table = compare(base, slow, metrics=["step_time"], history=history_frame)
    assert set(table["verdict"]) == {"slower"} and set(table["earlier_df"]) == {8}


def test_the_gate_command_warns_then_gates_with_the_machines_history(tmp_path, capsys):
    results = tmp_path / "results"
    save_baseline(write_run(results, run_records(0, repeats=1, run_id="r1")), "toy", results)
    write_run(results, run_records(1, repeats=1, run_id="r2", slowdown=0.3))
    assert main(["gate", "r2", "--results", str(results)]) == 0  # one repeat a side: said, not failed
    out = capsys.readouterr().out
    assert "cannot support a verdict" in out and "needs 2 or more repeats a side" in out
    for i in range(2):  # earlier runs of the same commit with repeats
        write_run(results, run_records(10 + i, run_id=f"r0{i}", started_at="2026-11-28T00:00:00+00:00"))
    assert main(["gate", "r2", "--results", str(results)]) == 1
    assert "### benchbay gate: ❌ FAIL" in capsys.readouterr().out
    assert main(["compare", "r1", "r2", "--results", str(results)]) == 0
    assert "| slower |" in capsys.readouterr().out


def test_validate_says_the_repeats_the_gate_needs_on_each_machine(tmp_path, monkeypatch, capsys):
    records = run_records(0, between=0.1, run_id="r1")
    write_run(tmp_path / "results", records)
    suite = write_suite(tmp_path / "toy.yaml", f'name: toy\nworkload: "{TINY}"\nrepeats: 3\n'
                                               'gate: ["step_time:median:5%"]\n')
    monkeypatch.chdir(tmp_path)
    assert main(["validate", str(suite)]) == 0
    # each point's spread by hand: the sd of the log medians of its processes
    sds = [np.std(np.log([np.median(s) for s in steady(records, label)]), ddof=1) for label in ("baseline", "+compile")]
    needed = max(repeats_needed(sd, 0.05, earlier_df=2) for sd in sds)
    assert (f"gate on {ENV['machine_key']}: `step_time:median:5%` needs {needed} repeats a side to catch its slowdown "
            "95% of the time") in capsys.readouterr().out
    bad = write_suite(tmp_path / "bad.yaml", f'name: toy\nworkload: "{TINY}"\ngate: ["step_time:5"]\n')
    assert main(["validate", str(bad)]) == 2
    out, err = capsys.readouterr()  # refused by the suite's check: never 'valid' first
    assert "bad.yaml: gate[0]: invalid threshold 'step_time:5'" in err and "valid;" not in out


def test_compare_history_and_show_give_one_samples_per_second():
    """samples/s is samples per step over the mean steady step wherever it is printed, never a mean of
    per-step rates (with steps 20% apart the two differ by ~4%)."""
    records = run_records(0, cv=0.2)
    frame = records_to_frame(records)
    shown = point_summary(frame).set_index("label")["samples_per_s_per_gpu"]
    compared = compare(frame, run_frame(1, cv=0.2), metrics=["samples_per_s_per_gpu"]).set_index("point")
    past = history(frame, "samples_per_s_per_gpu").set_index("point")
    for label in ("baseline", "+compile"):
        steps = np.concatenate(steady(records, label))
        assert shown[label] == pytest.approx(1 / steps.mean())  # 1 sample a step
        assert compared.loc[label, "baseline"] == pytest.approx(shown[label])
        assert past.loc[label, "value"] == pytest.approx(shown[label])
        assert abs(np.mean(1 / steps) * steps.mean() - 1) > 0.02  # the mean of rates is another figure


def test_history_flags_large_changes_as_well_as_small_ones():
    """-44%, then +72%, then -11%, two runs a level at least: all three are flagged, each judged by
    compare over the processes of the levels around it."""
    levels = [1.0, 1.0, 1.0, 0.56, 0.56, 0.9632, 0.9632, 0.857, 0.857]
    runs = [r for i, level in enumerate(levels)
            for r in run_records(i, slowdown=level - 1, repeats=1, cv=0.005, run_id=f"run{i}",
                                 started_at=f"2026-11-{10 + i:02d}T00:00:00+00:00", env={"git_commit": f"commit{i}"})]
    table = history(records_to_frame(runs))
    flagged = table[(table["point"] == "baseline") & table["change_point"]]
    assert list(flagged["git_commit"]) == ["commit3", "commit5", "commit7"]
    assert list(flagged["step"]) == pytest.approx([-0.44, 0.72, -0.11], abs=0.03)  # means, 3% hiccups in
    assert list(flagged["verdict"]) == ["improvement", "regression", "improvement"]
