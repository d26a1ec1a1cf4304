"""`benchbay tune`: the search finds a planted optimum without naming an infeasible or lossy trial,
resumes without re-running a finished trial, refuses bad input with nothing written, and leaves a
tune.json, a report section and a suite that runs."""

import dataclasses
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from benchbay import store
from benchbay.cli import main
from benchbay.record import Status
from benchbay.suite import SuiteError, load
from benchbay.tune.confirm import CONFIRMS, TRIAL
from benchbay.tune.memory import GIB, MemoryModel, fit, static_gib
from benchbay.tune.result import emit_suite, read_result
from benchbay.tune.study import Tuner
from benchbay.tune.trials import lost_update, rest_of
from tests.conftest import ROOT, benchbay_cmd, write_suite
from tests.fixtures import landscape
from tests.fixtures.landscape import OPTIMUM

LANDSCAPE = """\
name: landscape
workload: {name: "tests.fixtures.landscape:Landscape"}
steps: {warmup: 1, measure: 4}
tune:
  space: {mbs: {min: 2, max: 16, step: 2}, speed: [slow, fast, fastest], precision: [bf16_mixed, bf16]}
  constraints: {faithful: true}
  trials: 24
  confirm: {top: 2, repeats: 1}
"""


@pytest.fixture(autouse=True)
def planted_clock(monkeypatch):
    """In-process trials read their planted step times off the step clock rather than sleeping."""
    from benchbay.collect import timing

    clock = landscape.PlantedClock()
    monkeypatch.setattr(landscape, "spend", clock.spend)
    monkeypatch.setattr(timing, "time", clock)


def tuner(tmp_path, text=LANDSCAPE, **kwargs):
    from tests.conftest import InProcessLauncher

    return Tuner(load(write_suite(tmp_path / "suite.yaml", text)), tmp_path / "results",
                 launcher=InProcessLauncher(), **kwargs)


def test_tune_finds_the_planted_optimum_and_never_names_an_infeasible_or_lossy_trial(tmp_path, in_repo):
    summary = tuner(tmp_path).run_study()
    result = summary.result
    ran = [t for t in result["trials"] if t["status"] != "skipped"]
    assert 12 <= len(ran) <= 24  # the budget, or every configuration measured or refused before it
    assert result["best"]["knobs"] == OPTIMUM
    assert result["best"]["confirmed"] and result["best"]["runs"] == 2
    # the winner and every feasible trial: ok, faithful, within the planted capacity
    feasible = [t for t in result["trials"] if t["feasible"]]
    assert feasible and all(t["status"] == "ok" and t["fidelity"] == "faithful" for t in feasible)
    assert all(t["knobs"]["precision"] == "bf16_mixed" for t in feasible)
    lossy = [t for t in result["trials"] if t["knobs"]["precision"] == "bf16" and t["status"] == "ok"]
    assert all(not t["feasible"] and "fidelity" in t["why"] for t in lossy)
    # once pure bf16 lost the update, no other pure-bf16 configuration is run: it is refused, with why
    assert len(lossy) == 1
    assert any(r["knobs"]["precision"] == "bf16" and r["why"].startswith(
        f"precision=bf16, optimizer=adamw and offload=none lost the update in trial {lossy[0]['trial']}")
        for r in result["refused"])
    # an OOM bounds its configuration: no larger batch of it is run after it
    for oom in (t for t in result["trials"] if t["status"] == "oom"):
        rest = {k: v for k, v in oom["knobs"].items() if k != "mbs"}
        later = [t for t in result["trials"] if t["trial"] > oom["trial"]
                 and {k: v for k, v in t["knobs"].items() if k != "mbs"} == rest]
        assert all(t["knobs"]["mbs"] < oom["knobs"]["mbs"] for t in later)
    # each trial is a record naming it; confirmations are repeats of the same point
    records = store.typed_records(summary.run)
    assert sorted(r.extra[TRIAL] for r in records if CONFIRMS not in r.extra) == [t["trial"] for t in result["trials"]]
    assert {r.repeat for r in records if CONFIRMS in r.extra} == {1}
    assert read_result(summary.run)["best"] == result["best"]
    pareto = result["pareto"]  # the CPU measures no device memory: no front to draw
    assert pareto == []


def test_a_tune_resumes_where_it_stopped_without_running_a_finished_trial_again(tmp_path, in_repo):
    first = tuner(tmp_path, trials=3).run_study()
    assert len(first.result["trials"]) >= 3
    again = tuner(tmp_path, trials=6, resume=True).run_study()
    assert again.run == first.run
    records = store.typed_records(first.run)
    trials = [r for r in records if CONFIRMS not in r.extra]
    assert sum(r.status != Status.SKIPPED for r in trials) == 6
    assert len({r.point_id for r in trials}) == len(trials)  # no configuration measured twice
    assert sorted(r.extra[TRIAL] for r in trials) == list(range(len(trials)))


def test_retry_failed_measures_the_failed_trials_again_first_and_keeps_their_failures(tmp_path, in_repo, monkeypatch):
    from tests.fixtures.landscape import Landscape

    loss = Landscape.loss

    def broken(self, model, batch):  # a bug of the step at one speed, fixed before the resume
        if self.knob_values["speed"] == "fastest":
            raise RuntimeError("planted: Expected self.size(1) to be divisible by 16")
        return loss(self, model, batch)

    monkeypatch.setattr(Landscape, "loss", broken)
    first = tuner(tmp_path, trials=8).run_study().result
    failed = [t for t in first["trials"] if t["status"] == "error"]
    assert failed and all(t["knobs"]["speed"] == "fastest" for t in failed)
    monkeypatch.setattr(Landscape, "loss", loss)
    with pytest.raises(ValueError, match="--retry-failed: with --resume"):
        tuner(tmp_path, retry_failed=True)
    again = tuner(tmp_path, trials=8 + len(failed), resume=True, retry_failed=True).run_study().result
    retried = again["trials"][len(first["trials"]):][:len(failed)]  # measured before any new proposal
    assert [t["knobs"] for t in retried] == [t["knobs"] for t in failed]
    assert all(t["status"] != "error" for t in retried)
    assert [t for t in again["trials"] if t["status"] == "error"] == failed  # the failures stay on record
    # a second resume does not retry what was retried
    third = tuner(tmp_path, trials=8 + len(failed), resume=True, retry_failed=True).run_study().result
    assert len(third["trials"]) == len(again["trials"])


def test_the_suites_start_configurations_run_first_and_a_resume_runs_those_added_since(tmp_path, in_repo):
    first_start = "  start: [{mbs: 4, speed: slow, precision: bf16_mixed}]\n"
    first = tuner(tmp_path, LANDSCAPE + first_start, trials=2).run_study().result
    assert first["trials"][0]["knobs"] == {"mbs": 4, "speed": "slow", "precision": "bf16_mixed"}
    # a start the suite gains later (the hand-walked best, say) is measured first on resume, once
    both = "  start: [{mbs: 4, speed: slow, precision: bf16_mixed}, {mbs: 6, speed: fast}]\n"
    again = tuner(tmp_path, LANDSCAPE + both, trials=3, resume=True).run_study().result
    added = again["trials"][len(first["trials"])]
    assert {k: added["knobs"][k] for k in ("mbs", "speed")} == {"mbs": 6, "speed": "fast"}
    configs = [tuple(sorted(t["knobs"].items())) for t in again["trials"]]
    assert len(configs) == len(set(configs))


@pytest.mark.slow
def test_an_excluded_combination_is_never_run_and_says_why(tmp_path, in_repo):
    """A tune suite's sweep.exclude keeps a combination out of its trials, each refusal with its rule."""
    text = LANDSCAPE.replace("trials: 24", "trials: 6") + "sweep:\n  exclude: [{speed: fastest}]\n"
    result = tuner(tmp_path, text).run_study().result
    assert result["trials"] and all(t["knobs"]["speed"] != "fastest" for t in result["trials"])
    refused = [r for r in result["refused"] if r["knobs"]["speed"] == "fastest"]
    assert refused and all(r["why"].startswith("excluded by sweep.exclude[0]") for r in refused)


def test_a_trial_a_call_stopped_unfinished_is_not_started_again_in_a_call_too_short_for_it(tmp_path, in_repo):
    """A call's limit (a Ctrl-C) stops a trial: the manifest keeps its knobs and how long it ran, and a
    resumed call whose time budget is under 1.5 times that refuses it, with why, rather than start it first again."""
    from tests.conftest import InProcessLauncher

    class StopsTheSecondTrial(InProcessLauncher):
        def run(self, spec, workdir):
            if spec.knobs.get("speed") == "slow":
                raise KeyboardInterrupt
            return super().run(spec, workdir)

    text = LANDSCAPE.replace("trials: 24", "trials: 6").replace("  confirm:", "  start: [{mbs: 4, speed: fast, "
                                                                "precision: bf16_mixed}, {mbs: 4, speed: slow, "
                                                                "precision: bf16_mixed}]\n  confirm:")
    suite = load(write_suite(tmp_path / "suite.yaml", text))
    first = Tuner(suite, tmp_path / "results", launcher=StopsTheSecondTrial()).run_study()
    assert first.interrupted and len(first.result["trials"]) == 1
    (stopped,) = store.read_manifest(first.run)["stopped_trials"]
    assert stopped["knobs"] == {"mbs": 4, "speed": "slow", "precision": "bf16_mixed"} and stopped["seconds"] >= 0
    # as if it had run 600 s: a call of 500 s refuses it; one of 900 s would start it again
    manifest = store.read_manifest(first.run)
    manifest["stopped_trials"][0]["seconds"] = 600.0
    store.write_manifest(first.run, manifest)
    again = tuner(tmp_path, text, resume=True, time_budget_s=500).run_study().result
    assert all(t["knobs"] != stopped["knobs"] for t in again["trials"])
    assert any(r["knobs"] == stopped["knobs"] and r["why"].startswith("a call stopped it unfinished after 600 s")
               for r in again["refused"])
    assert store.read_manifest(first.run)["stopped_trials"][0]["seconds"] == 600.0  # kept for the calls after


def test_a_killed_tune_resumes_from_its_records(tmp_path, in_repo, cli_env, capsys):
    text = LANDSCAPE.replace("trials: 24", "trials: 4")
    suite = write_suite(tmp_path / "suite.yaml", text)
    results = tmp_path / "results"
    proc = subprocess.Popen(benchbay_cmd("tune", str(suite), "--results", str(results), "--no-report"),
                            env=cli_env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    records = lambda: [p for p in results.glob("landscape/*/records.jsonl") if p.stat().st_size]  # noqa: E731
    deadline = time.monotonic() + 120
    while not records() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)  # mid-study: no tune.json, the manifest says running
    proc.wait()
    run = records()[0].parent
    before = len(store.typed_records(run))
    # the resume in this process (the CLI's --resume reaches the Tuner: the bad-input test below)
    done = tuner(tmp_path, text, resume=True).run_study()
    err = capsys.readouterr().err
    assert done.run == run and f"resumed {run.name}: {before} trials" in err
    assert f"trial {before} starts: " in err  # said before a trial's minutes, not only after
    trials = [r for r in store.typed_records(run) if CONFIRMS not in r.extra]
    assert sum(r.status != Status.SKIPPED for r in trials) == 4
    assert len({r.point_id for r in trials}) == len(trials)
    assert store.read_manifest(run)["state"] == "complete"


def test_a_constraint_no_trial_meets_is_said_with_the_closest_trials(tmp_path, in_repo):
    text = LANDSCAPE.replace("precision: [bf16_mixed, bf16]", "precision: [bf16]").replace("trials: 24", "trials: 3")
    result = tuner(tmp_path, text).run_study().result
    assert result["best"] is None
    closest = result["no_feasible"]["closest"]
    assert closest and all("fidelity" in c["why"] or "oom" in c["why"] for c in closest)


def test_the_winner_is_emitted_as_a_suite_that_loads_and_a_report_shows_the_tune(tmp_path, in_repo):
    from benchbay.report import build_report
    from benchbay.suite.model import SuiteMeta

    tune = tuner(tmp_path, trials=5)
    summary = tune.run_study()
    # `benchbay tune --emit-suite` passes the suite of the user's file: its module:Class may be checked
    path = emit_suite(summary.run, tmp_path / "tuned.yaml", tune.suite.raw)
    suite = load(path)
    (point,) = suite.expand()
    assert point.label == "tuned"
    assert {k: point.knobs[k] for k in summary.result["best"]["knobs"]} == summary.result["best"]["knobs"]
    out = tmp_path / "report"
    build_report(store.load_runs([summary.run]), out, suite_meta=SuiteMeta.of_run(summary.run),
                 tunes={summary.run.name: summary.result})
    text = (out / "report.md").read_text()
    assert f"Tune {summary.run.name}" in text and "**Best: trial" in text
    assert (out / f"landscape-{summary.run.name}-tune-progress.png").stat().st_size > 0


BAD = {
    "an unknown knob": ("space: {nope: [1]}", "tune.space.nope: a known knob"),
    "an unknown value": ("space: {speed: [slow, warp]}", "tune.space.speed[1]: one of"),
    "an empty space": ("space: {}", "tune.space: a non-empty mapping"),
    "a budget of 0": ("space: {speed: [slow]}\n  trials: 0", "tune.trials: an integer from 1"),
    "no budget": ("space: {speed: [slow]}", "tune: a budget"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_tune_block_is_one_error_naming_its_key(tmp_path, case):
    block, expected = BAD[case]
    text = f"name: bad\nworkload: {{name: 'tests.fixtures.landscape:Landscape'}}\ntune:\n  {block}\n"
    with pytest.raises(SuiteError, match=expected.replace("[", r"\[").replace("]", r"\]")):
        load(write_suite(tmp_path / "bad.yaml", text))


def test_bad_tune_input_on_the_command_line_exits_2_with_nothing_written(tmp_path, in_repo, capsys):
    def exit_code(*args: str) -> int:  # the CLI in this process: main's code, or argparse's exit
        try:
            return main([*args, "--results", str(results)])
        except SystemExit as exc:
            return exc.code

    suite = write_suite(tmp_path / "suite.yaml", LANDSCAPE)
    other = write_suite(tmp_path / "other.yaml", LANDSCAPE.replace("name: landscape", "name: other"))
    results = tmp_path / "results"
    bad = write_suite(tmp_path / "bad.yaml", LANDSCAPE.replace("speed: [slow, fast, fastest]", "speed: [warp]"))
    store.write_manifest(results / "other" / "20260101-000000-abcd", {"suite": "other", "tune": {}})
    for args in (["tune", str(bad)], ["tune", str(suite), "--trials", "0"],
                 ["tune", str(suite), "--device-seconds", "nan"],
                 ["tune", str(suite), "--resume", "20260101-000000-abcd"], ["run", str(suite)]):
        assert exit_code(*args) == 2, (args, capsys.readouterr().err)
        assert not (results / "landscape").exists(), args
    assert "search it with `benchbay tune" in capsys.readouterr().err  # run of a tune suite says what to use
    # another suite's study, named by its id: not a tune of this suite
    manifest = {"suite": "other", "tune": {"space": {}}}
    run = results / "landscape" / "20260101-000000-abcd"
    store.write_manifest(run, manifest)
    assert exit_code("tune", str(suite), "--resume", run.name) == 2
    assert "not a tune of suite 'landscape'" in capsys.readouterr().err
    assert sorted(p.name for p in run.iterdir()) == ["manifest.json"]
    assert other.exists()


def test_the_memory_line_refuses_a_batch_it_predicts_cannot_fit():
    assert fit([(4, 10.0)]) is None  # one batch: no line
    line = fit([(4, 30.0), (8, 50.0), (12, 70.0)])
    assert line.intercept == pytest.approx(10.0) and line.slope == pytest.approx(5.0)
    model = MemoryModel(capacity_gib=80.0)
    model.observe("rest", 4, 30.0, oom=False)
    assert model.refuses("rest", 64) is None  # one point says nothing of the slope
    model.observe("rest", 8, 50.0, oom=False)
    assert model.predict("rest", 12) == pytest.approx(70.0)
    assert model.refuses("rest", 14) is None  # 80 GiB: not over the card
    assert "predicts 85.0 GiB" in model.refuses("rest", 15)
    assert model.largest_fitting("rest", range(2, 20, 2)) == 14
    model.observe("rest", 12, None, oom=True)  # measured beats predicted
    assert "batch 12" in model.refuses("rest", 12) and model.largest_fitting("rest", range(2, 20, 2)) == 10
    model.observe("rest", 10, 79.5, oom=False)  # a batch that ran fits, whatever the line says
    assert model.refuses("rest", 10) is None
    assert model.refuses("other", 64) is None


def test_a_tune_json_that_is_not_one_is_skipped_with_a_warning(tmp_path):
    (tmp_path / "tune.json").write_text(json.dumps({"trials": "x"}))
    with pytest.warns(UserWarning, match="tune.json: skipping a tune result"):
        assert read_result(tmp_path) is None


def test_a_configuration_with_one_batch_measured_borrows_the_slope_of_its_nearest_neighbour_of_its_recompute():
    model = MemoryModel(capacity_gib=140.0)
    lone = (("lm_head", "text"), ("optimizer", "a"), ("recompute", "off"))
    across = (("lm_head", "text"), ("optimizer", "a"), ("recompute", "sel"))  # one knob apart: recompute
    near = (("lm_head", "all"), ("optimizer", "a"), ("recompute", "off"))  # one knob apart
    far = (("lm_head", "all"), ("optimizer", "b"), ("recompute", "off"))  # two knobs apart
    for rest, per_sample in ((across, 0.5), (near, 2.0), (far, 1.0)):
        for batch in (20, 40):
            model.observe(rest, batch, 20.0 + per_sample * batch, oom=False)
    assert model.predict(lone, 44) is None  # nothing of it measured yet
    model.observe(lone, 44, 137.0, oom=False)
    assert model.predict(lone, 52) == pytest.approx(137.0 + 2.0 * 8)
    assert "predicts 153.0 GiB" in model.refuses(lone, 52)
    assert model.refuses(lone, 44) is None and model.refuses(lone, 40) is None  # it ran at 44
    alone = MemoryModel(capacity_gib=140.0)
    for batch in (20, 40):  # what a sample holds under another recompute says nothing of this one's
        alone.observe(across, batch, 20.0 + 0.5 * batch, oom=False)
    alone.observe(lone, 44, 137.0, oom=False)
    assert alone.predict(lone, 52) is None and alone.refuses(lone, 52) is None


def test_the_static_memory_is_what_the_parameters_hold_whatever_the_batch():
    """Weights and gradients by precision, the optimizer's own state, frozen weights in bf16; unknown
    where the record does not count its parameters or sharding or offloading moves them."""
    counts = {"trainable_params": GIB, "frozen_params": GIB // 2}
    assert static_gib({"precision": "bf16_mixed", "optimizer": "adamw"}, counts) == 4 + 4 + 8 + 1
    assert static_gib({"precision": "bf16", "optimizer": "adamw_sr"}, counts) == 2 + 2 + 8 + 1
    assert static_gib({"precision": "bf16", "optimizer": "adamw_sr_8bit"}, counts) == 2 + 2 + 2 + 1
    assert static_gib({"precision": "bf16", "optimizer": "adamw"}, counts) == 2 + 2 + 4 + 1  # state as the weights
    assert static_gib({"precision": "bf16", "optimizer": "adamw"}, {"trainable_params": None}) is None
    for moved in ({"sharding": "fsdp2_full"}, {"offload": "optimizer"}, {"optimizer": "ao_cpu_offload"}):
        assert static_gib({"precision": "bf16_mixed", "optimizer": "adamw", **moved}, counts) is None


def test_a_lone_batch_without_a_neighbours_line_predicts_along_what_it_added_over_its_static_memory():
    model = MemoryModel(capacity_gib=140.0)
    model.observe("rest", 20, 134.0, oom=False, static=74.0)  # 3 GiB a sample over 74
    assert model.predict("rest", 12) == pytest.approx(110.0)
    assert model.refuses("rest", 22) is None  # 140.0 GiB: not over the card
    assert "predicts 143.0 GiB" in model.refuses("rest", 23)
    model.observe("rest", 12, 107.0, oom=False)  # two batches: its own line from now on
    assert model.predict("rest", 16) == pytest.approx(120.5)


def test_replayed_over_the_committed_dreamzero_tune_the_static_memory_predicts_its_last_trial():
    """dreamzero-5b-tune (H200) had no configuration with a second batch before its last trial: the
    line alone made no prediction; the static memory predicts trial 7 within 4 GiB of its peak, as the
    guide says."""
    run = committed_tune("NVIDIA H200", "dreamzero-5b-tune")
    first = {}
    for record in store.read_records(run):
        first.setdefault(record["extra"]["tune_trial"], record)
    model, predicted, space = MemoryModel(capacity_gib=139.8), {}, read_result(run)["space"]
    for number, record in sorted(first.items()):
        if record["status"] not in ("ok", "oom"):
            continue
        rest = rest_of({knob: record["knobs"][knob] for knob in space})
        batch, peak = record["knobs"]["mbs"], record["metrics"].get("peak_mem_reserved_gib")
        if (estimate := model.predict(rest, batch)) is not None:
            predicted[number] = (estimate, peak)
        assert model.refuses(rest, batch) is None or record["status"] == "oom", number
        model.observe(rest, batch, peak, record["status"] == "oom", static_gib(record["knobs"], record["extra"]))
    (estimate, peak), = predicted.values()
    assert list(predicted) == [7] and abs(estimate - peak) < 4.0
    said = f"it predicts trial 7 at {estimate:.1f} GiB against {peak:.1f} measured"
    assert said in " ".join((ROOT / "docs/guide.md").read_text().split())


def committed_tune(gpu: str, suite: str = "wallx-tune") -> Path:
    """The one committed run of ``suite``'s tune on ``gpu``."""
    (run,) = [p.parent for p in (ROOT / "results" / suite).glob("*/tune.json")
              if read_result(p.parent)["gpu"] == gpu]
    return run


@pytest.mark.parametrize("gpu, capacity, refused", [("NVIDIA H200", 139.8, [22, 23]),
                                                    ("NVIDIA H100 80GB HBM3", 79.2, [])])
def test_replayed_over_the_committed_wallx_tunes_the_memory_line_predicts_what_ran_and_refuses_what_did_not(
        gpu, capacity, refused):
    """The trials in order, as the study saw them: each prediction made for a trial that then ran is
    within 4 GiB of its peak, and the trials it refuses are the ones that ran out of memory."""
    model, predicted, refusals = MemoryModel(capacity_gib=capacity), 0, []
    for trial in read_result(committed_tune(gpu))["trials"]:
        rest, batch, peak = rest_of(trial["knobs"]), trial["knobs"]["mbs"], trial["peak_mem_reserved_gib"]
        if model.refuses(rest, batch):
            refusals.append(trial["trial"])
        estimate = model.predict(rest, batch)
        if estimate is not None and trial["status"] == "ok":
            predicted += 1
            assert abs(estimate - peak) < 4.0, trial["trial"]
        model.observe(rest, batch, peak, trial["status"] == "oom")
    assert predicted >= 1 and refusals == refused


@pytest.mark.parametrize("suite", ["wallx-tune", "dreamzero-5b-tune"])
def test_the_readmes_tune_figures_are_those_of_the_committed_tunes(suite):
    """README: "`wallx-tune` found 65.34 samples/s/GPU (faithful, 3 processes; trial 20 of 24 at 876
    device-seconds)", and the same sentence for dreamzero-5b-tune."""
    result = read_result(committed_tune("NVIDIA H200", suite))  # "On one H200": the H100 run is the guide's
    best = result["best"]
    spent = sum(t["device_s"] for t in result["trials"] if t["trial"] <= best["trial"])
    said = (f"`{suite}` found {best['objective']:.2f} samples/s/GPU ({best['metrics']['fidelity']}, "
            f"{best['runs']} processes; trial {best['trial']} of {len(result['trials'])} at {spent:.0f} "
            "device-seconds)")
    assert said in " ".join((ROOT / "README.md").read_text().split())
    assert best["confirmed"] and not best["ties"]


def test_the_guides_dreamzero_tune_figures_are_its_tune_json():
    """docs/guide.md's paragraph on the H200 dreamzero-5b-tune: the winner's mean, interval and peak,
    the runner-up's mean and ratio, the device time, all from tune.json."""
    result = read_result(committed_tune("NVIDIA H200", "dreamzero-5b-tune"))
    winner, runner_up = result["confirmed"]
    text = " ".join((ROOT / "docs/guide.md").read_text().split())
    assert (f"{result['device_seconds']:,.0f} of {result['budget']['device_seconds']:,.0f} device-seconds" in text)
    assert (f"found {winner['mean']:.2f} samples/s/GPU (mean of {winner['runs']} processes, 95% interval "
            f"{winner['low']:.2f} to {winner['high']:.2f})") in text
    assert f"({result['best']['metrics']['peak_mem_reserved_gib']:.1f} GiB reserved)" in text
    assert (f"was {1 - runner_up['ratio']:.1%} slower, outside the noise ({runner_up['mean']:.2f}, "
            f"{runner_up['runs']} processes)") in text and not runner_up["tie"]


# ---- defects found in review: each planted as it was reproduced --------------------------------
def _record(t: Tuner, params, status=Status.OK, metrics=None, extra=None, repeat=0):
    """A record of a trial as the runner would append it, without running it."""
    from benchbay.record import Record

    point = t.point(params, 0)
    return Record(suite="landscape", run_id=t.run.name, point_id=point.point_id, repeat=repeat,
                  workload=point.workload, knobs=point.knobs, status=status, metrics=metrics or {},
                  extra=extra or {}, duration_s=10.0, env={"machine_key": t.runner.env["machine_key"]})


def _told(t: Tuner, params, **record) -> None:
    t.trials.append(t._trial(len(t.trials), params, _record(t, params, **record)))


def small(more: str = "", confirm: str = "{top: 2, repeats: 1}") -> str:
    """A landscape over the batch and two speeds, without constraints unless ``more`` gives them."""
    return (LANDSCAPE.split("tune:")[0] + "tune:\n  space: {mbs: {min: 2, max: 16, step: 2}, speed: [slow, fast]}\n"
            f"  trials: 5\n  confirm: {confirm}\n{more}")


def _planted_run(root, workload, best_knobs, name="s"):
    """A run folder as a pull request could plant it: a manifest naming the workload, a winner."""
    run = root / name / "20260101-000000-abcd"
    store.write_manifest(run, {"suite": name, "suite_as_run": {"name": name, "workload": workload,
                                                               "steps": {"warmup": 1, "measure": 2}}})
    (run / "records.jsonl").write_text("")
    (run / "tune.json").write_text(json.dumps({
        "trials": [], "confirmed": [], "pareto": [], "refused": [], "importances": {}, "memory_estimate": {},
        "objective": {"metric": "samples_per_s_per_gpu"}, "device_seconds": 1,
        "best": {"trial": 0, "knobs": best_knobs}}))
    return run


def test_report_emit_suite_never_imports_a_workload_a_stored_run_names(tmp_path, monkeypatch, capsys):
    marker = tmp_path / "PWNED"
    (tmp_path / "planted.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).write_text('ran')\n"
                                         "class X: pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # importable, as the run's own folder is from the repo root
    run = _planted_run(tmp_path / "results", {"name": "planted:X"}, {})
    out = tmp_path / "out.yaml"
    assert main(["report", str(run), "--emit-suite", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'planted:X', not a registered one" in err
    assert not marker.exists() and not out.exists()


def test_an_emitted_suite_is_checked_before_it_is_written(tmp_path):
    out = tmp_path / "out.yaml"
    bad = _planted_run(tmp_path / "results", "wallx", {"mbs": 44, "precision": "fp3"}, name="bad")
    with pytest.raises(ValueError, match="does not check, nothing written: .*knobs.precision"):
        emit_suite(bad, out)
    assert list(tmp_path.glob("*.yaml")) == [] and not list(tmp_path.glob(".out.yaml*"))
    good = _planted_run(tmp_path / "results", "wallx", {"mbs": 44, "precision": "bf16_mixed"}, name="wx-tune")
    assert emit_suite(good, out) == out
    (point,) = load(out).expand()
    assert point.workload == "wallx" and point.knobs["mbs"] == 44 and load(out).name == "out"  # its file's
    odd = tmp_path / "my tuned.yaml"  # no suite name: the tuned suite's
    assert load(emit_suite(good, odd)).name == "wx-tuned"


def test_the_trials_take_the_params_of_this_cards_memory_class(tmp_path):
    from tests.conftest import InProcessLauncher

    class Card80(InProcessLauncher):  # an 80 GB CUDA card, as LocalLauncher reads it on a GPU host
        def device(self, requested):
            return "cuda"

        def memory_gb(self, device):
            return 85.9

    text = ('name: landscape\nworkload: {name: "tests.fixtures.landscape:Landscape", '
            "params: {width: {cpu: 8, cuda: {24: 8, 80: 64}}}}\ndevices: {type: cuda}\n"
            "tune:\n  space: {speed: [slow, fast]}\n  trials: 2\n")
    t = Tuner(load(write_suite(tmp_path / "suite.yaml", text)), tmp_path / "results", launcher=Card80())
    assert t.point({"speed": "fast"}, 0).params == {"width": 64}


def test_a_trial_its_confirmation_found_infeasible_is_never_named_best(tmp_path):
    from benchbay.tune.study import TuneSummary

    t = tuner(tmp_path, small())
    fastest, next_best = {"mbs": 12, "speed": "fast"}, {"mbs": 8, "speed": "fast"}
    _told(t, fastest, metrics={"samples_per_s_per_gpu": 100.0})
    _told(t, next_best, metrics={"samples_per_s_per_gpu": 90.0})
    # the fastest one's confirmation ran out of memory; the budget had no room to confirm the other
    t.confirm_records.append(_record(t, fastest, status=Status.OOM, repeat=1, extra={TRIAL: 0, CONFIRMS: 0}))
    best = t.result(TuneSummary(t.run, {}))["best"]
    assert best["trial"] == 1 and best["knobs"] == next_best
    assert best["runs"] == 1 and best["confirmed"] is False


def _with(record, **knobs):
    return dataclasses.replace(record, knobs={**record.knobs, **knobs})


def test_faithful_counts_gradients_of_other_arithmetic_that_were_not_measured_as_half_a_violation(tmp_path):
    t = tuner(tmp_path, small("  constraints: {faithful: true}\n"))
    metrics = {"samples_per_s_per_gpu": 99.0, "update_applied_share": 1.0, "update_applied_share_se": 0.0}
    skipped = _record(t, {"mbs": 4, "speed": "fast"}, metrics=metrics,
                      extra={"fidelity": "faithful", "compute_fidelity_skipped": "not measured: 20 GiB are free"})
    # compile's fusions stay at bf16's noise floor: only FP8 GEMMs leave gradients unknown
    for knobs, violation in (({"float8": "tensorwise"}, 0.5), ({"encoders_float8": "tensorwise"}, 0.5),
                             ({"compile": "blocks"}, 0.0), ({}, 0.0)):
        value, got, why = t.judge(_with(skipped, **knobs))
        assert value == 99.0 and got == violation
        assert ("compute fidelity not measured" in why) == bool(violation)
    measured = dataclasses.replace(skipped, extra={"fidelity": "faithful", "compute_fidelity": "faithful"})
    assert t.judge(_with(measured, float8="tensorwise"))[1] == 0.0


def test_a_lost_update_prunes_its_precision_optimizer_and_offload_only(tmp_path):
    t = tuner(tmp_path, small("  constraints: {faithful: true}\n"))
    params = {"mbs": 4, "speed": "fast"}
    lossy = _with(_record(t, params, metrics={"samples_per_s_per_gpu": 1.0, "update_applied_share": 0.02,
                                              "update_applied_share_se": 0.001}, extra={"fidelity": "lossy"}),
                  precision="bf16")
    t.trials.append(t._trial(0, params, lossy))
    assert "offload=none lost the update in trial 0" in lost_update(t.trials, lossy.knobs)
    # the CPU optimizer steps fp32 masters of the bf16 weights: another update
    assert lost_update(t.trials, {**lossy.knobs, "offload": "optimizer"}) is None
    # lossy for tensors its recompute left without gradients, its share whole: not these knobs' loss
    t.trials[0] = t._trial(0, params, dataclasses.replace(
        lossy, metrics={**lossy.metrics, "update_applied_share": 1.0},
        extra={"fidelity": "lossy", "fidelity_untrained": "1 trainable tensors ..."}))
    assert not t.trials[0].feasible and lost_update(t.trials, lossy.knobs) is None


def test_early_stop_applies_only_to_an_objective_that_rewards_samples_per_second():
    from benchbay.suite.tune import Objective, Tune

    def stops(metric, direction):
        return Tune(space={"mbs": (2,)}, objective=Objective(metric, direction), trials=1).stops_early()

    assert stops("samples_per_s_per_gpu", "maximize") and stops("mfu", "maximize")
    assert stops("cost_per_m_samples", "minimize")
    assert not stops("samples_per_s_per_gpu", "minimize") and not stops("step_time_s", "minimize")


def test_a_trial_with_the_better_step_time_is_not_stopped_for_its_fewer_samples_per_second(tmp_path, in_repo):
    # step time, minimised: the smaller batch steps faster at fewer samples/s
    text = small("  objective: step_time_s\n  start: [{mbs: 12, speed: fast}, {mbs: 2, speed: fast}]\n",
                 confirm="false")
    result = tuner(tmp_path, text, trials=2).run_study().result
    assert not any(t["stopped_early"] for t in result["trials"])
    assert result["best"]["knobs"] == {"mbs": 2, "speed": "fast"}


def test_the_cards_memory_bounds_a_larger_max_peak(tmp_path):
    t = tuner(tmp_path, small("  constraints: {max_peak_gib: 200}\n"))
    for mbs, peak in ((8, 30.0), (16, 50.0)):  # 2.5 GiB a sample on an 80 GiB card
        _told(t, {"mbs": mbs, "speed": "fast"}, metrics={"peak_mem_reserved_gib": peak, "device_mem_total_gib": 80.0,
                                                         "samples_per_s_per_gpu": 1.0})
    assert t.memory.capacity_gib == 80.0
    assert "predicts 110.0 GiB, over the card's 80.0 GiB" in t._refusal({"mbs": 40, "speed": "fast"})


def test_the_closest_trials_are_ranked_by_the_objectives_direction(tmp_path):
    from benchbay.tune.study import TuneSummary

    t = tuner(tmp_path, small("  objective: step_time_s\n  constraints: {faithful: true}\n"))
    for mbs, step in ((2, 0.020), (4, 0.050), (6, 0.035)):
        _told(t, {"mbs": mbs, "speed": "fast"}, metrics={"step_time_s": step}, extra={"fidelity": "lossy"})
    _told(t, {"mbs": 8, "speed": "fast"}, status=Status.OOM)
    closest = t.result(TuneSummary(t.run, {}))["no_feasible"]["closest"]
    assert [c["trial"] for c in closest] == [0, 2, 1]  # the fastest step first; the oom, without a value, after


MALFORMED = {  # a manifest's field of the wrong type: what --resume and --resume RUN_ID say of it
    "env": ({"env": "planted"}, "no tune of suite 'landscape' on this machine", "the study ran on None"),
    "suite_as_run": ({"suite_as_run": ["x"]}, None, "its manifest's suite_as_run is a list, not a mapping"),
    "tune": ({"tune": "x"}, "no tune of suite 'landscape' on this machine", "not a tune of suite 'landscape'"),
}


def test_a_manifests_malformed_stopped_trials_are_passed_over():
    from benchbay.tune.resume import stopped_trials

    good = {"knobs": {"mbs": 4}, "seconds": 12.5}
    for bad in ("x", 3, None, {"knobs": 1}):
        assert stopped_trials({"stopped_trials": bad}) == []
    entries = [good, "x", {"knobs": {}, "seconds": "600"}, {"knobs": {}, "seconds": float("nan")}, {"seconds": 1}]
    assert stopped_trials({"stopped_trials": entries}) == [good]


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_manifest_is_not_a_study_to_resume(tmp_path, in_repo, capsys, case):
    from benchbay.collect.env import fingerprint

    manifest, latest, named = MALFORMED[case]
    suite = write_suite(tmp_path / "suite.yaml", small())
    run = tmp_path / "results" / "landscape" / "20260101-000000-abcd"
    # the study as this suite describes it, but for the one field
    stored = {"suite": "landscape", "tune": load(suite).tune.as_json(),
              "env": {"machine_key": fingerprint()["machine_key"]}, **manifest}
    store.write_manifest(run, stored)
    for resume, expected in ((["--resume"], latest or named), (["--resume", run.name], named)):
        assert main(["tune", str(suite), *resume, "--results", str(tmp_path / "results")]) == 2, resume
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and expected in err, err
    assert sorted(p.name for p in run.iterdir()) == ["manifest.json"]


@pytest.mark.parametrize("bad", [{"budget": [1]}, {"best": {"knobs": {}, "ties": 3}},
                                 {"memory_estimate": {"predictions": 5}}, {"no_feasible": {"closest": 5}}])
def test_a_tune_json_with_a_part_of_the_wrong_type_is_skipped_naming_the_key(tmp_path, bad):
    run = _planted_run(tmp_path, "wallx", {})
    data = {**json.loads((run / "tune.json").read_text()), **bad}
    (run / "tune.json").write_text(json.dumps(data))
    key = next(iter(bad))
    with pytest.warns(UserWarning, match=f"tune.json: skipping a tune result that is not one: {key}"):
        assert read_result(run) is None


def _confirmation(winner: list[float], other: list[float]) -> list[dict]:
    """The confirmation table of two candidates whose processes read these values (objective maximised)."""
    from types import SimpleNamespace

    from benchbay.tune.confirm import ConfirmStage

    def run(trial: int, value: float, confirms: bool) -> SimpleNamespace:
        return SimpleNamespace(value=value, extra={CONFIRMS: trial} if confirms else {})

    trials = [SimpleNamespace(number=n, params={"n": n}, record=run(n, values[0], False))
              for n, values in ((0, winner), (1, other))]

    class Stage(ConfirmStage):
        tune = SimpleNamespace(objective=SimpleNamespace(direction="maximize"))
        confirm_records = [run(n, v, True) for n, values in ((0, winner), (1, other)) for v in values[1:]]

        def candidates(self):
            return trials

        def judge(self, record):
            return record.value, 0.0, ""

    return Stage().confirmed()


def test_identical_configurations_confirmed_over_3_processes_tie_as_often_as_the_test_says():
    """A bootstrap over 3 processes called identical configurations apart 21.5% of the time (review)."""
    import numpy as np

    rng = np.random.default_rng(0)
    apart = 0
    for _ in range(300):
        a, b = (list(60.0 * np.exp(rng.normal(0, 0.03, 3))) for _ in range(2))
        rows = _confirmation(*sorted((a, b), key=np.mean, reverse=True))
        apart += not rows[1]["tie"]
    assert apart / 300 <= 0.08  # the t-test's 5%, give or take the draw
    rows = _confirmation([60.0, 61.0, 60.5], [50.0, 50.5, 49.8])  # 17% slower: not a tie
    assert not rows[1]["tie"] and rows[1]["ratio_high"] < 1
    assert rows[0]["low"] < 60.0 and rows[0]["high"] > 61.0  # the mean's t-interval, wider than the values
