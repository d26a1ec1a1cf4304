"""A suite's name is one safe path component: nothing it says writes outside the results root."""

import json

import pytest

from benchbay import store
from benchbay.store import run_dir
from benchbay.suite import SuiteError, load
from tests.conftest import write_suite
from tests.fixtures.launchers import RecordingLauncher

SUITE = """
name: {name}
workload: {{name: tests.fixtures.tinywork:Tiny}}
knobs: {{precision: fp32}}
steps: {{warmup: 1, measure: 2}}
"""


@pytest.mark.parametrize("name", ["/tmp/x", "../../escaped", "..", "''", "a/b", ".hidden"])
def test_a_name_that_is_not_one_safe_path_component_is_refused(tmp_path, name):
    path = write_suite(tmp_path / "s.yaml", SUITE.format(name=name))
    with pytest.raises(SuiteError, match="name.*one path component"):
        load(path)


def test_a_safe_name_loads(tmp_path):
    assert load(write_suite(tmp_path / "s.yaml", SUITE.format(name="my-suite_2.1"))).name == "my-suite_2.1"


@pytest.mark.parametrize("suite, run_id", [("..", "r"), ("ok", "../r"), ("/abs", "r"), ("ok", "")])
def test_the_store_never_builds_a_run_folder_outside_its_root(tmp_path, suite, run_id):
    with pytest.raises(ValueError, match="one path component"):
        run_dir(tmp_path, suite, run_id)


GOOD = '{"suite": "s", "run_id": "r", "point_id": "p", "workload": "w", "status": "ok"}\n'


@pytest.mark.parametrize("content, where", [
    (b"garbage\n", "records.jsonl:1: an incomplete record"),
    (b"", "holds no records"),
    (GOOD[20:].encode() + GOOD.encode(), "records.jsonl:1: an incomplete record"),  # its first record cut
    (b"[1, 2]\n", "records.jsonl:1: a line that is not a record"),
    (b'{"suite": "s"}\n', "records.jsonl:1: a line that is not a record .*lacks run_id"),
    (b"\xff\xfe\n", "not UTF-8"),
])
def test_a_baseline_that_cannot_be_read_is_an_error_not_no_baseline(tmp_path, content, where):
    from benchbay.baselines import BASELINES_DIR, find_baseline

    baseline = tmp_path / BASELINES_DIR / "machine" / "main"
    baseline.mkdir(parents=True)
    (baseline / "records.jsonl").write_bytes(content)
    for kwargs in ({"name": "main"}, {"suite": "s"}, {}):
        with pytest.raises(ValueError, match=where):
            find_baseline(tmp_path, "machine", **kwargs)


def test_a_readable_baseline_is_found(tmp_path):
    from benchbay.baselines import BASELINES_DIR, find_baseline

    baseline = tmp_path / BASELINES_DIR / "machine" / "main"
    baseline.mkdir(parents=True)
    (baseline / "records.jsonl").write_text(GOOD)
    assert find_baseline(tmp_path, "machine", suite="s") == baseline


def test_reading_results_never_imports_the_module_a_record_names(tmp_path, monkeypatch):
    import json
    import sys

    from benchbay.store import load_runs

    (tmp_path / "results_helper.py").write_text("open(__file__ + '.ran', 'w').close()\nclass X: pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    run = tmp_path / "results" / "s" / "r"
    run.mkdir(parents=True)
    records = [{"suite": "s", "run_id": "r", "point_id": f"p{i}", "workload": "results_helper:X", "status": "ok",
                "knobs": knobs} for i, knobs in enumerate([{"mbs": 1}, {"mbs": 1, "extra": 2}])]
    (run / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    load_runs([run])
    assert "results_helper" not in sys.modules and not (tmp_path / "results_helper.py.ran").exists()


def _record(run_id="r", point="p", mbs=1, **changes):
    from benchbay.record import Record

    fields = {"status": "ok", "metrics": {"step_time_s": 0.1, "samples_per_step": 1}, "env": {"machine_key": "m"},
              "series": {"step_times_s": [0.1, 0.1, 0.1]}, "started_at": "2026-01-01T00:00:00+00:00"}
    return Record(suite="s", run_id=run_id, point_id=point, label="L", workload="w", knobs={"mbs": mbs},
                  **{**fields, **changes})


def _line(**fields):
    import json

    return json.dumps({**_record().to_json(), **fields})


BAD_LINES = {
    b"null": "expected a record .*got null",
    b"[1, 2]": "expected a record .*got list",
    b"{}": "lacks suite, run_id",
    b'{"status": "ok"}': "lacks suite",
    _line(env=None).encode(): "env: expected a mapping, got null",
    _line(metrics=None).encode(): "metrics: expected a mapping, got null",
    _line(status="fine").encode(): "status: expected one of oom",
    _line(schema=99).encode(): "schema 99: this benchbay reads schemas 1 to",
    b'{"suite": "s", "run_id": "r", "point_id": "p\xff"}': "not UTF-8",
    _line()[:50].encode(): "an incomplete record",
    # a bad value inside a record of the right shape (issue 50)
    _line(metrics={"warmup_steps": "x"}).encode(): "metrics.warmup_steps: expected a finite number or null",
    _line(metrics={"step_time_s": "fast"}).encode(): "metrics.step_time_s: expected a finite number",
    _line(series={"step_times_s": [0.01, [1, 2], 0.01]}).encode(): "series.step_times_s: expected a list of finite",
    _line(series={"step_times_s": [0.1, float("inf")]}).encode(): "series.step_times_s: expected a list of finite",
    _line(env={"machine_key": ["a"]}).encode(): "env.machine_key: expected a string, number",
    _line(started_at="not a date").encode(): "started_at: expected an ISO 8601 time",
}


@pytest.mark.parametrize("bad", list(BAD_LINES))
def test_every_reader_skips_a_line_that_is_not_a_record_with_one_warning_naming_file_and_line(tmp_path, bad):
    from benchbay import cli, store
    from benchbay.analysis.history import history

    run = tmp_path / "s" / "r"
    store.append_record(run, _record(point="p1"))
    with open(run / "records.jsonl", "ab") as f:
        f.write(bad + b"\n")
    store.append_record(run, _record(point="p2", mbs=2))
    store.write_manifest(run, {"suite": "s", "state": "complete", "env": {"machine_key": "m"}})
    with pytest.warns(UserWarning, match=f"records.jsonl:2: skipping .*{BAD_LINES[bad]}") as caught:
        assert [r["point_id"] for r in store.read_records(run)] == ["p1", "p2"]
    assert len(caught) == 1
    with pytest.warns(UserWarning, match="records.jsonl:2"):
        df = store.load_runs([run])
        assert list(df["point_id"]) == ["p1", "p2"] and len(history(df)) == 2
        for argv in (["show", "s"], ["history", "s"], ["compare", "r", "r"], ["gate", "r"],
                     ["report", "s", "--out", str(tmp_path / "rep")]):
            assert cli.main([*argv, "--results", str(tmp_path)]) == 0, argv


def test_a_cut_manifest_of_one_run_does_not_hide_the_others_from_history(tmp_path, capsys):
    from benchbay import cli, store

    for run_id in ("r1", "r2"):
        store.append_record(tmp_path / "s" / run_id, _record(run_id=run_id))
        store.write_manifest(tmp_path / "s" / run_id, {"suite": "s", "state": "complete"})
    (tmp_path / "s" / "r1" / "manifest.json").write_text('{"suite": "s", "sta')
    with pytest.warns(UserWarning, match="r1/manifest.json: skipping a manifest that is not JSON"):
        assert cli.main(["history", "s", "--results", str(tmp_path)]) == 0
    assert "r1" in capsys.readouterr().out


def test_the_writer_writes_strict_json_and_an_older_schema_reads_as_today(tmp_path):
    import json
    import math

    from benchbay import store
    from benchbay.record import SCHEMA

    run = tmp_path / "s" / "r"
    store.append_record(run, _record(metrics={"step_time_s": math.nan, "mfu": math.inf},
                                     series={"losses": [1.0, math.nan]}))
    store.write_manifest(run, {"suite": "s", "peak": -math.inf})

    def strict(constant):
        raise AssertionError(f"bare {constant} written")

    (line,) = (run / "records.jsonl").read_text().splitlines()
    stored = json.loads(line, parse_constant=strict)
    assert stored["schema"] == SCHEMA and stored["metrics"] == {"step_time_s": None, "mfu": None}
    assert stored["series"]["losses"] == [1.0, None]
    assert json.loads((run / "manifest.json").read_text(), parse_constant=strict)["peak"] is None
    # schema 1 (or none) wrote bare NaN: read, it is today's record
    old = {**_record(point="old").to_json(), "metrics": {"step_time_s": math.nan}}
    del old["schema"]
    with open(run / "records.jsonl", "a") as f:
        f.write(json.dumps(old) + "\n")
    assert store.read_records(run)[1]["metrics"] == {"step_time_s": None}
    assert store.read_records(run)[1]["schema"] == SCHEMA


SWEEP = """
name: s
workload: {name: tests.fixtures.tinywork:Tiny}
knobs: {precision: fp32}
sweep: {grid: {mbs: [1, 2, 3, 4]}}
steps: {warmup: 1, measure: 2}
"""


def test_a_full_disk_stops_the_sweep_with_a_resume_hint_and_no_record_cut(tmp_path, monkeypatch, capsys):
    import errno
    import os

    from benchbay import cli, store

    real_write, calls = os.write, []

    def fills_up(fd, data):  # the second record: half of it fits, then the disk is full
        calls.append(data)
        if len(calls) == 2:
            return real_write(fd, data[:len(data) // 2])
        if len(calls) > 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(store.os, "write", fills_up)
    monkeypatch.setattr("benchbay.commands.suite._launcher", lambda args, suite: RecordingLauncher())
    path = write_suite(tmp_path / "s.yaml", SWEEP)
    assert cli.main(["run", str(path), "--results", str(tmp_path / "results"), "--no-report"]) == 4
    (run,) = (tmp_path / "results" / "s").iterdir()
    err = capsys.readouterr().err
    assert "cannot write" in err and "No space left on device" in err and f"--resume {run.name}" in err
    assert [r["knobs"]["mbs"] for r in store.read_records(run)] == [1]  # whole or absent: nothing cut
    assert (run / "records.jsonl").read_bytes().count(b"\n") == 1
    assert store.read_manifest(run)["state"] == "interrupted"
    monkeypatch.setattr(store.os, "write", real_write)
    launcher = RecordingLauncher()
    monkeypatch.setattr("benchbay.commands.suite._launcher", lambda args, suite: launcher)
    assert cli.main(["run", str(path), "--results", str(tmp_path / "results"), "--no-report", "--resume",
                     run.name]) == 0
    assert launcher.launched == [2, 3, 4] and store.read_manifest(run)["state"] == "complete"


def test_sigterm_is_an_interrupt(tmp_path, in_repo, cli_env):
    import signal
    import subprocess
    import time

    import psutil

    from benchbay import store
    from benchbay.launch.process import PHASE_MARK
    from tests.conftest import benchbay_cmd

    path = write_suite(tmp_path / "s.yaml", SWEEP.replace("knobs: {precision: fp32}",
                                                          "knobs: {precision: fp32, fault: hang}"))
    (tmp_path / "tmp").mkdir()
    proc = subprocess.Popen(benchbay_cmd("run", str(path), "--results", str(tmp_path / "results"), "--no-report"),
                            env={**cli_env, "TMPDIR": str(tmp_path / "tmp")}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    # the worker's own line that it started its first step (where the fixture hangs): the run opens
    # worker.log before it starts the worker, so the file alone said nothing of the point's process
    started = f"{PHASE_MARK}first step"

    def in_first_step() -> bool:
        logs = (tmp_path / "tmp").glob("benchbay-*/*/worker.log")
        return any(started in log.read_text(errors="replace") for log in logs)

    deadline = time.time() + 600  # only a bound on a broken run: the wait ends on the line
    while not in_first_step():
        assert proc.poll() is None, proc.communicate()
        assert time.time() < deadline, "the point never started its first step"
        time.sleep(0.2)
    point = psutil.Process(proc.pid).children(recursive=True)
    assert point, "the point's process is gone"
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    (run,) = (tmp_path / "results" / "s").iterdir()
    assert proc.returncode == 130 and "interrupted" in out and f"--resume {run.name}" in out
    assert store.read_manifest(run)["state"] == "interrupted"
    assert not list((tmp_path / "tmp").iterdir())  # the scratch folder is gone
    assert not [p for p in point if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


DAEMON = '''
import subprocess, sys
from tests.fixtures.tinywork import Tiny

class Daemon(Tiny):
    name = "daemon"
    params = {**Tiny.params, "pidfile": None}

    def loss(self, model, batch):
        if not hasattr(self, "started"):  # a helper in a session of its own, left running
            self.started = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                                            start_new_session=True)
            # and a daemon: double-forked, its environment cleared (no point mark), its parent gone
            orphan = subprocess.run([sys.executable, "-c", ORPHAN], capture_output=True, text=True, check=True)
            with open(self.params["pidfile"], "a") as f:
                f.write(f"{self.started.pid}\\n{orphan.stdout.strip()}\\n")
        return super().loss(model, batch)


ORPHAN = ("import subprocess, sys; print(subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], "
          "env={}, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid)")
'''


@pytest.mark.slow  # a point's timeout: 10 s
def test_a_process_a_step_started_in_a_session_of_its_own_does_not_outlive_the_point(tmp_path, in_repo,
                                                                                    monkeypatch):
    import psutil

    from benchbay.runner import SuiteRunner
    from benchbay.suite import load

    (tmp_path / "daemonwork.py").write_text(DAEMON)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    pidfile = tmp_path / "pids"
    path = write_suite(tmp_path / "s.yaml", f"""
name: s
workload: {{name: "daemonwork:Daemon", params: {{pidfile: "{pidfile}"}}}}
knobs: {{precision: fp32}}
steps: {{warmup: 1, measure: 2}}
""")
    summary = SuiteRunner(load(path), tmp_path / "results").run_all()
    assert summary.counts == {"ok": 1}
    pids = [int(p) for p in pidfile.read_text().split()]  # the warm-up process's and the point's, two each
    assert len(pids) == 4
    assert all(not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE for pid in pids)


def test_a_second_process_on_a_run_says_who_holds_it_and_measures_nothing(tmp_path, monkeypatch, capsys):
    import os
    import threading

    from benchbay import cli, store
    from benchbay.runner import SuiteRunner
    from benchbay.suite import load

    started, release = threading.Event(), threading.Event()

    class Held(RecordingLauncher):  # the first sweep, stopped inside its first point
        def run(self, spec, workdir):
            started.set()
            release.wait(60)
            return super().run(spec, workdir)

    path = write_suite(tmp_path / "s.yaml", SWEEP)
    first = SuiteRunner(load(path), tmp_path / "results", launcher=Held())
    thread = threading.Thread(target=first.run_all)
    thread.start()
    try:
        assert started.wait(60)
        second = RecordingLauncher()
        monkeypatch.setattr("benchbay.commands.suite._launcher", lambda args, suite: second)
        code = cli.main(["run", str(path), "--results", str(tmp_path / "results"), "--no-report",
                         "--resume", first.run.name])
    finally:
        release.set()
        thread.join(60)
    assert code == 2 and second.launched == []
    assert f"{first.run} is in use by another benchbay process (pid {os.getpid()})" in capsys.readouterr().err
    assert sorted(r["knobs"]["mbs"] for r in store.read_records(first.run)) == [1, 2, 3, 4]


# ---- bounds -------------------------------------------------------------------------------------

BOUNDED = """
name: s
workload: {{name: tests.fixtures.tinywork:Tiny}}
knobs: {{precision: fp32}}
{extra}
"""


@pytest.mark.parametrize("extra, where", [
    ("repeats: 1000000000", "repeats: a finite number > 0 and <= 1000"),
    ("timeout: .inf", "timeout: a finite number > 0"),
    ("timeout: .nan", "timeout: a finite number > 0"),
    ("timeout: 1.0e+9", "timeout: a finite number > 0 and <= 604800"),
    ("price_per_gpu_hour: .inf", "price_per_gpu_hour: a finite number > 0"),
    ("devices: {nproc: 100000}", "devices.nproc: an integer from 1 to 256"),
    ("devices: {nnodes: 2, node_rank: 2}", "devices.node_rank: below nnodes"),
    ("steps: {measure: 1000000000}", "steps.measure: an integer from 1 to 100000"),
    ("equivalent_tolerance: {rtol: .nan}", "equivalent_tolerance.rtol: a finite number"),
    ("equivalent_tolerance: {window: 0}", "equivalent_tolerance.window: an integer >= 1"),
    ("equivalent_tolerance: {window: 2.5}", "equivalent_tolerance.window: an integer >= 1"),
    ("sweep: {grid: {mbs: [" + ", ".join(map(str, range(1, 201))) + "], seed: [" + ", ".join(map(str, range(100)))
     + "]}}", "sweep: at most 10000 points"),
    ("sweep: {search: {min: true, max: 8}}", "sweep.search: integers 1 <= min"),
    ("sweep: {search: {max: 1000000000}}", "sweep.search: integers 1 <= min <= max <= 1048576"),
])
def test_numbers_out_of_a_sane_range_are_refused_at_validation(tmp_path, extra, where):
    path = write_suite(tmp_path / "s.yaml", BOUNDED.format(extra=extra))
    with pytest.raises(SuiteError, match=f"s.yaml: {where}"):
        load(path)


def test_more_ranks_than_the_machine_has_gpus_are_refused_before_any_point(monkeypatch):
    import torch

    from benchbay.launch.base import Launch
    from benchbay.launch.local import LocalLauncher

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    with pytest.raises(ValueError, match="devices.nproc: at most the 2 GPU.s. of this machine, got 8"):
        LocalLauncher(Launch(nproc=8)).device("auto")
    assert LocalLauncher(Launch(nproc=2)).device("cuda") == "cuda"
    assert LocalLauncher(Launch(nproc=4)).device("cpu") == "cpu"  # CPU ranks may share cores


@pytest.mark.parametrize("bomb", [
    "\n".join([f"  l0: &l0 [{', '.join(['x'] * 10)}]"]
              + [f"  l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, 9)]),  # 10^9 values
    "  me: &me {again: *me}",  # an alias cycle: endless
], ids=["nested", "cycle"])
def test_an_alias_bomb_is_refused_before_it_expands(tmp_path, bomb):
    path = write_suite(tmp_path / "s.yaml", BOUNDED.format(extra="description: bomb\nsweep:\n" + bomb))
    assert path.stat().st_size < 1000
    with pytest.raises(SuiteError, match="s.yaml: <file>: at most 100000 values once its aliases are expanded"):
        load(path)


# ---- the smaller ones ---------------------------------------------------------------------------

def test_a_points_stack_dump_is_scheduled_from_the_parents_deadline(tmp_path, monkeypatch):
    import json
    import sys
    import time

    from benchbay.launch import process, worker
    from benchbay.launch.base import Launch, PointSpec, WorkerResult
    from benchbay.suite import Steps

    # the parent writes its deadline into the spec as it launches the point
    monkeypatch.setattr(process, "command", lambda *args: [sys.executable, "-c", "pass"])
    spec = PointSpec(workload="w", params={}, knobs={}, steps=Steps(), device="cpu", timeout=600)
    before = time.time()
    process.run_ranks(spec, tmp_path / "point", Launch())
    written = json.loads((tmp_path / "point" / "spec.json").read_text())
    assert before + 600 <= written["deadline"] <= time.time() + 600
    # a worker whose imports took most of the timeout dumps before the parent's deadline, not its own
    scheduled = []
    monkeypatch.setattr(worker.faulthandler, "dump_traceback_later", lambda s, exit: scheduled.append(s))
    monkeypatch.setattr(worker, "run", lambda spec, command: WorkerResult(status="ok"))
    (tmp_path / "spec.json").write_text(json.dumps({**written, "deadline": time.time() + 20}))
    assert worker.main([str(tmp_path / "spec.json"), str(tmp_path / "result.json")]) == 0
    (delay,) = scheduled
    assert 20 - worker.STACK_DUMP_LEAD_S - 2 < delay <= 20 - worker.STACK_DUMP_LEAD_S


class _SwallowsItsInterrupt:
    """A SIGINT handled inside ``__del__``: Python prints its KeyboardInterrupt and goes on, as it does
    in logging's at-fork hook when the signal lands while ``subprocess.Popen`` forks."""

    def __del__(self):
        import os
        import signal
        os.kill(os.getpid(), signal.SIGINT)  # os.kill runs the handler before it returns


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the swallowed raise
def test_a_ctrl_c_swallowed_as_a_point_is_spawned_still_stops_it_and_kills_its_process(tmp_path, monkeypatch):
    import subprocess
    import sys
    from dataclasses import replace

    import psutil

    from benchbay.interrupts import signals_interrupt
    from benchbay.launch import process
    from benchbay.launch.base import Launch, PointSpec
    from benchbay.suite import Steps

    monkeypatch.setattr(process, "command", lambda *args: [sys.executable, "-c", "import time; time.sleep(600)"])
    spawned, real_popen = [], subprocess.Popen

    def popen(*args, **kwargs):
        spawned.append(proc := real_popen(*args, **kwargs))
        if len(spawned) == 1:
            _SwallowsItsInterrupt()  # deleted at once: the interrupt is raised and swallowed here
        return proc

    monkeypatch.setattr(process.subprocess, "Popen", popen)
    spec = PointSpec(workload="w", params={}, knobs={}, steps=Steps(), device="cpu", timeout=20)
    with signals_interrupt(), pytest.raises(KeyboardInterrupt):  # not a timeout 20 s later
        process.run_ranks(spec, tmp_path / "point", Launch())
    (proc,) = spawned
    assert proc.returncode is not None and not psutil.pid_exists(proc.pid)
    with signals_interrupt():  # a new sweep starts with nothing noted
        process.run_ranks(replace(spec, timeout=1), tmp_path / "again", Launch())


def test_a_python_memory_error_is_oom():
    import torch

    from benchbay.launch.worker import _failure
    from benchbay.record import Status

    failure = _failure(MemoryError(), 3, torch.device("cpu"))
    assert failure["status"] == Status.OOM and failure["reason"] == "out of memory at step 3: MemoryError"


def test_a_bad_root_with_decord_is_an_error_not_a_crash(tmp_path, monkeypatch):
    from benchbay.decode.backends import BACKENDS
    from benchbay.launch import worker
    from benchbay.launch.base import PointSpec
    from benchbay.record import Status
    from benchbay.suite import Steps

    # on a GPU host the decode workload opens its root before the steps, to ask for its codecs
    monkeypatch.setattr(BACKENDS["decord"], "unavailable_reason", classmethod(lambda cls, device="cpu": None))
    monkeypatch.setattr(worker, "rank_env", lambda: (0, 1, 0))
    spec = PointSpec(workload="decode", params={"root": str(tmp_path)}, knobs={"backend": "decord", "device": "cuda"},
                     steps=Steps(), device="cpu", timeout=60)
    result = worker.run(spec)
    assert result.status == Status.ERROR and "neither a LeRobot dataset" in result.reason


class _FailsOnce(RecordingLauncher):
    """mbs 2 crashes the first time it runs."""

    def run(self, spec, workdir):
        from benchbay.launch.base import Outcome

        if spec.knobs["mbs"] == 2 and 2 not in self.launched:
            self.launched.append(2)
            return Outcome(status="crash", reason="killed by SIGSEGV")
        return super().run(spec, workdir)


def test_retry_failed_measures_the_failed_points_of_a_resumed_run_again(tmp_path, monkeypatch, capsys):
    from benchbay import cli, store

    launcher = _FailsOnce()
    monkeypatch.setattr("benchbay.commands.suite._launcher", lambda args, suite: launcher)
    path = write_suite(tmp_path / "s.yaml", SWEEP)
    run = ["run", str(path), "--results", str(tmp_path / "results"), "--no-report"]
    assert cli.main(run) == 1 and launcher.launched == [1, 2, 3, 4]
    (folder,) = (tmp_path / "results" / "s").iterdir()
    assert cli.main([*run, "--resume"]) == 1 and launcher.launched == [1, 2, 3, 4]  # plain resume: kept
    assert cli.main([*run, "--resume", folder.name, "--retry-failed"]) == 0
    assert launcher.launched == [1, 2, 3, 4, 2]
    frame = store.load_runs([folder])  # the retry stands for the point
    assert sorted(frame["status"]) == ["ok"] * 4 and len(store.read_records(folder)) == 5
    assert cli.main([*run, "--retry-failed"]) == 2
    assert "--retry-failed: with --resume" in capsys.readouterr().err


def test_a_retry_stands_for_a_failed_record_from_before_a_knob_was_added(tmp_path, monkeypatch):
    from benchbay import cli, store

    launcher = _FailsOnce()
    monkeypatch.setattr("benchbay.commands.suite._launcher", lambda args, suite: launcher)
    path = write_suite(tmp_path / "s.yaml", SWEEP)
    run = ["run", str(path), "--results", str(tmp_path / "results"), "--no-report"]
    assert cli.main(run) == 1
    (folder,) = (tmp_path / "results" / "s").iterdir()
    # the crashed record as an older benchbay wrote it: without a knob that has its default today
    records = store.read_records(folder)
    failed = next(r for r in records if r["status"] == "crash")
    del failed["knobs"]["deterministic"]
    failed["point_id"] = store.point_id(failed["workload"], failed["params"], failed["knobs"])
    (folder / store.RECORDS).write_text("".join(json.dumps(r) + "\n" for r in records))
    assert cli.main([*run, "--resume", folder.name, "--retry-failed"]) == 0  # the retry is that point


def test_show_of_a_pattern_matching_several_runs_says_so(tmp_path, capsys):
    from benchbay import cli, store

    for suite in ("a", "b"):
        store.append_record(tmp_path / suite / "r1", _record(run_id="r1"))
    assert cli.main(["show", "*", "--results", str(tmp_path)]) == 2
    assert "'*' matches 2 runs" in capsys.readouterr().err
    assert cli.main(["show", "a", "b", "--results", str(tmp_path)]) == 0  # by suite: all their runs


@pytest.mark.parametrize("sweep, where", [
    ("{points: [{label: a}, {label: a, mbs: 2}]}", "sweep.points.1..label: a label no other point has"),
    ("{points: [{label: a, workload: {name: 'tests.fixtures.tinywork:Tiny', parms: {width: 4}}}]}",
     r"sweep.points.0..workload.parms: name or params"),
])
def test_duplicate_labels_and_unknown_workload_keys_are_refused(tmp_path, sweep, where):
    path = write_suite(tmp_path / "s.yaml", BOUNDED.format(extra=f"sweep: {sweep}"))
    with pytest.raises(SuiteError, match=where):
        load(path)
    path = write_suite(tmp_path / "t.yaml", BOUNDED.format(extra="").replace("Tiny}", "Tiny, parms: {width: 4}}"))
    with pytest.raises(SuiteError, match="workload.parms: name or params"):
        load(path)


def test_import_of_a_benchmark_without_stats_is_a_clear_error(tmp_path, capsys):
    import json

    from benchbay import cli

    doc = tmp_path / "bench.json"
    doc.write_text(json.dumps({"benchmarks": [{"name": "test_x", "stats": {"median": 1, "mean": 1, "stddev": 0,
                                                                          "rounds": 3}}, {"name": "test_y"}]}))
    assert cli.main(["import-pytest-benchmark", str(doc), "--results", str(tmp_path / "results")]) == 2
    assert "bench.json: benchmarks[1] (test_y): no 'stats' mapping" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()  # nothing half-imported


def test_a_malformed_set_value_and_a_yaml_syntax_error_are_one_problem_naming_where(tmp_path, capsys):
    from benchbay import cli

    path = write_suite(tmp_path / "s.yaml", SWEEP)
    assert cli.main(["validate", str(path), "--set", "sweep.grid.mbs=[1,2"]) == 2
    err = capsys.readouterr().err
    assert "s.yaml: --set sweep.grid.mbs: a YAML value, got '[1,2'" in err and "Traceback" not in err
    broken = write_suite(tmp_path / "broken.yaml", "name: s\nsweep: [\n")
    with pytest.raises(SuiteError) as info:
        load(broken)
    assert str(info.value).splitlines()[1:] == [f"  {broken}: line 3, column 1: valid YAML (expected the node "
                                                "content, but found '<stream end>')"]


def test_export_and_markdown_to_a_missing_folder_are_errors_that_create_nothing(tmp_path, capsys):
    from benchbay import cli, store

    run = tmp_path / "s" / "r"
    store.append_record(run, _record())
    store.write_manifest(run, {"suite": "s", "state": "complete", "env": {"machine_key": "m"}})
    missing = tmp_path / "no" / "such"
    assert cli.main(["show", "s", "--results", str(tmp_path), "--export", str(missing / "x.csv")]) == 2
    assert f"--export {missing / 'x.csv'}: no folder {missing}" in capsys.readouterr().err
    assert cli.main(["gate", "r", "--results", str(tmp_path), "--markdown", str(missing / "g.md")]) == 2
    assert f"--markdown {missing / 'g.md'}: no folder {missing}" in capsys.readouterr().err
    assert not (tmp_path / "no").exists()
    assert cli.main(["gate", "r", "--results", str(tmp_path), "--markdown", str(tmp_path / "g.md")]) == 0
    assert "No baseline" in (tmp_path / "g.md").read_text()


def test_a_workload_in_the_working_directory_is_found_as_under_python_m(tmp_path, monkeypatch):
    import sys

    from benchbay import cli

    (tmp_path / "cwd_workload.py").write_text("from tests.fixtures.tinywork import Tiny\nclass Mine(Tiny):\n"
                                              "    name = 'mine'\n")
    path = write_suite(tmp_path / "s.yaml", BOUNDED.format(extra="").replace("tests.fixtures.tinywork:Tiny",
                                                                             "cwd_workload:Mine"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])  # as the script's
    try:
        assert cli.main(["validate", str(path)]) == 0
    finally:
        sys.modules.pop("cwd_workload", None)


def test_a_machine_key_a_record_names_never_places_a_baseline_outside_the_root(tmp_path, capsys):
    from benchbay import cli, store

    run = tmp_path / "results" / "s" / "r"
    store.append_record(run, _record(env={"machine_key": "../../escaped"}))
    assert cli.main(["baseline", "save", str(run), "--name", "main", "--results", str(tmp_path / "results")]) == 2
    assert "invalid machine key '../../escaped'" in capsys.readouterr().err
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "results" / "baselines").exists()


# ---- issue 50: no write through a link -----------------------------------------------------------

def _outside(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim").write_text("keep me")
    return outside


def test_a_run_into_a_linked_suite_folder_is_refused_and_writes_nothing_there(tmp_path, monkeypatch, capsys):
    from benchbay import cli

    outside = _outside(tmp_path)
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "s").symlink_to(outside)
    monkeypatch.setattr("benchbay.commands.suite._launcher", lambda args, suite: RecordingLauncher())
    path = write_suite(tmp_path / "s.yaml", SWEEP)
    assert cli.main(["run", str(path), "--results", str(tmp_path / "results"), "--no-report"]) == 2
    assert f"{tmp_path / 'results' / 's'}: a symbolic link" in capsys.readouterr().err
    assert sorted(p.name for p in outside.iterdir()) == ["victim"]


@pytest.mark.parametrize("planted", ["records.jsonl", "manifest.json.tmp"])
def test_a_resume_of_a_planted_run_never_writes_through_its_links(tmp_path, monkeypatch, capsys, planted):
    from benchbay import cli, store

    outside = _outside(tmp_path)
    run = tmp_path / "results" / "s" / "99991231-235959-ffff"
    store.append_record(run, _record(run_id=run.name))
    store.write_manifest(run, {"suite": "s", "state": "interrupted", "env": {"machine_key": "m"}})
    (run / planted).unlink(missing_ok=True)
    (run / planted).symlink_to(outside / "victim")
    launcher = RecordingLauncher()
    monkeypatch.setattr("benchbay.commands.suite._launcher", lambda args, suite: launcher)
    code = cli.main(["run", str(write_suite(tmp_path / "s.yaml", SWEEP)), "--results", str(tmp_path / "results"),
                     "--no-report", "--resume", run.name])
    assert (outside / "victim").read_text() == "keep me"
    if planted == "records.jsonl":
        assert code == 2 and f"{run / planted}: a symbolic link" in capsys.readouterr().err
    else:  # the manifest's temporary file has a fresh name each time: the planted one is never opened
        assert code == 0 and store.read_manifest(run)["state"] == "complete"


@pytest.mark.parametrize("link", ["reports/s/report.md", "reports/s"])
def test_a_report_never_writes_through_a_link(tmp_path, monkeypatch, capsys, link):
    from benchbay import cli, store

    outside = _outside(tmp_path)
    run = tmp_path / "results" / "s" / "r"
    store.append_record(run, _record())
    store.write_manifest(run, {"suite": "s", "state": "complete", "suite_as_run": {"name": "s"}})
    monkeypatch.chdir(tmp_path)
    (tmp_path / link).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / link).symlink_to(outside / "victim" if link.endswith(".md") else outside)
    assert cli.main(["report", "s", "--results", str(tmp_path / "results")]) == 2
    assert f"{link}: a symbolic link" in capsys.readouterr().err
    assert sorted(p.name for p in outside.iterdir()) == ["victim"]
    assert (outside / "victim").read_text() == "keep me"


def test_a_baseline_is_never_saved_through_a_linked_baselines_folder(tmp_path, capsys):
    from benchbay import cli, store

    outside = _outside(tmp_path)
    run = tmp_path / "results" / "s" / "r"
    store.append_record(run, _record())
    (tmp_path / "results" / "baselines").symlink_to(outside)
    assert cli.main(["baseline", "save", str(run), "--name", "main", "--results", str(tmp_path / "results")]) == 2
    assert "results/baselines: a symbolic link" in capsys.readouterr().err
    assert sorted(p.name for p in outside.iterdir()) == ["victim"]


def test_a_report_on_a_full_disk_keeps_the_old_one_whole(tmp_path, monkeypatch, capsys):
    import errno
    import os

    from benchbay import cli, store

    run = tmp_path / "results" / "s" / "r"
    store.append_record(run, _record())
    store.write_manifest(run, {"suite": "s", "state": "complete", "suite_as_run": {"name": "s"}})
    out = tmp_path / "rep"
    assert cli.main(["report", "s", "--results", str(tmp_path / "results"), "--out", str(out)]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(store.os, "fsync", full)
    assert cli.main(["report", "s", "--results", str(tmp_path / "results"), "--out", str(out)]) == 4
    err = capsys.readouterr().err
    assert "cannot write" in err and "No space left on device" in err and "Traceback" not in err
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before  # no file cut, no temporary file left


# ---- issue 50: the gate fails what it should fail ------------------------------------------------

def _stored(root, run_id, step=0.1, started="2026-01-01T00:00:00+00:00", key="m", **changes):
    """A run of suite s under ``root``: one point in 3 processes (repeats) whose 20 steps took about
    ``step`` seconds each (1% apart between processes: enough of them for the gate to judge)."""
    from benchbay import store

    run = root / "s" / run_id
    for repeat, scale in enumerate((0.99, 1.0, 1.01)):
        fields = {"metrics": {"step_time_s": step * scale, "samples_per_step": 1},
                  "series": {"step_times_s": [step * scale] * 20}, "env": {"machine_key": key}, **changes}
        store.append_record(run, _record(run_id=run_id, repeat=repeat, **fields))
    store.write_manifest(run, {"suite": "s", "state": "complete", "started_at": started, "env": {"machine_key": key}})
    return run


def test_a_baseline_folder_with_a_cut_line_is_an_error_not_a_pass(tmp_path, capsys):
    from benchbay import cli

    baseline = _stored(tmp_path / "b", "base")
    with open(baseline / "records.jsonl", "a") as f:
        f.write(_line()[:40] + "\n")
    _stored(tmp_path, "cand", step=0.2)
    assert cli.main(["gate", "cand", "--results", str(tmp_path), "--baseline", str(baseline),
                     "--require-baseline"]) == 2
    assert "records.jsonl:4: an incomplete record" in capsys.readouterr().err


def test_a_baseline_folder_of_another_machine_is_refused(tmp_path, capsys):
    from benchbay import cli

    baseline = _stored(tmp_path / "b", "base", step=0.3, key="slow-cpu")
    _stored(tmp_path, "cand", step=0.2)
    assert cli.main(["gate", "cand", "--results", str(tmp_path), "--baseline", str(baseline)]) == 2
    assert "a baseline of machine slow-cpu, but the candidate ran on m" in capsys.readouterr().err


def test_gate_of_a_suite_gates_the_run_that_started_last_not_the_highest_id(tmp_path, capsys):
    from benchbay import cli
    from benchbay.baselines import save_baseline

    save_baseline(_stored(tmp_path, "20260101-000000-aaaa"), "s", tmp_path)
    _stored(tmp_path, "20991231-000000-ffff", started="2026-01-01T00:00:00+00:00")  # a copy of that run
    _stored(tmp_path, "99991231-000000-ffff", started="9999-12-31T00:00:00+00:00")  # an import dated ahead
    new = _stored(tmp_path, "20260301-000000-bbbb", step=0.2, started="2026-03-01T00:00:00+00:00")
    assert cli.main(["gate", "s", "--results", str(tmp_path)]) == 1
    assert f"candidate: {new}" in capsys.readouterr().out


@pytest.mark.parametrize("baseline, candidate", [
    ({"status": "error"}, {}),
    ({"metrics": {}, "series": {}}, {}),
    ({"point": "other", "mbs": 2}, {}),
    ({}, {"metrics": {"step_time_s": None}, "series": {"step_times_s": [None] * 20}}),
], ids=["baseline-errors", "no-figures", "no-shared-point", "candidate-nan"])
def test_require_baseline_fails_when_nothing_compares(tmp_path, capsys, baseline, candidate):
    from benchbay import cli

    base = _stored(tmp_path / "b", "base", **baseline)
    _stored(tmp_path, "cand", step=0.2, **candidate)
    gate = ["gate", "cand", "--results", str(tmp_path), "--baseline", str(base)]
    assert cli.main(gate) == 0  # "not comparable": said, not failed, unless a baseline is required
    assert cli.main([*gate, "--require-baseline"]) == 1
    assert "### benchbay gate: ❌ FAIL" in capsys.readouterr().out


def test_a_threshold_whose_selector_matches_no_point_is_an_error(tmp_path, capsys):
    from benchbay import cli

    base = _stored(tmp_path / "b", "base")
    _stored(tmp_path, "cand", step=0.2)
    gate = ["gate", "cand", "--results", str(tmp_path), "--baseline", str(base)]
    assert cli.main([*gate, "--threshold", "lable=L/step_time:5%"]) == 2
    assert "threshold 'lable=L/step_time:5%': its selector matches no point" in capsys.readouterr().err
    assert cli.main([*gate, "--threshold", "label=L/step_time:5%"]) == 1


@pytest.mark.parametrize("argv", [["compare", "a", "b", "--min-change", "nan"],
                                  ["run", "s.yaml", "--time-budget", "nan"],
                                  ["run", "s.yaml", "--time-budget", "-1"]])
def test_a_number_that_is_not_finite_is_bad_input(argv, capsys):
    from benchbay import cli

    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    assert exit_.value.code == 2 and "expected a finite number, 0 or more" in capsys.readouterr().err


# ---- issue 50: a full disk, a read-only root -------------------------------------------------------

def test_a_full_disk_at_the_last_manifest_exits_4_and_leaves_the_old_manifest_whole(tmp_path, monkeypatch, capsys):
    import errno
    import os

    from benchbay import cli, store

    real_replace, calls = os.replace, []

    def fills_up(src, dst):  # the first manifest fits, the last one finds the disk full
        calls.append(dst)
        if len(calls) > 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_replace(src, dst)

    monkeypatch.setattr(store.os, "replace", fills_up)
    monkeypatch.setattr("benchbay.commands.suite._launcher", lambda args, suite: RecordingLauncher())
    path = write_suite(tmp_path / "s.yaml", SWEEP)
    assert cli.main(["run", str(path), "--results", str(tmp_path / "results"), "--no-report"]) == 4
    (run,) = (tmp_path / "results" / "s").iterdir()
    err = capsys.readouterr().err
    assert "No space left on device" in err and f"--resume {run.name}" in err and "Traceback" not in err
    assert store.read_manifest(run)["state"] == "running"  # the old one, whole
    assert sorted(p.name for p in run.iterdir()) == ["manifest.json", "records.jsonl"]  # no temporary file left


def test_a_read_only_results_root_exits_4_in_one_line(tmp_path, monkeypatch, capsys):
    import errno
    import os

    from benchbay import cli, store

    def read_only(path, *args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))

    monkeypatch.setattr(store.os, "open", read_only)
    monkeypatch.setattr("benchbay.commands.suite._launcher", lambda args, suite: RecordingLauncher())
    path = write_suite(tmp_path / "s.yaml", SWEEP)
    assert cli.main(["run", str(path), "--results", str(tmp_path / "results"), "--no-report"]) == 4
    err = capsys.readouterr().err
    assert "cannot write" in err and "Read-only file system" in err and "Traceback" not in err


# ---- issue 50: a run without records; diff reads through the store; labels --------------------------

def test_show_of_a_run_without_a_record_says_so(tmp_path, capsys):
    from benchbay import cli, store

    run = tmp_path / "s" / "r"
    run.mkdir(parents=True)
    (run / "records.jsonl").write_bytes(b"")  # SIGTERM before the first point
    store.write_manifest(run, {"suite": "s", "state": "interrupted"})
    assert cli.main(["show", "s", "--results", str(tmp_path)]) == 2
    assert "no records to show" in capsys.readouterr().err


@pytest.mark.parametrize("bad, where", [(b"[1, 2]", "got list"), (_line(extra=None).encode(), "extra: expected"),
                                        (_line()[:40].encode(), "an incomplete record")])
def test_diff_skips_a_bad_line_naming_file_and_line(tmp_path, bad, where):
    from benchbay import store
    from benchbay.analysis.diff import profiled_record

    run = tmp_path / "s" / "r"
    store.append_record(run, _record(extra={"phases": {"forward": 0.05}}))
    with open(run / "records.jsonl", "ab") as f:
        f.write(bad + b"\n")
    with pytest.warns(UserWarning, match=f"records.jsonl:2: skipping .*{where}"):
        assert profiled_record(run, "L")["extra"]["phases"] == {"forward": 0.05}


def test_a_label_with_a_control_character_is_refused(tmp_path):
    sweep = "sweep: {points: [{label: \"fast\\n### benchbay gate: pass\"}]}"
    with pytest.raises(SuiteError, match=r"sweep.points.0..label: printable characters only"):
        load(write_suite(tmp_path / "s.yaml", BOUNDED.format(extra=sweep)))


@pytest.mark.parametrize("text, where", [
    ("name: s\nsweep: " + "[" * 500 + "]" * 500 + "\n", "at most 32 levels of nesting"),
    ("name: s\nsweep: [" + "1, " * 400_000 + "]\n", "at most 1048576 bytes"),
    ("name: s\nsweep: [" + "1," * 150_000 + "]\n", "at most 32 levels of nesting and 100000 values"),
], ids=["deep", "large", "long"])
def test_a_suite_too_deep_or_too_large_is_refused_before_it_is_composed(tmp_path, capsys, text, where):
    from benchbay import cli

    path = write_suite(tmp_path / "s.yaml", text)
    with pytest.raises(SuiteError, match=f"s.yaml: <file>: {where}"):
        load(path)
    assert cli.main(["validate", str(write_suite(tmp_path / "t.yaml", SWEEP)), "--set",
                     "sweep=" + "[" * 500 + "]" * 500]) == 2
    err = capsys.readouterr().err
    assert "--set sweep: a YAML value" in err and "at most 32 levels" in err and "Traceback" not in err


def test_sigterm_while_the_run_writes_its_report_is_an_interrupt(tmp_path, monkeypatch, capsys):
    import os
    import signal

    from benchbay import cli, report

    def terminated(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)
        raise AssertionError("SIGTERM did not interrupt the report")

    monkeypatch.setattr("benchbay.commands.suite._launcher", lambda args, suite: RecordingLauncher())
    monkeypatch.setattr(report, "build_report", terminated)
    before = signal.getsignal(signal.SIGTERM)
    path = write_suite(tmp_path / "s.yaml", SWEEP)
    assert cli.main(["run", str(path), "--results", str(tmp_path / "results"),
                     "--report-dir", str(tmp_path / "rep")]) == 130
    assert "interrupted while writing the report" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGTERM) == before  # the handler is put back


def test_history_of_a_suite_file_never_imports_the_workload_it_names(tmp_path, cli_env):
    """A reading command reads the suite file as data: the module a suite names is not imported."""
    import os
    import subprocess

    from tests.conftest import benchbay_cmd

    (tmp_path / "planted.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').close()\n")
    suite = tmp_path / "s.yaml"
    suite.write_text("name: s\nworkload: {name: 'planted:Step'}\n")
    env = {**cli_env, "PYTHONPATH": os.pathsep.join([str(tmp_path), cli_env["PYTHONPATH"]])}
    done = subprocess.run(benchbay_cmd("history", str(suite), "--results", str(tmp_path / "results")),
                          env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert not (tmp_path / "ran").exists()
    assert "Traceback" not in done.stderr


def test_a_key_given_twice_is_an_error_but_a_merged_key_may_be_given_again(tmp_path):
    base = "name: dup\nworkload: {name: 'tests.fixtures.tinywork:Tiny'}\n"
    with pytest.raises(SuiteError, match=r"line 4, column 1: .*the key 'repeats' appears twice"):
        load(write_suite(tmp_path / "dup.yaml", base + "repeats: 1\nrepeats: 3\n"))
    merged = base + "sweep:\n  points:\n    - &a {label: a, mbs: 1}\n    - {<<: *a, label: b, mbs: 2}\n"
    assert [p.label for p in load(write_suite(tmp_path / "merged.yaml", merged)).expand()] == ["a", "b"]


def test_a_suite_named_baselines_is_refused(tmp_path):
    with pytest.raises(SuiteError, match="name: a name other than 'baselines'"):
        load(write_suite(tmp_path / "b.yaml", "name: baselines\nworkload: {name: 'tests.fixtures.tinywork:Tiny'}\n"))


@pytest.mark.parametrize("name", [".hidden", "..", "a/b", ""])
def test_a_baseline_name_that_no_reader_would_find_is_refused(tmp_path, name):
    from benchbay.baselines import save_baseline

    with pytest.raises(ValueError, match="invalid baseline name"):
        save_baseline([tmp_path], name, tmp_path / "results")
    assert not (tmp_path / "results").exists()


# ---- tampered manifests, oversized numbers, links and reserved names --------------------------------

def _tamper(run, **suite_as_run):
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps({**manifest, **suite_as_run}))


@pytest.mark.parametrize("tampered, key", [
    ({"suite_as_run": ["s"]}, "suite_as_run"),
    ({"suite_as_run": {"name": "s", "breakdown": 5}}, "suite_as_run.breakdown"),
    ({"suite_as_run": {"name": "s", "sweep": {"search": 5}}}, "suite_as_run.sweep.search"),
    ({"suite_as_run": {"name": "s", "sweep": {"search": {"max": "x"}}}}, "suite_as_run.sweep.search.max"),
    ({"suite_as_run": {"name": "s", "equivalent_tolerance": [1]}}, "suite_as_run.equivalent_tolerance"),
    ({"suite_as_run": {"name": "s", "equivalent_tolerance": {"window": 0}}},
     "suite_as_run.equivalent_tolerance.window"),
    ({"suite_as_run": {"name": "s", "equivalent_tolerance": {"rtol": None}}},
     "suite_as_run.equivalent_tolerance.rtol"),
    ({"suite_as_run": {"name": "s", "equivalent": [[["a"]], 5]}}, "suite_as_run.equivalent[0]"),
    ({"suite_as_run": {"name": "../x"}}, "suite_as_run.name"),
    ({"suite_as_run": {"name": "s"}, "suite": 5}, "suite"),
])
def test_a_tampered_stored_suite_is_one_line_naming_the_manifest_and_key(tmp_path, capsys, tampered, key):
    from benchbay import cli

    run = _stored(tmp_path, "r")
    _tamper(run, **tampered)
    assert cli.main(["show", "r", "--results", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{run / 'manifest.json'}: {key}: expected" in err and "Traceback" not in err


@pytest.mark.parametrize("suite", [5, "../elsewhere", "baselines"])
def test_a_stored_suite_name_never_picks_a_folder_to_read(tmp_path, suite):
    from benchbay.baselines import stored_runs

    (tmp_path / "elsewhere").mkdir()
    _stored(tmp_path / "root", "r")
    assert stored_runs(tmp_path / "root", suite) is None


def test_an_integer_metric_too_large_for_a_float_is_not_a_record(tmp_path):
    from benchbay.record import validate

    with pytest.raises(ValueError, match="metrics.step_time_s: expected a finite number"):
        validate(_record(metrics={"step_time_s": 10**400}).to_json())
    assert validate(_record(metrics={"step_time_s": 10**300}).to_json())


def test_a_suite_path_through_a_file_and_an_unreadable_file_are_bad_input(tmp_path, monkeypatch, capsys):
    import errno
    import os

    from benchbay import cli

    path = write_suite(tmp_path / "s.yaml", SWEEP)
    assert cli.main(["validate", str(path / "x.yaml")]) == 2
    assert "does not exist" in capsys.readouterr().err
    secret = tmp_path / "secret.json"
    secret.write_text("{}")

    def denied(*args, **kwargs):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(secret))

    monkeypatch.setattr("benchbay.commands.interop.one_run", denied)
    monkeypatch.setattr(cli.os, "access", lambda name, mode: False)  # tests may run as root
    assert cli.main(["export-pytest-benchmark", "r", str(tmp_path / "o.json")]) == 2
    assert f"cannot read {secret}" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["show", "r", "--export", "{out}.csv"], ["gate", "r", "--markdown", "{out}.md"],
                                  ["export-pytest-benchmark", "r", "{out}.json"]])
def test_an_output_path_that_is_a_link_is_refused_and_its_target_kept(tmp_path, capsys, argv):
    from benchbay import cli

    _stored(tmp_path / "results", "r")
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    out = tmp_path / "out"
    for suffix in (".csv", ".json", ".md"):
        (tmp_path / f"out{suffix}").symlink_to(victim)
    assert cli.main([a.format(out=out) for a in argv] + ["--results", str(tmp_path / "results")]) == 2
    assert "a symbolic link" in capsys.readouterr().err and victim.read_text() == "keep"


def test_export_pytest_benchmark_creates_no_folder(tmp_path, capsys):
    from benchbay import cli

    _stored(tmp_path / "results", "r")
    assert cli.main(["export-pytest-benchmark", "r", str(tmp_path / "new" / "o.json"),
                     "--results", str(tmp_path / "results")]) == 2
    assert not (tmp_path / "new").exists()


def test_baseline_save_refuses_a_linked_manifest_and_leaves_a_torn_line_out(tmp_path, capsys):
    from benchbay import cli

    results = tmp_path / "results"
    run = _stored(results, "r")
    secret = tmp_path / "secret.txt"
    secret.write_text("secret")
    (run / "manifest.json").unlink()
    (run / "manifest.json").symlink_to(secret)
    assert cli.main(["baseline", "save", "r", "--results", str(results)]) == 2
    assert "a symbolic link" in capsys.readouterr().err and not (results / "baselines").exists()
    torn = _stored(results, "t")
    with open(torn / "records.jsonl", "a") as f:
        f.write(_line()[:40])
    with pytest.warns(UserWarning, match="left out of the baseline"):
        assert cli.main(["baseline", "save", "t", "--results", str(results)]) == 0
    (saved,) = (results / "baselines").rglob("records.jsonl")
    assert [n for n, got in store.record_lines(saved) if isinstance(got, str)] == []  # the gate reads it whole


def test_an_import_under_the_baselines_folder_name_is_refused(tmp_path):
    with pytest.raises(ValueError, match="reserved for the baselines"):
        run_dir(tmp_path, "baselines", "r")
