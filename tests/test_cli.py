"""The command line: validate fails before any process starts; list; run + show; every user
error is one line and exit code 2; exit codes a CI script can use."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from benchbay import store
from benchbay.cli import main
from benchbay.knobs import GENERIC
from benchbay.record import Record, Status
from tests.conftest import ROOT, TINY, benchbay_cmd, write_suite


def run(args, env, cwd):
    return subprocess.run(benchbay_cmd(*args), env=env, cwd=cwd, capture_output=True, text=True, timeout=300)


def test_invalid_suite_fails_validation_naming_file_and_key(tmp_path, in_repo, cli_env, capsys):
    bad = write_suite(tmp_path / "bad.yaml", f"""
name: bad
workload: {{name: "{TINY}"}}
knobs: {{mbs: two, warp_speed: 9}}
""")
    out = run(["validate", str(bad)], cli_env, in_repo)  # the exit code of the process
    assert out.returncode == 2
    texts = [out.stderr]
    # run: in this process (the same main; a run's exit codes as a process: test_run_then_show)
    capsys.readouterr()
    assert main(["run", str(bad), "--results", str(tmp_path / "res")]) == 2
    texts.append(capsys.readouterr().err)
    for text in (t.replace("\n", " ") for t in texts):
        assert f"{bad}: knobs.mbs: a positive integer, got 'two'" in text
        assert f"{bad}: knobs.warp_speed: a known knob of tiny:" in text and "'recompute'" in text
    assert not (tmp_path / "res").exists()  # nothing ran


def test_validate_counts_points_and_list_shows_knobs(tmp_path, in_repo, capsys, monkeypatch):
    good = write_suite(tmp_path / "good.yaml", f"""
name: good
workload: {{name: "{TINY}"}}
sweep: {{grid: {{mbs: [1, 2, 3]}}, exclude: [{{mbs: 3}}]}}
""")
    # in this process: a fresh `benchbay list` imports every workload (~10 s of CPU on 2 cores)
    assert main(["validate", str(good), "--set", "repeats=2"]) == 0
    assert "3 points (1 excluded) x 2 repeats" in capsys.readouterr().out.replace("\n", " ")
    monkeypatch.setenv("COLUMNS", "80")  # the terminal's width (a pipe's here): list wraps to it, cutting nothing
    assert main(["list"]) == 0
    listing = capsys.readouterr().out
    for word in ("dreamzero", "wallx", "decode", "recompute", "sharding", "fsdp2_grad_op", "suites/"):
        assert word in listing
    assert max(map(len, listing.splitlines())) <= 80 and "…" not in listing
    assert all(word in listing for word in GENERIC["precision"].help.split())


@pytest.mark.slow
def test_run_then_show(tmp_path, in_repo, cli_env):
    suite = write_suite(tmp_path / "s.yaml", f"""
name: clishow
workload: {{name: "{TINY}"}}
knobs: {{precision: fp32}}
sweep: {{points: [{{label: a}}, {{label: b, fault: raise}}]}}
steps: {{warmup: 1, measure: 2}}
""")
    results = tmp_path / "res"
    out = run(["run", str(suite), "--results", str(results), "--report-dir", str(tmp_path / "rep")], cli_env, in_repo)
    assert out.returncode == 1, out.stderr  # a point failed: CI must see it
    assert "1 error, 1 ok" in out.stdout and "report:" in out.stdout
    assert "1 point(s) of the run failed" in out.stderr and "error b mbs=1: ValueError: fixture failure" in out.stderr
    assert re.search(r"^\[2/2 \d+:\d\d:\d\d, ETA \d+:\d\d:\d\d\] error b", out.stderr, re.M)  # plain lines on a pipe
    assert (tmp_path / "rep" / "report.md").exists()
    accepted = run(["run", str(suite), "--results", str(results), "--resume", "--allow-failures", "--no-report"],
                   cli_env, in_repo)
    assert accepted.returncode == 0 and "accepted (--allow-failures)" in accepted.stderr
    shown = run(["show", "clishow", "--results", str(results), "--export", str(tmp_path / "t.csv")], cli_env, in_repo)
    assert shown.returncode == 0, shown.stderr
    header = shown.stdout.splitlines()[1].split()
    assert header[:3] == ["name", "status", "step"] and header[-2:] == ["reason", "fault"]  # figures, then knobs
    assert "error" in shown.stdout and "fixture failure" in shown.stdout
    assert (tmp_path / "t.csv").exists()


def test_help_is_for_users():
    out = subprocess.run(benchbay_cmd("--help"), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    assert out.stdout.startswith("usage: benchbay") and "examples:" in out.stdout and "exit codes:" in out.stdout
    assert "parses arguments" not in out.stdout


def test_a_python_without_the_dependencies_is_told_how_to_install_them():
    # -S: no site-packages, as a system python3 without the project (rich is the first import missing)
    out = subprocess.run([sys.executable, "-S", "-m", "benchbay", "--help"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 2 and out.stdout == "" and "Traceback" not in out.stderr
    assert "lacks 'rich'" in out.stderr and "bash .ci/setup" in out.stderr and "pip install -e ." in out.stderr


@pytest.fixture
def one_run(tmp_path):
    run = store.run_dir(tmp_path / "res", "tiny", "r1")
    store.append_record(run, Record(suite="tiny", run_id="r1", point_id="p", label="a", workload="w", knobs={"mbs": 1},
                                    status=Status.OK, metrics={"step_time_s": 0.1},
                                    series={"step_times_s": [0.1, 0.11, 0.1]}, env={"machine_key": "cpu-x"}))
    store.write_manifest(run, {"suite": "tiny", "env": {"machine_key": "cpu-x"}})
    return tmp_path / "res"


@pytest.mark.parametrize("args", [
    ["show", "nosuch"], ["report", "nosuch"], ["compare", "nosuch", "tiny"], ["gate", "nosuch"],
    ["history", "nosuch"], ["history", "tiny", "--metric", "nosuch"], ["export-pytest-benchmark", "nosuch", "x.json"],
    ["import-pytest-benchmark", "nosuch.json"], ["baseline", "save", "nosuch", "--name", "main"],
])
def test_every_user_error_is_one_line_and_exit_code_2(args, one_run, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main([*args, "--results", str(one_run)]) == 2
    out = capsys.readouterr()
    assert out.out == "" and len(out.err.splitlines()) == 1
    assert out.err.startswith(f"benchbay {args[0]}: ") and "nosuch" in out.err


def test_gate_without_a_baseline_says_so_in_its_verdict(one_run, tmp_path, capsys):
    assert main(["gate", "tiny", "--results", str(one_run), "--markdown", str(tmp_path / "gate.md")]) == 0
    assert capsys.readouterr().out.startswith("### benchbay gate: ⚠️ no baseline: nothing was gated")
    assert (tmp_path / "gate.md").read_text().startswith("### benchbay gate: ⚠️ no baseline")
    assert main(["gate", "tiny", "--results", str(one_run), "--require-baseline"]) == 1
    assert "FAIL: no baseline" in capsys.readouterr().out


def test_a_baseline_is_saved_under_the_name_the_gate_looks_for(one_run, capsys):
    assert main(["baseline", "save", "tiny", "--results", str(one_run)]) == 0  # the suite's name
    saved = one_run / "baselines" / "cpu-x" / "tiny"
    assert (saved / "records.jsonl").is_file() and "`benchbay gate RUN`" in capsys.readouterr().out
    assert main(["gate", "tiny", "--results", str(one_run)]) == 0
    out = capsys.readouterr().out
    assert f"baseline: {saved}\n" in out and "no baseline" not in out
    assert main(["baseline", "save", "tiny", "--name", "main", "--results", str(one_run)]) == 0
    assert "`benchbay gate RUN --baseline main`" in capsys.readouterr().out  # another name: said how to gate on it
    other = store.run_dir(one_run, "other", "r2")
    store.append_record(other, Record(suite="other", run_id="r2", point_id="p", label="a", workload="w",
                                      knobs={"mbs": 1}, status=Status.OK, env={"machine_key": "cpu-x"}))
    assert main(["baseline", "save", "tiny", "other", "--results", str(one_run)]) == 2
    assert "--name: the runs hold 2 suites (other, tiny)" in capsys.readouterr().err


@pytest.mark.slow  # a profiled point's process: tests/test_profile.py covers what it writes
def test_profile_command_writes_traces(tmp_path, in_repo, capsys):
    suite = write_suite(tmp_path / "p.yaml", f"""
name: prof
workload: {{name: "{TINY}"}}
knobs: {{precision: fp32}}
sweep: {{points: [{{label: a}}, {{label: b, mbs: 2}}]}}
steps: {{warmup: 1, measure: 2}}
""")
    # the command in this process (its point in a process of its own, as always)
    assert main(["profile", str(suite), "--point", "b", "--results", str(tmp_path / "res")]) == 0, \
        capsys.readouterr().err
    traces = list((tmp_path / "res" / "prof-profile").glob("*/profiles/*/trace.json"))
    assert len(traces) == 1
    capsys.readouterr()
    assert main(["profile", str(suite), "--point", "nope", "--results", str(tmp_path / "res")]) == 2
    assert "no point labelled 'nope'" in capsys.readouterr().err


def test_the_peak_flops_override_reaches_the_report(tmp_path, monkeypatch):
    run = tmp_path / "fixture-train" / "r1"
    run.mkdir(parents=True)
    shutil.copy(Path(__file__).parent / "fixtures" / "train_records.jsonl", run / "records.jsonl")
    monkeypatch.setenv("BENCHBAY_PEAK_TFLOPS", "500")
    assert main(["report", str(run), "--out", str(tmp_path / "rep")]) == 0
    assert "NVIDIA H200: 500 TFLOP/s (override)" in (tmp_path / "rep" / "report.md").read_text()


def test_a_suite_file_gives_the_report_its_breakdown_and_one_the_runs_did_not_run_is_refused(tmp_path, capsys):
    """--suite: the breakdown of the suite as it is now (a run's manifest keeps the one it ran with)."""
    run = tmp_path / "fixture-train" / "r1"
    run.mkdir(parents=True)
    shutil.copy(Path(__file__).parent / "fixtures" / "train_records.jsonl", run / "records.jsonl")
    labels = ["baseline", "+attention", "+compile"]
    suite = write_suite(tmp_path / "fixture-train.yaml", f"""
name: fixture-train
workload: {{name: "{TINY}"}}
sweep: {{points: [{", ".join(f"{{label: '{label}', mbs: {i + 1}}}" for i, label in enumerate(labels))}]}}
breakdown: [{", ".join(f"'{label}'" for label in labels)}]
""")
    assert main(["report", str(run), "--out", str(tmp_path / "plain")]) == 0
    assert "Optimisation breakdown" not in (tmp_path / "plain" / "report.md").read_text()
    assert main(["report", str(run), "--out", str(tmp_path / "rep"), "--suite", str(suite)]) == 0
    waterfall = (tmp_path / "rep" / "report.md").read_text().split("### Optimisation breakdown")[1]
    assert "| +compile | ok |" in waterfall and "| +cuda_graph |" not in waterfall.split("####")[0]
    other = write_suite(tmp_path / "other.yaml", f"name: other\nworkload: {{name: \"{TINY}\"}}\n")
    capsys.readouterr()
    assert main(["report", str(run), "--out", str(tmp_path / "no"), "--suite", str(other)]) == 2
    err = capsys.readouterr().err
    assert str(other) in err and "'other' ran none of the runs reported (their suites: fixture-train)" in err
    assert not (tmp_path / "no").exists()

@pytest.mark.slow
def test_a_run_of_one_point_adds_to_the_suites_report(tmp_path, in_repo, capsys):
    suite = write_suite(tmp_path / "s.yaml", f"""
name: clipart
workload: {{name: "{TINY}"}}
knobs: {{precision: fp32}}
sweep: {{points: [{{label: first}}, {{label: second, mbs: 2}}]}}
steps: {{warmup: 1, measure: 2}}
""")
    for label in ("first", "second"):  # the command in this process (each point in a process of its own)
        assert main(["run", str(suite), "--point", label, "--results", str(tmp_path / "res"),
                     "--report-dir", str(tmp_path / "rep")]) == 0, capsys.readouterr().err
    report = (tmp_path / "rep" / "report.md").read_text()
    assert "| first | ok |" in report and "| second | ok |" in report  # the second run did not replace the first


def test_a_suite_file_names_its_history_one_point_is_singular_and_a_bad_resume_names_its_id(one_run, tmp_path,
                                                                                             capsys):
    suite = write_suite(tmp_path / "tiny.yaml", f"""
name: tiny
workload: {{name: "{TINY}"}}
""")
    assert main(["validate", str(suite)]) == 0
    assert "valid; 1 point (0 excluded) x 1 repeat of" in capsys.readouterr().out.replace("\n", " ")
    assert main(["history", str(suite), "--results", str(one_run)]) == 0  # as `history tiny`
    assert "change point(s)" in capsys.readouterr().out
    assert main(["run", str(suite), "--resume", "20261202-999999-xxxx", "--results", str(one_run)]) == 2
    assert "--resume 20261202-999999-xxxx: no run '20261202-999999-xxxx' of suite 'tiny'" in capsys.readouterr().err


def test_piped_show_fits_columns_by_cutting_its_long_texts(one_run, capsys, monkeypatch):
    run = store.run_dir(one_run, "tiny", "r1")
    store.append_record(run, Record(suite="tiny", run_id="r1", point_id="q", label="b", workload="w", knobs={"mbs": 1},
                                    status=Status.ERROR, reason="ValueError: " + "a long reason " * 20,
                                    env={"machine_key": "cpu-x"}))
    monkeypatch.setenv("COLUMNS", "100")
    assert main(["show", "tiny", "--results", str(one_run)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= 100 and any("ValueError: a long" in line and "..." in line for line in lines)


def test_a_line_break_in_a_stored_label_or_reason_never_forges_a_row(one_run, capsys, monkeypatch):
    run = store.run_dir(one_run, "tiny", "r1")
    store.append_record(run, Record(suite="tiny", run_id="r1", point_id="q", label="b\nforged  ok  999",
                                    workload="w", knobs={"mbs": 1}, status=Status.ERROR,
                                    reason="ValueError\rforged too", env={"machine_key": "cpu-x"}))
    for columns in ("400", None):  # a pipe, and a terminal's table
        if columns:
            monkeypatch.setenv("COLUMNS", columns)
        else:
            monkeypatch.setattr("benchbay.commands.output.console", Console(force_terminal=True, width=400))
        assert main(["show", "tiny", "--results", str(one_run)]) == 0
        out = capsys.readouterr().out
        assert not any(line.lstrip().startswith("forged") for line in out.splitlines()) and "\r" not in out
        assert "b\\nforged" in out and "ValueError\\rforged too" in out


def test_show_says_why_mfu_is_absent(one_run, capsys, monkeypatch):
    run = store.run_dir(one_run, "tiny", "r1")
    store.append_record(run, Record(suite="tiny", run_id="r1", point_id="q", label="b", workload="w", knobs={"mbs": 2},
                                    status=Status.OK, device="cpu", env={"machine_key": "cpu-x"},
                                    metrics={"step_time_s": 0.1, "samples_per_s_per_gpu": 20.0,
                                             "flops_per_sample": 1e9},
                                    series={"step_times_s": [0.1, 0.1, 0.1]}))
    assert main(["show", "tiny", "--results", str(one_run)]) == 0
    out = capsys.readouterr().out  # b gives its FLOPs but ran on a CPU, which has no peak (a gives none: no MFU due)
    assert "MFU: absent for b (no peak FLOP/s for a CPU: BENCHBAY_PEAK_TFLOPS=<TFLOP/s> gives every point one)" in out
    monkeypatch.setenv("BENCHBAY_PEAK_TFLOPS", "1")  # b's MFU: 20 GFLOP/s of 1 TFLOP/s
    assert main(["show", "tiny", "--results", str(one_run)]) == 0
    out = capsys.readouterr().out
    assert "MFU: absent" not in out and "2.0%" in out


def test_a_mistyped_suite_gets_a_did_you_mean(one_run, capsys):
    assert main(["show", "tinny", "--results", str(one_run)]) == 2
    assert "did you mean tiny?" in capsys.readouterr().err


def test_show_gives_a_decoder_its_decode_figures(tmp_path, capsys):
    run = tmp_path / "res" / "fixture-decode" / "r1"
    for line in (Path(__file__).parent / "fixtures" / "decode_records.jsonl").read_text().splitlines():
        store.append_record(run, Record.from_json({**json.loads(line), "run_id": "r1"}))
    assert main(["show", "fixture-decode", "--results", str(tmp_path / "res")]) == 0
    header = capsys.readouterr().out.splitlines()[1]
    assert "per-view median (ms)" in header and "step" not in header and "samples/s/" not in header
