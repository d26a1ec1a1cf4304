"""The runner: isolated points, every failure recorded as its status, the sweep goes on,
Ctrl-C and SIGKILL lose nothing, --resume completes the rest."""

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import replace

import psutil
import pytest

from benchbay import store
from benchbay.analysis.steady import warm
from benchbay.analysis.tables import point_summary
from benchbay.collect.health import CpuSnapshot, HealthCheck, cpu_load, machine_warnings, point_warnings
from benchbay.collect.system import ChildrenCpu
from benchbay.launch.base import Outcome
from benchbay.progress import describe
from benchbay.record import Record, Status
from benchbay.runner import SuiteRunner, derived_metrics
from benchbay.suite import load
from tests.conftest import TINY, benchbay_cmd, write_suite

RECORD_FIELDS = {"schema", "suite", "run_id", "point_id", "label", "repeat", "workload", "params", "knobs", "device",
                 "status", "reason", "metrics", "series", "extra", "world_size", "ranks", "env", "health", "started_at",
                 "duration_s"}
METRICS = {"step_time_s", "step_time_mean_s", "step_time_p10_s", "step_time_p90_s", "step_time_cv", "first_step_s",
           "samples_per_step", "samples_per_s", "samples_per_s_per_gpu", "flops_per_sample", "mfu",
           "peak_mem_allocated_gib", "peak_mem_reserved_gib", "alloc_retries", "num_ooms", "nvml_mem_used_gib",
           "host_rss_gib", "cpu_util_mean", "cpu_util_cv", "gpu_util_mean", "gpu_power_w_mean",
           "gpu_sm_clock_mhz_mean", "warmup_steps", "measured_steps"}
ENV = {"machine_key", "gpu", "gpu_count", "driver", "cuda", "torch", "python", "cpu", "cpu_count", "git_commit",
       "gpu_uuid_hash", "packages"}
HEALTH = {"cpu_available", "cpu_point_cores", "cpu_other_cores", "cpu_other_top", "cpu_governor", "cpu_freq_mhz",
          "cpu_freq_max_mhz", "on_battery", "warnings", "machine_warnings"}


def test_points_in_processes_of_their_own_record_every_field_and_a_crash_leaves_the_rest(tmp_path, in_repo):
    path = write_suite(tmp_path / "smoke.yaml", f"""
name: smoke
workload: {{name: "{TINY}"}}
knobs: {{precision: fp32}}
sweep:
  points:
    - {{label: healthy, mbs: 1, recompute: "off"}}
    - {{label: segv, fault: segv}}
    - {{label: healthy2, mbs: 2, recompute: full}}
steps: {{warmup: 2, measure: 4}}
timeout: 120
""")
    # no cold-start warm-up process (runner.py's docstring): no figure here is compared with another
    summary = SuiteRunner(load(path), tmp_path / "results", warm_up=False).run_all()
    assert summary.counts == {"ok": 2, "crash": 1}
    records = store.read_records(summary.run)
    assert [r["label"] for r in records] == ["healthy", "segv", "healthy2"]  # the sweep went on after the crash
    segv = records[1]
    assert segv["metrics"]["signal"] == "SIGSEGV" and "SIGSEGV" in segv["reason"]
    for r in (records[0], records[2]):
        assert RECORD_FIELDS <= set(r), RECORD_FIELDS - set(r)
        assert METRICS <= set(r["metrics"]), METRICS - set(r["metrics"])
        assert ENV <= set(r["env"])
        assert HEALTH <= set(r["health"]) and r["device"] == "cpu"
        assert r["health"]["cpu_point_cores"] > 0 and isinstance(r["health"]["warnings"], list)
        assert len(r["series"]["step_times_s"]) == 6 and len(r["series"]["losses"]) == 6
        m = r["metrics"]
        assert m["measured_steps"] == 4 and m["warmup_steps"] == 2
        assert m["samples_per_s_per_gpu"] == pytest.approx(r["knobs"]["mbs"] / m["step_time_mean_s"])  # over the window
        assert m["step_time_p10_s"] <= m["step_time_s"] <= m["step_time_p90_s"]
    manifest = store.read_manifest(summary.run)
    assert manifest["state"] == "complete" and manifest["suite_as_run"]["name"] == "smoke"
    df = store.load_runs([summary.run])
    for col in ("suite", "run_id", "mbs", "recompute", "status", "step_time_s", "step_time_cv", "samples_per_s",
                "samples_per_s_per_gpu", "peak_mem_allocated_gib", "peak_mem_reserved_gib"):
        assert col in df.columns
    assert df["mbs"].tolist() == [1, 1, 2] and df["recompute"].tolist() == ["off", "off", "full"]


def test_each_failure_is_recorded_as_its_status_and_the_sweep_goes_on(tmp_path, in_repo, in_process):
    """The worker's classification, in this process (a crash and a hang, which would take pytest
    down with them, in points' processes: the tests above and below)."""
    path = write_suite(tmp_path / "faults.yaml", f"""
name: faults
workload: {{name: "{TINY}"}}
knobs: {{precision: fp32}}
sweep:
  points:
    - {{label: oom, fault: oom}}
    - {{label: cpu_oom, fault: cpu_oom}}
    - {{label: nan, fault: nan}}
    - {{label: raise, fault: raise}}
    - {{label: metrics, fault: metrics}}
    - {{label: graphs, cuda_graph: step, compile: blocks}}
    - {{label: healthy}}
steps: {{warmup: 1, measure: 2}}
timeout: 120
""")
    summary = SuiteRunner(load(path), tmp_path / "results", launcher=in_process).run_all()
    by_label = {r["label"]: r for r in store.read_records(summary.run)}
    assert {k: v["status"] for k, v in by_label.items()} == {
        "oom": "oom", "cpu_oom": "oom", "nan": "diverged", "raise": "error", "metrics": "error", "graphs": "skipped",
        "healthy": "ok"}
    assert by_label["oom"]["metrics"]["oom_step"] == 0
    assert "out of memory at step 0" in by_label["oom"]["reason"]
    assert "non-finite loss at step 0" in by_label["nan"]["reason"]
    assert "ValueError: fixture failure" in by_label["raise"]["reason"]
    # a failure after the measured steps (the workload's own figures) is an error with its traceback
    assert by_label["metrics"]["reason"].startswith("after the measured steps: RuntimeError")
    assert "extra_metrics" in by_label["metrics"]["extra"]["traceback"]
    assert "needs a CUDA device" in by_label["graphs"]["reason"]
    assert by_label["healthy"]["metrics"]["step_time_s"] > 0
    # the harness counts the parameters (the tune's static memory): two 16-wide blocks and the head, none frozen
    extra = by_label["healthy"]["extra"]
    assert (extra["trainable_params"], extra["frozen_params"]) == (2 * (16 * 16 + 16) + 16 + 1, 0)


@pytest.mark.slow
def test_a_hang_times_out_and_names_its_phase_and_where_it_stood(tmp_path, in_repo):
    # a hang costs its whole timeout: a short one, yet long enough for a busy host's imports
    path = write_suite(tmp_path / "hang.yaml", f"""
name: hang
workload: {{name: "{TINY}"}}
knobs: {{precision: fp32}}
sweep: {{points: [{{label: hang, fault: hang}}]}}
steps: {{warmup: 1, measure: 2}}
timeout: 20
""")
    summary = SuiteRunner(load(path), tmp_path / "results", warm_up=False).run_all()  # a warm-up would hang too
    (hang,) = store.read_records(summary.run)
    assert hang["status"] == "timeout" and "20 s" in hang["reason"]
    # the worker's stacks, dumped before the kill, and what its processes did
    assert "in phase 'first step" in hang["reason"]
    assert "tinywork.py" in hang["reason"] and "in loss" in hang["reason"]
    assert "processes: python" in hang["reason"] and "sleeping" in hang["reason"]


def _slow_suite(tmp_path):
    return write_suite(tmp_path / "slow.yaml", f"""
name: slow
workload: {{name: "{TINY}", params: {{step_s: 0.25}}}}  # a point outlasts the poll that sends the signal
knobs: {{precision: fp32}}
sweep: {{grid: {{seed: [0, 1, 2]}}}}
steps: {{warmup: 1, measure: 1}}
timeout: 120
""")


def _wait_for_records(path, n, proc, limit=120):
    deadline = time.time() + limit
    while time.time() < deadline:
        if path.exists() and len(path.read_text().splitlines()) >= n:
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    raise AssertionError("no records appeared")


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_interrupt_keeps_records_and_resume_completes(tmp_path, in_repo, cli_env, in_process, sig):
    suite = _slow_suite(tmp_path)
    results = tmp_path / "results"
    # as a terminal's Ctrl-C: the signal goes to the run's own process group (the points' processes
    # have sessions of their own); a test started in the background inherits SIGINT ignored (or
    # blocked): the child gets the default back
    proc = subprocess.Popen(benchbay_cmd("run", str(suite), "--results", str(results), "--no-report"),
                            env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, preexec_fn=_default_sigint)
    records = None
    deadline = time.time() + 120
    while records is None and time.time() < deadline:
        found = list(results.glob("slow/*/records.jsonl"))
        records = found[0] if found else None
        time.sleep(0.2)
    assert records is not None
    _wait_for_records(records, 1, proc)
    os.killpg(proc.pid, sig)
    out, _ = proc.communicate(timeout=60)
    kept = store.read_records(records.parent)
    assert 1 <= len(kept) < 3, out
    if sig == signal.SIGINT:
        assert proc.returncode == 130 and "interrupted" in out
        assert store.read_manifest(records.parent)["state"] == "interrupted"
    # the resume in this process (the CLI's --resume as a process: test_cli's test_run_then_show)
    done = SuiteRunner(load(suite), results, resume=True, launcher=in_process).run_all()
    assert done.run == records.parent and done.counts == {"ok": 3 - len(kept)}
    final = store.read_records(records.parent)
    assert len(final) == 3
    assert sorted(r["knobs"]["seed"] for r in final) == [0, 1, 2]
    assert [json.dumps(r, sort_keys=True) for r in final[:len(kept)]] == \
        [json.dumps(r, sort_keys=True) for r in kept]


def test_a_stall_is_placed_in_the_main_threads_frames_however_faulthandler_names_it():
    """The main thread comes last in a dump; after a Ctrl-C it is the "Current thread" (an H200 note
    named a tqdm monitor thread's frames instead)."""
    from benchbay.launch.process import has_stacks, stall_summary

    helper = 'Thread 0x01 (most recent call first):\n  File "tqdm/_monitor.py", line 69 in run\n\n'
    for name in ("Current thread", "Thread"):
        log = (f"benchbay phase: first step\n{helper}{name} 0x02 (most recent call first):\n"
               '  File "inductor/cpp.py", line 4480 in codegen_kernel\n  File "worker.py", line 229 in _measure\n')
        assert stall_summary(log) == ("in phase 'first step'; at File \"inductor/cpp.py\", line 4480 in "
                                      "codegen_kernel <- File \"worker.py\", line 229 in _measure"), name
        assert has_stacks(log)
    assert not has_stacks("benchbay phase: first step\nW1206 a warning\n")  # the note says none came


def test_the_kernels_word_on_a_signal_says_whether_it_is_caught_and_where_it_is_blocked():
    """What a stopped point's note adds when no stacks came: is the stacks' signal caught, pending,
    blocked in how many threads."""
    import faulthandler

    from benchbay.launch.process import signal_state

    sig = signal.SIGUSR2  # not the stacks' own signal, which this process may have registered

    def blocked(state: str) -> int:  # this process's other threads may block it already
        return int(re.search(r"blocked in (\d+) of \d+ threads$", state).group(1))

    before = signal_state(os.getpid(), sig)
    assert before.startswith(f"SIGUSR2 in {os.getpid()}: not caught, blocked in ")
    faulthandler.register(sig)
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {sig})
    try:
        after = signal_state(os.getpid(), sig)
        assert after.startswith(f"SIGUSR2 in {os.getpid()}: caught, ") and blocked(after) == blocked(before) + 1
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)
        faulthandler.unregister(sig)
    assert signal_state(2 ** 22 + 1, sig) == ""  # no such process


def _default_sigint_stacks_blocked() -> None:
    """As a supervisor may start it: the stacks' signal blocked, a mask the points' processes inherit."""
    _default_sigint()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})


@pytest.mark.slow
@pytest.mark.parametrize("warm_up", [False, True])
def test_a_point_stopped_by_a_ctrl_c_says_where_it_stood_and_keeps_its_log(tmp_path, in_repo, cli_env, warm_up):
    # a point that never ends within a call's time limit: the call's SIGINT must still say why
    suite = write_suite(tmp_path / "stuck.yaml", f"""
name: stuck
workload: {{name: "{TINY}"}}
knobs: {{precision: fp32}}
sweep: {{points: [{{label: stuck, fault: hang}}]}}
steps: {{warmup: 1, measure: 2}}
timeout: 600
""")
    results, scratch = tmp_path / "results", tmp_path / "tmp"
    scratch.mkdir()
    flags = () if warm_up else ("--no-warm-up",)  # the hang in the run's warm-up process, or in its point
    proc = subprocess.Popen(benchbay_cmd("run", str(suite), "--results", str(results), "--no-report", *flags),
                            env={**cli_env, "TMPDIR": str(scratch)}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=_default_sigint_stacks_blocked)
    deadline = time.time() + 120
    while not any("phase: first step" in p.read_text() for p in scratch.glob("benchbay-*/*/worker.log")):
        assert time.time() < deadline and proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    time.sleep(1.0)  # into the hang
    os.killpg(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, out
    (run,) = results.glob("stuck/*")
    assert store.read_records(run) == []  # not a result: resumable
    (log,) = (run / store.STOPPED).glob("*.log")
    assert ("the warm-up process of " if warm_up else "") + "stuck was stopped after" in out
    assert "in phase 'first step" in out and str(log) in out and log.name.endswith("-warm-up.log") == warm_up
    assert f"its stacks in it: {log}" in out
    assert "processes: python" in out and "sleeping" in out  # what its processes did, as the OS saw it
    assert "tinywork.py" in log.read_text() and "in loss" in log.read_text()  # its stacks, asked for first


def test_batch_search_finds_the_memory_boundary_in_few_probes(tmp_path, in_repo, in_process):
    path = write_suite(tmp_path / "search.yaml", f"""
name: search
workload: {{name: "{TINY}", params: {{max_mbs: 23}}}}
knobs: {{precision: fp32}}
sweep:
  points: [{{label: fits}}, {{label: unsupported, cuda_graph: attention}}]
  search: {{knob: mbs, min: 1, max: 64}}
steps: {{warmup: 1, measure: 1}}
timeout: 120
""")
    summary = SuiteRunner(load(path), tmp_path / "results", launcher=in_process).run_all()
    records = store.read_records(summary.run)
    fits = [r for r in records if r["label"] == "fits"]
    assert max(r["knobs"]["mbs"] for r in fits if r["status"] == "ok") == 23
    assert {r["status"] for r in fits if r["knobs"]["mbs"] > 23} == {"oom"}
    assert len(fits) <= math.ceil(math.log2(64 / 1)) + 2
    assert [r["status"] for r in records if r["label"] == "unsupported"] == ["skipped"]  # no further probes
    assert all(r["extra"]["search_knob"] == "mbs" for r in records)


def test_batch_search_in_steps_probes_multiples_only_and_labels_pick_points(tmp_path, in_repo, in_process):
    path = write_suite(tmp_path / "search.yaml", f"""
name: search-step
workload: {{name: "{TINY}", params: {{max_mbs: 23}}}}
knobs: {{precision: fp32}}
sweep:
  points: [{{label: fits}}, {{label: other, seed: 1}}]
  search: {{knob: mbs, min: 8, max: 64, step: 8}}
steps: {{warmup: 1, measure: 1}}
timeout: 120
""")
    summary = SuiteRunner(load(path), tmp_path / "results", labels=["fits"], launcher=in_process).run_all()
    records = store.read_records(summary.run)
    assert {r["label"] for r in records} == {"fits"}
    assert store.read_manifest(summary.run)["labels"] == ["fits"]
    assert all(r["knobs"]["mbs"] % 8 == 0 for r in records) and len(records) <= 4
    assert max(r["knobs"]["mbs"] for r in records if r["status"] == "ok") == 16
    with pytest.raises(ValueError, match="no point labelled 'nope'"):
        SuiteRunner(load(path), tmp_path / "results", labels=["nope"])


def test_a_resumed_search_does_not_snapshot_its_edges_again(tmp_path, in_repo, in_process):
    """Each memory snapshot of a search's edges re-runs a whole point: a resumed run that finds one
    recorded (even one that failed) leaves it be."""
    path = write_suite(tmp_path / "search.yaml", f"""
name: search-snapshots
workload: {{name: "{TINY}", params: {{max_mbs: 3}}}}
knobs: {{precision: fp32}}
sweep: {{points: [{{label: fits}}], search: {{knob: mbs, min: 1, max: 8}}}}
steps: {{warmup: 1, measure: 1}}
""")
    first = SuiteRunner(load(path), tmp_path / "results", launcher=in_process)
    first.run_all()
    records = [Record.from_json(r) for r in store.read_records(first.run)]
    launcher = _Snapshotting(first.launcher)
    runner = SuiteRunner(load(path), tmp_path / "results", resume=True, launcher=launcher)
    runner.scratch = tmp_path / "scratch"
    config = runner.tasks()[0][0]
    runner._snapshot_edges(config, records)
    assert sorted(launcher.launched) == [3, 4]  # the largest that fits and the smallest that does not
    runner._snapshot_edges(config, records)
    assert len(launcher.launched) == 2
    # a suite that asks for no snapshots runs no edge again, in a run without a snapshot log too
    quiet = SuiteRunner(load(path, ["sweep.search.memory_snapshots=false"]), tmp_path / "quiet", launcher=launcher)
    quiet._snapshot_edges(config, records)
    assert len(launcher.launched) == 2 and not (quiet.run / "memory").exists()


def test_a_resume_knows_the_probes_measured_before_a_knob_was_added(tmp_path, in_repo, in_process):
    """Adding a knob (at the default that keeps the old behaviour) changes every point's id: a
    resumed search still finds the probes recorded without it and measures nothing again."""
    path = write_suite(tmp_path / "search.yaml", f"""
name: search-new-knob
workload: {{name: "{TINY}", params: {{max_mbs: 3}}}}
knobs: {{precision: fp32}}
sweep: {{points: [{{label: fits}}], search: {{knob: mbs, min: 1, max: 8}}}}
steps: {{warmup: 1, measure: 1}}
""")
    first = SuiteRunner(load(path), tmp_path / "results", launcher=in_process).run_all()
    assert first.counts == {"ok": 3, "oom": 2}  # 1, 2 and 3 fit, 4 and 5 do not: each probe counted as it lands
    rows = store.read_records(first.run)
    for row in rows:  # as measured before cudnn_benchmark existed
        del row["knobs"]["cudnn_benchmark"]
        row["point_id"] = store.point_id(row["workload"], row["params"], row["knobs"])
    (first.run / store.RECORDS).write_text("".join(json.dumps(r) + "\n" for r in rows))
    resumed = SuiteRunner(load(path), tmp_path / "results", resume=first.run.name, launcher=in_process).run_all()
    assert resumed.counts == {} and len(store.read_records(first.run)) == len(rows)
    # a report reads them under today's knobs, and a point measured again (by a resume that did
    # not know it) by its first record
    later = "2099-01-01T00:00:00+00:00"
    again = {**rows[0], "knobs": {**rows[0]["knobs"], "cudnn_benchmark": False}, "started_at": later}
    again["point_id"] = store.point_id(again["workload"], again["params"], again["knobs"])
    store.append_record(first.run, Record.from_json(again))
    df = store.load_runs([first.run])
    assert len(df) == len(rows) and df["cudnn_benchmark"].tolist() == [False] * len(rows)
    assert later not in df["started_at"].tolist() and df["point_id"].tolist()[0] == again["point_id"]


class _Snapshotting:
    """A launcher that records which points it was asked to run, and fails them."""

    def __init__(self, inner):
        self.inner, self.launch, self.launched = inner, inner.launch, []

    def device(self, requested):
        return self.inner.device(requested)

    def scratch(self, run):
        return self.inner.scratch(run)

    def run(self, spec, workdir):
        self.launched.append(spec.knobs["mbs"])
        return Outcome(status=Status.ERROR, reason="not run")


# ---- the machine's health around a point ---------------------------------------------------------

def test_a_loaders_throughput_is_what_it_delivered_not_its_median_wait():
    waits = {"step_time_s": 0.0014, "samples_per_step": 1}  # batches its workers had ready
    assert derived_metrics(waits, {"loader_samples_per_s": 54.0}, 1, None)["samples_per_s"] == 54.0
    unrated = derived_metrics(waits, {"loader_samples_per_s": None}, 1, None)
    assert unrated["samples_per_s"] is None and unrated["samples_per_s_per_gpu"] is None
    step = derived_metrics({"step_time_s": 0.5, "samples_per_step": 4, "flops_per_sample": 1e12}, {}, 2, 1e14)
    assert step["samples_per_s"] == 16 and step["samples_per_s_per_gpu"] == 8 and step["mfu"] == 0.08


def test_a_training_steps_throughput_is_over_its_window_not_its_median_step():
    # 4 workers in phase: three steps find a batch ready, the fourth waits for all four
    bursts = {"step_time_s": 2.8, "step_time_mean_s": 6.4, "samples_per_step": 24}
    assert derived_metrics(bursts, {}, 1, None)["samples_per_s_per_gpu"] == pytest.approx(24 / 6.4)


def test_other_load_is_the_busy_time_the_point_did_not_use():
    start = CpuSnapshot(perf_t=0.0, wall_t=1000.0, busy_s=100.0, own_s=10.0,
                        others={(7, 900.0): ("stress", 50.0), (8, 900.0): ("idle", 5.0)})
    end = CpuSnapshot(perf_t=2.0, wall_t=1002.0, busy_s=104.0, own_s=11.0,
                      others={(7, 900.0): ("stress", 51.6), (8, 900.0): ("idle", 5.0), (9, 1001.0): ("new", 0.3),
                              (10, 950.0): ("unseen", 9.0)})
    load = cpu_load(start, end, cpus=2)
    assert load["cpu_point_cores"] == pytest.approx(0.5) and load["cpu_other_cores"] == pytest.approx(1.5)
    # the busiest first; a process started during the point counts whole; one missed at the start is unknown
    assert [t.split(" (pid")[0] for t in load["cpu_other_top"]] == ["stress", "new"]
    assert load["cpu_other_top"][0].endswith("0.80 CPUs")


def test_warnings_say_what_made_a_point_or_the_machine_suspect():
    quiet = {"cpu_other_cores": 0.1, "cpu_available": 2, "cpu_other_top": []}
    assert point_warnings(quiet) == []
    busy = point_warnings({**quiet, "cpu_other_cores": 0.95, "cpu_other_top": ["make (pid 3) 0.90 CPUs"]})
    assert busy == ["busy CPU: other processes used 0.95 of 2 CPUs (make (pid 3) 0.90 CPUs)"]
    assert point_warnings({**quiet, "cpu_other_cores": 0.95, "cpu_available": 128}) == []  # 1% of a large host
    gpu = point_warnings({"gpu_other_processes": ["python (pid 9, 3.0 GiB)"],
                          "gpu_clock_events": ["software power cap", "hardware thermal slowdown"]})
    assert gpu == ["shared GPU: python (pid 9, 3.0 GiB)", "GPU clocks slowed: hardware thermal slowdown"]
    assert machine_warnings({"cpu_governor": "performance", "gpu_power_limit_w": 700, "gpu_power_default_w": 700}) == []
    assert machine_warnings({"cpu_governor": "powersave", "on_battery": True, "gpu_power_limit_w": 500,
                             "gpu_power_default_w": 700}) == [
        "CPU frequency governor powersave, not performance: clocks follow the load",
        "on battery power: the CPU may be held back", "GPU power limit 500 W, below its default 700 W"]


def test_a_points_own_processes_are_never_other_load():
    with HealthCheck() as check:
        child = subprocess.run([sys.executable, "-c", "sum(i * i for i in range(3_000_000))"], check=True)
    result = check.result()
    assert child.returncode == 0 and result["cpu_point_cores"] > 0
    assert not any("sum(i" in text for text in result["cpu_other_top"])


@pytest.mark.slow
def test_a_run_wide_compile_cache_lets_a_later_point_load_its_graphs(tmp_path, in_repo):
    """compile_cache: run shares one cache: the second point (other weights, same graphs) loads
    what the first compiled, says so, and its first step stays out of the amortisation table."""
    path = write_suite(tmp_path / "cache.yaml", f"""
name: shared-cache
workload: {{name: "{TINY}"}}
knobs: {{precision: fp32, compile: blocks}}
sweep: {{points: [{{label: first, seed: 0}}, {{label: second, seed: 1}}]}}
steps: {{warmup: 1, measure: 2}}
compile_cache: run
timeout: 300
""")
    # no warm-up process: it would fill the run's cache before the first point
    summary = SuiteRunner(load(path), tmp_path / "results", warm_up=False).run_all()
    hits = {r["label"]: r["extra"]["compile_cache_hits"] for r in store.read_records(summary.run)}
    assert hits["first"] == 0 and hits["second"] > 0
    points = point_summary(store.load_runs([summary.run]))
    assert warm(points.set_index("label").loc["second"]) and not warm(points.set_index("label").loc["first"])


def test_points_compile_cold_unless_the_suite_shares_a_cache(tmp_path):
    suite = load(write_suite(tmp_path / "s.yaml", f"name: s\nworkload: {{name: \"{TINY}\"}}\n"))
    runner = SuiteRunner(suite, tmp_path / "results")
    runner.scratch = tmp_path / "scratch"
    point = runner.tasks()[0][0]
    assert runner.spec(point).compile_cache_dir is None
    runner.suite = replace(suite, compile_cache="run")
    assert runner.spec(point).compile_cache_dir == str(tmp_path / "scratch" / "inductor")


def test_a_measure_budget_ends_the_steps_after_the_fewest_it_allows(tmp_path, in_repo, in_process):
    path = write_suite(tmp_path / "budget.yaml", f"""
name: budget
workload: {{name: "{TINY}"}}
sweep: {{points: [{{label: a}}]}}
steps: {{warmup: 1, measure: 20, max_measure_s: 0.000001}}
timeout: 120
""")
    summary = SuiteRunner(load(path), tmp_path / "results", launcher=in_process).run_all()
    (record,) = store.read_records(summary.run)
    assert record["status"] == "ok" and record["metrics"]["measured_steps"] == 3
    assert record["extra"]["measure_budget_spent"] and "3 steps (measure budget)" in describe(Record.from_json(record))
    assert len(record["series"]["step_times_s"]) == 4 and len(record["series"]["losses"]) == 4


def _three_tiny_points(tmp_path):
    return load(write_suite(tmp_path / "tb.yaml", f"""
name: tb
workload: {{name: "{TINY}"}}
sweep: {{grid: {{mbs: [1, 2, 3]}}}}
steps: {{warmup: 1, measure: 2}}
timeout: 120
"""))


def test_a_time_budget_stops_between_points_and_a_resume_completes(tmp_path, in_repo, in_process):
    suite = _three_tiny_points(tmp_path)
    # the first point always runs; after it, a budget shorter than it leaves no room for another
    summary = SuiteRunner(suite, tmp_path / "results", time_budget_s=0.001, launcher=in_process).run_all()
    assert summary.out_of_time and summary.counts == {"ok": 1}
    assert store.read_manifest(summary.run)["state"] == "interrupted"
    resumed = SuiteRunner(suite, tmp_path / "results", resume=summary.run.name, launcher=in_process).run_all()
    assert resumed.counts == {"ok": 2} and not resumed.out_of_time
    assert len(store.read_records(summary.run)) == 3


def test_a_time_budget_skips_a_point_that_took_longer_before_and_runs_the_rest(tmp_path, in_repo, in_process):
    suite = _three_tiny_points(tmp_path)
    first = SuiteRunner(suite, tmp_path / "results", launcher=in_process).run_all()
    records = store.read_records(first.run)
    for r in records:  # on this machine, mbs 2 once took longer than the budget to come
        r["duration_s"] = 10_000.0 if r["knobs"]["mbs"] == 2 else r["duration_s"]
    (first.run / "records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    # the first point of a run is no longer started blindly: its own past says it cannot finish
    summary = SuiteRunner(suite, tmp_path / "results", time_budget_s=5_000, launcher=in_process).run_all()
    assert summary.out_of_time and summary.counts == {"ok": 2}
    assert sorted(r["knobs"]["mbs"] for r in store.read_records(summary.run)) == [1, 3]
    resumed = SuiteRunner(suite, tmp_path / "results", resume=summary.run.name, launcher=in_process).run_all()
    assert resumed.counts == {"ok": 1} and [r["knobs"]["mbs"] for r in store.read_records(summary.run)][-1] == 2


def test_a_child_that_exits_keeps_the_cpu_it_used():
    children = ChildrenCpu(psutil.Process())
    # the child burns CPU, says so, and exits when told: the order is the pipe's, not a clock's
    burn = subprocess.Popen([sys.executable, "-c", "import sys, time\nend = time.process_time() + 0.3\n"
                             "while time.process_time() < end: pass\nprint('burnt', flush=True)\nsys.stdin.read()"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert burn.stdout.readline() == "burnt\n"
    alive = children.seconds()
    burn.stdin.close()
    burn.wait()
    assert alive > 0 and children.seconds() >= alive  # a sum over live children drops to 0 here


def test_a_points_line_gives_the_step_of_the_tables_and_a_decoders_its_decode_figures():
    record = Record(suite="s", run_id="r", point_id="p", workload="w", status=Status.OK, device="cuda",
                    metrics={"step_time_s": 2.83, "step_time_mean_s": 6.43, "step_time_cv": 1.2,
                             "samples_per_s_per_gpu": 24 / 6.43})
    # the mean step, the one the rate is over (24 / 6.43 s), as every table shows it
    assert describe(record).startswith("ok p: 6430.0 ms/step, 3.73 samples/s/GPU, noisy: CV 1.20")
    decoder = replace(record, device="cpu",
                      metrics={"step_time_s": 0.0014, "step_time_mean_s": 0.02, "step_time_cv": 2.3},
                      extra={"view_latency_ms_median": 32.9, "cpu_s_per_sample": 0.104, "loader_samples_per_s": 54.2})
    assert describe(decoder) == "ok p: 32.9 ms/view (median), 104 ms CPU/sample, 54.2 samples/s delivered"


def test_a_step_returning_a_bare_loss_runs_and_an_error_line_says_where_its_traceback_is(tmp_path, in_repo,
                                                                                          in_process):
    path = write_suite(tmp_path / "bare.yaml", f"""
name: bare
workload: {{name: "tests.fixtures.tinywork:BareLoss"}}
knobs: {{precision: fp32}}
sweep: {{points: [{{label: bare}}, {{label: broken, workload: {{name: "{TINY}"}}, fault: raise}}]}}
steps: {{warmup: 1, measure: 2}}
timeout: 120
""")
    # the worker's own loop in this process (a raise in a real process: the fault suite)
    summary = SuiteRunner(load(path), tmp_path / "results", launcher=in_process).run_all()
    by_label = {r["label"]: Record.from_json(r) for r in store.read_records(summary.run)}
    assert by_label["bare"].status == "ok", by_label["bare"].reason
    broken = by_label["broken"]
    assert "Traceback" in broken.extra["traceback"]
    assert f"fixture failure (traceback: extra.traceback of its record in run {summary.run.name})" in describe(broken)
