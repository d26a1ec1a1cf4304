"""Run order: a warm-up process pays the first process's cold start, repeats run interleaved (each
other one reversed), and the breakdown never credits a lever with the order it ran in; resume,
--point, the batch search and the time budget keep working around them."""

import io
import json

import pytest
from rich.console import Console

from benchbay import store
from benchbay.analysis.breakdown import waterfall
from benchbay.analysis.tables import point_summary
from benchbay.launch.base import Outcome
from benchbay.launch.local import LocalLauncher
from benchbay.runner import SuiteRunner
from benchbay.suite import load
from tests.conftest import write_suite
from tests.fixtures.launchers import RecordingLauncher

COLD = "tests.fixtures.coldstart:ColdStart"


def _suite(tmp_path, points: str, repeats: int = 1, search: str = ""):
    # each step sleeps 20 ms; the run's first process sleeps 200 ms more a step (a 10x cold start)
    return load(write_suite(tmp_path / "cold.yaml", f"""
name: cold
workload: {{name: "{COLD}", params: {{marker: "{tmp_path / 'marker'}", step_s: 0.02, cold_s: 0.2}}}}
knobs: {{precision: fp32}}
sweep: {{points: {points}{search}}}
repeats: {repeats}
steps: {{warmup: 1, measure: 4}}
timeout: 120
"""))


LEVER = "[{label: eager}, {label: +lever, seed: 1}]"  # the same work: a lever that changes nothing


def _console() -> Console:
    return Console(file=io.StringIO(), width=200)


def _change(run) -> tuple[float, str]:
    row = waterfall(point_summary(store.load_runs([run])), ["eager", "+lever"]).iloc[1]
    return row["step_change"], row["verdict"]


@pytest.mark.slow
def test_the_warm_up_process_takes_the_cold_start_and_the_breakdown_credits_no_lever(tmp_path, in_repo):
    console = _console()
    summary = SuiteRunner(_suite(tmp_path, LEVER), tmp_path / "results", console=console).run_all()
    records = store.read_records(summary.run)
    assert summary.counts == {"ok": 2} and [r["label"] for r in records] == ["eager", "+lever"]
    assert not any(r["extra"]["cold_process"] for r in records)  # the cold process was the warm-up
    warm_up = store.read_manifest(summary.run)["warm_up"]
    assert warm_up["label"] == "eager" and warm_up["status"] == "ok" and warm_up["step_time_mean_s"] >= 0.2
    assert "warm-up process of eager (not recorded)" in console.file.getvalue()
    change, verdict = _change(summary.run)
    assert abs(change) < 0.5 and verdict != "faster"  # the same work, not the -91% of a cold first point


def test_without_the_warm_up_the_first_point_pays_the_cold_start(tmp_path, in_repo, in_process):
    """The planted cold start reaches the figures when nothing takes it: what the test above rules out."""
    summary = SuiteRunner(_suite(tmp_path, LEVER), tmp_path / "results", launcher=in_process, warm_up=False).run_all()
    assert [r["extra"]["cold_process"] for r in store.read_records(summary.run)] == [True, False]
    assert "warm_up" not in store.read_manifest(summary.run)
    change, _ = _change(summary.run)
    assert change < -0.5


def test_repeats_run_interleaved_each_other_one_reversed(tmp_path, in_repo, in_process):
    suite = _suite(tmp_path, "[{label: a}, {label: b, seed: 1}, {label: c, seed: 2}]", repeats=3)
    summary = SuiteRunner(suite, tmp_path / "results", launcher=in_process).run_all()
    order = [(r["label"], r["repeat"]) for r in store.read_records(summary.run)]
    assert order == [("a", 0), ("b", 0), ("c", 0), ("c", 1), ("b", 1), ("a", 1), ("a", 2), ("b", 2), ("c", 2)]
    assert store.read_manifest(summary.run)["warm_up"]["label"] == "a"


def test_a_resume_warms_up_before_its_first_missing_point_and_not_when_nothing_is_left(tmp_path, in_repo,
                                                                                       in_process):
    suite = _suite(tmp_path, "[{label: a}, {label: b, seed: 1}]", repeats=2)
    first = SuiteRunner(suite, tmp_path / "results", launcher=in_process).run_all()
    records = store.read_records(first.run)
    kept = [r for r in records if (r["label"], r["repeat"]) != ("a", 1)]  # a point the run lost
    (first.run / store.RECORDS).write_text("".join(json.dumps(r) + "\n" for r in kept))
    resumed = SuiteRunner(suite, tmp_path / "results", resume=True, launcher=in_process).run_all()
    assert resumed.run == first.run and resumed.counts == {"ok": 1}
    assert store.read_manifest(first.run)["warm_up"]["label"] == "a"
    assert sorted((r["label"], r["repeat"]) for r in store.read_records(first.run)) == \
        [("a", 0), ("a", 1), ("b", 0), ("b", 1)]
    again = SuiteRunner(suite, tmp_path / "results", resume=True, launcher=in_process).run_all()
    assert again.counts == {} and "warm_up" not in store.read_manifest(first.run)


def test_no_warm_up_on_the_command_line_runs_the_points_alone(tmp_path, in_repo):
    from benchbay.cli import main

    _suite(tmp_path, "[{label: a}]")
    assert main(["run", str(tmp_path / "cold.yaml"), "--results", str(tmp_path / "results"), "--no-warm-up",
                 "--no-report"]) == 0
    (run,) = (tmp_path / "results" / "cold").iterdir()
    assert [r["label"] for r in store.read_records(run)] == ["a"] and "warm_up" not in store.read_manifest(run)


def test_a_point_call_warms_up_on_its_own_point(tmp_path, in_repo, in_process):
    suite = _suite(tmp_path, "[{label: a}, {label: b, seed: 1}]")
    summary = SuiteRunner(suite, tmp_path / "results", labels=["b"], launcher=in_process).run_all()
    assert [r["label"] for r in store.read_records(summary.run)] == ["b"]
    assert store.read_manifest(summary.run)["warm_up"]["label"] == "b"


def test_a_batch_search_records_only_its_probes_after_the_warm_up(tmp_path, in_repo, in_process):
    suite = _suite(tmp_path, "[{label: eager}]", search=", search: {knob: mbs, min: 1, max: 4}")
    summary = SuiteRunner(suite, tmp_path / "results", launcher=in_process).run_all()
    records = store.read_records(summary.run)
    assert records and all(r["extra"]["search_knob"] == "mbs" for r in records)
    assert not any(r["extra"]["cold_process"] for r in records)
    assert store.read_manifest(summary.run)["warm_up"]["label"] == "eager"


def test_the_first_point_still_runs_under_a_tiny_time_budget(tmp_path, in_repo, in_process):
    suite = _suite(tmp_path, "[{label: a}, {label: b, seed: 1}]")
    summary = SuiteRunner(suite, tmp_path / "results", time_budget_s=0.001, launcher=in_process).run_all()
    assert summary.out_of_time and summary.counts == {"ok": 1}
    assert store.read_manifest(summary.run)["warm_up"]["label"] == "a"


def test_points_run_elsewhere_get_no_warm_up_here(tmp_path):
    launcher = RecordingLauncher("seed")
    summary = SuiteRunner(_suite(tmp_path, LEVER), tmp_path / "results", launcher=launcher).run_all()
    assert launcher.launched == [0, 1] and "warm_up" not in store.read_manifest(summary.run)


def test_the_warm_up_compiles_into_a_cache_of_its_own_and_runs_few_steps(tmp_path):
    """compile_cache: run is the points' to fill: the first point's compile stays a figure."""
    seen = []

    class Recorded(LocalLauncher):  # on this machine (so the runner warms up), recorded, not run
        def run(self, spec, workdir):
            seen.append((workdir.name, spec))
            return Outcome(status="ok", metrics={"step_time_s": 0.1, "samples_per_step": 1})

    _suite(tmp_path, LEVER)
    suite = load(tmp_path / "cold.yaml", ["compile_cache=run"])
    summary = SuiteRunner(suite, tmp_path / "results", launcher=Recorded()).run_all()
    (where, spec), *points = seen
    assert where == "warm-up" and len(points) == 2 and summary.counts == {"ok": 2}
    assert spec.compile_cache_dir is None and spec.steps.measure == 2 and not spec.profile
    assert all(p.compile_cache_dir and p.compile_cache_dir.endswith("inductor") for _, p in points)
