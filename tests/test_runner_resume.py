"""What a sweep leaves when it ends other than well, and what a resume or a time budget makes of
it: a Slurm run resumed from the host that submitted it, a batch search's whole cost, a skipped
point's none, the manifest's state however the sweep ended (and of the points every call asked),
a stored point id that would name a folder outside the run, torn lines in the logs a run keeps.
The points are a fake launcher's canned outcomes: nothing here starts a process."""

import json
import os
import signal
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from benchbay import store
from benchbay.baselines import save_baseline
from benchbay.collect.env import fingerprint
from benchbay.launch.base import Launch, Outcome
from benchbay.record import Status
from benchbay.runner import SuiteRunner
from benchbay.suite import load
from tests.conftest import write_suite

TINY = "tests.fixtures.tinywork:Tiny"


class Canned:
    """A launcher whose points end at once (after ``sleep_s``) with ``status``; ``hook`` may answer
    for a point (an Outcome) or raise as it would."""

    def __init__(self, sleep_s=0.0, env=None, device="cpu", hook=None):
        self.launch, self.sleep_s, self.env, self.dev, self.hook = Launch(), sleep_s, env, device, hook
        self.specs = []

    def device(self, requested):
        return self.dev

    @contextmanager
    def scratch(self, run):
        with tempfile.TemporaryDirectory() as folder:
            yield Path(folder)

    def run(self, spec, workdir):
        self.specs.append(spec)
        if self.hook and (outcome := self.hook(spec)) is not None:
            return outcome
        time.sleep(self.sleep_s)
        return Outcome(status=Status.OK, metrics={"step_time_s": 0.01, "samples_per_step": 1}, env=self.env)


def suite(tmp_path, body, name="s"):
    return load(write_suite(tmp_path / f"{name}.yaml", f'name: {name}\nworkload: {{name: "{TINY}"}}\n'
                                                       f"steps: {{warmup: 1, measure: 1}}\n{body}"))


def interrupt_at(n):
    calls = []

    def hook(spec):
        calls.append(spec)
        if len(calls) == n:
            raise KeyboardInterrupt
    return hook


def test_a_slurm_run_resumes_from_the_host_that_submitted_it(tmp_path):
    """Its records hold the node's environment: the resume measures only the point left."""
    s = suite(tmp_path, "sweep: {grid: {mbs: [1, 2, 3]}}")
    node = {**fingerprint(), "machine_key": "nvidia-h100x8-cuda12.4-torch2.5.0"}
    first = SuiteRunner(s, tmp_path / "r", launcher=Canned(env=node, hook=interrupt_at(3)), warm_up=False).run_all()
    again = Canned(env=node)
    SuiteRunner(s, tmp_path / "r", launcher=again, resume=first.run.name, warm_up=False).run_all()
    assert [spec.knobs["mbs"] for spec in again.specs] == [3]
    assert sorted(r.knobs["mbs"] for r in store.typed_records(first.run)) == [1, 2, 3]


def test_a_time_budget_counts_a_searchs_configuration_by_all_its_probes_and_a_skipped_point_by_none(tmp_path):
    def oom_above_3(spec):
        time.sleep(0.3)
        return Outcome(status=Status.OOM, reason="planted", metrics={}) if spec.knobs["mbs"] > 3 else None

    searched = suite(tmp_path, "knobs: {precision: fp32}\nsweep: {points: [{label: a}, {label: b, seed: 1}], "
                               "search: {knob: mbs, min: 1, max: 8, memory_snapshots: false}}", "searched")
    launcher = Canned(hook=oom_above_3)
    summary = SuiteRunner(searched, tmp_path / "r", launcher=launcher, time_budget_s=2.0, warm_up=False).run_all()
    first = len(launcher.specs)
    assert first >= 3 and summary.out_of_time  # b's probes would take a's time again: not started
    assert all(spec.knobs.get("seed", 0) == 0 for spec in launcher.specs)
    excluded = suite(tmp_path, "sweep: {grid: {mbs: [1, 2]}, exclude: [{mbs: 2}]}", "excluded")
    summary = SuiteRunner(excluded, tmp_path / "r", launcher=Canned(sleep_s=0.5), time_budget_s=0.75,
                          warm_up=False).run_all()
    assert not summary.out_of_time and summary.counts == {Status.OK: 1, Status.SKIPPED: 1}


def test_the_manifest_says_interrupted_however_the_sweep_ended(tmp_path):
    """A launcher's full disk is resumable (the store's exit), and a SIGTERM as the scratch
    folder goes is an interrupt: neither leaves the run 'running'."""
    def full(spec):
        raise OSError(28, "No space left on device")

    s = suite(tmp_path, "sweep: {grid: {mbs: [1, 2]}}")
    summary = SuiteRunner(s, tmp_path / "r", launcher=Canned(hook=full), warm_up=False).run_all()
    assert summary.unwritable and "No space left" in summary.unwritable
    assert store.read_manifest(summary.run)["state"] == "interrupted"

    class TermAtCleanup(Canned):
        @contextmanager
        def scratch(self, run):
            with super().scratch(run) as folder:
                yield folder
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.2)

    runner = SuiteRunner(s, tmp_path / "r", launcher=TermAtCleanup(), warm_up=False)
    summary = runner.run_all()
    assert summary.interrupted and store.read_manifest(runner.run)["state"] == "interrupted"
    assert len(store.typed_records(runner.run)) == 2


def test_a_point_call_completes_only_the_points_its_calls_asked(tmp_path):
    s = suite(tmp_path, "sweep: {points: [{label: a, mbs: 1}, {label: b, mbs: 2}, {label: c, mbs: 3}]}")
    whole = SuiteRunner(s, tmp_path / "r", launcher=Canned(hook=interrupt_at(2)), warm_up=False).run_all()
    SuiteRunner(s, tmp_path / "r", launcher=Canned(), resume=whole.run.name, labels=["a"], warm_up=False).run_all()
    assert store.read_manifest(whole.run)["state"] == "interrupted"  # b and c of the whole suite are missing
    SuiteRunner(s, tmp_path / "r", launcher=Canned(), resume=whole.run.name, warm_up=False).run_all()
    assert store.read_manifest(whole.run)["state"] == "complete"
    one = SuiteRunner(s, tmp_path / "r", launcher=Canned(), labels=["a"], warm_up=False).run_all()
    assert store.read_manifest(one.run)["state"] == "complete" and store.read_manifest(one.run)["labels"] == ["a"]
    SuiteRunner(s, tmp_path / "r", launcher=Canned(), resume=one.run.name, labels=["b"], warm_up=False).run_all()
    manifest = store.read_manifest(one.run)
    assert manifest["state"] == "complete" and manifest["labels"] == ["a", "b"]


def test_a_stored_point_id_that_names_a_folder_outside_the_run_is_no_record(tmp_path):
    s = suite(tmp_path, "sweep: {grid: {mbs: [1]}}")
    run = SuiteRunner(s, tmp_path / "r", launcher=Canned(), warm_up=False).run_all().run
    (row,) = store.read_records(run)
    (run / store.RECORDS).write_text(json.dumps({**row, "point_id": "../../../../escaped"}) + "\n")
    with pytest.warns(UserWarning, match="point_id: expected one folder"):
        assert store.typed_records(run) == []


def test_torn_lines_of_a_runs_logs_are_passed_over(tmp_path):
    """The memory snapshots' log of a resumed search, and a baseline made of a run that ends in one."""
    def oom_above_3(spec):
        return Outcome(status=Status.OOM, reason="planted", metrics={}) if spec.knobs["mbs"] > 3 else None

    s = suite(tmp_path, "knobs: {precision: fp32}\nsweep: {points: [{label: a}], search: {knob: mbs, min: 1, max: 8}}")
    first = SuiteRunner(s, tmp_path / "r", launcher=Canned(device="cuda", hook=oom_above_3), warm_up=False).run_all()
    log = first.run / "memory" / "snapshots.jsonl"
    assert len(store.log_entries(log)) == 2  # the largest batch that fit and the smallest that did not
    with open(log, "a") as f:
        f.write('{"point_id": "abc", "rep')
    again = Canned(device="cuda", hook=oom_above_3)
    SuiteRunner(s, tmp_path / "r", launcher=again, resume=first.run.name, warm_up=False).run_all()
    assert again.specs == [] and store.read_manifest(first.run)["state"] == "complete"

    plain = suite(tmp_path, "sweep: {grid: {mbs: [1, 2]}}", "plain")
    runs = [SuiteRunner(plain, tmp_path / "r", launcher=Canned(), warm_up=False).run_all().run for _ in range(2)]
    with open(runs[0] / store.RECORDS, "ab") as f:
        f.write(b'{"schema": 2, "suite": "plain", "ru')  # a hard kill mid-append
    with pytest.warns(UserWarning, match="left out of the baseline"):
        baseline = save_baseline(runs, "base", tmp_path / "r")
    assert len(store.typed_records(baseline)) == 4  # the second run's first record kept, the torn line not
