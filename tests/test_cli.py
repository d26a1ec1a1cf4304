"""The command line: validate fails before any process starts; list; run + show."""

import subprocess

from tests.conftest import TINY, benchbay_cmd, write_suite


def run(args, env, cwd):
    return subprocess.run(benchbay_cmd(*args), env=env, cwd=cwd, capture_output=True, text=True, timeout=300)


def test_invalid_suite_fails_validation_naming_file_and_key(tmp_path, in_repo, cli_env):
    bad = write_suite(tmp_path / "bad.yaml", f"""
name: bad
workload: {{name: "{TINY}"}}
knobs: {{mbs: two, warp_speed: 9}}
""")
    for command in ("validate", "run"):
        out = run([command, str(bad), "--results", str(tmp_path / "res")] if command == "run"
                  else [command, str(bad)], cli_env, in_repo)
        assert out.returncode == 2
        text = out.stderr.replace("\n", " ")
        assert f"{bad}: knobs.mbs: a positive integer, got 'two'" in text
        assert f"{bad}: knobs.warp_speed: a known knob of tiny:" in text and "'recompute'" in text
    assert not (tmp_path / "res").exists()  # nothing ran


def test_validate_counts_points_and_list_shows_knobs(tmp_path, in_repo, cli_env):
    good = write_suite(tmp_path / "good.yaml", f"""
name: good
workload: {{name: "{TINY}"}}
sweep: {{grid: {{mbs: [1, 2, 3]}}, exclude: [{{mbs: 3}}]}}
""")
    out = run(["validate", str(good), "--set", "repeats=2"], cli_env, in_repo)
    assert out.returncode == 0 and "3 points (1 excluded) x 2 repeats" in out.stdout.replace("\n", " ")
    listing = run(["list"], cli_env, in_repo)
    assert listing.returncode == 0
    for word in ("dreamzero", "wallx", "decode", "recompute", "sharding", "fsdp2_grad_op", "suites/"):
        assert word in listing.stdout


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
    assert out.returncode == 0, out.stderr
    assert "1 error, 1 ok" in out.stdout and "report:" in out.stdout
    assert (tmp_path / "rep" / "report.md").exists()
    shown = run(["show", "clishow", "--results", str(results), "--export", str(tmp_path / "t.csv")], cli_env, in_repo)
    assert shown.returncode == 0, shown.stderr
    assert "error" in shown.stdout and "fixture failure" in shown.stdout
    assert (tmp_path / "t.csv").exists()


def test_profile_command_writes_traces(tmp_path, in_repo, cli_env):
    suite = write_suite(tmp_path / "p.yaml", f"""
name: prof
workload: {{name: "{TINY}"}}
knobs: {{precision: fp32}}
sweep: {{points: [{{label: a}}, {{label: b, mbs: 2}}]}}
steps: {{warmup: 1, measure: 2}}
""")
    out = run(["profile", str(suite), "--point", "b", "--results", str(tmp_path / "res")], cli_env, in_repo)
    assert out.returncode == 0, out.stderr
    traces = list((tmp_path / "res" / "prof-profile").glob("*/profiles/*/trace.json"))
    assert len(traces) == 1
    bad = run(["profile", str(suite), "--point", "nope", "--results", str(tmp_path / "res")], cli_env, in_repo)
    assert bad.returncode == 2 and "no point labelled 'nope'" in bad.stderr
