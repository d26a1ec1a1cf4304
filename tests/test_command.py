"""The ``command`` workload: a user's own script run as it is, its flag and environment switch swept,
its steps timed from inside by the probe; an OOM, a hang, a failure and a missing command each end
as they should; a tune searches its knobs."""

import json
import os
import textwrap
from pathlib import Path

import pandas as pd
import psutil
import pytest

from benchbay import store
from benchbay.analysis.frame import records_to_frame
from benchbay.launch.harness import harness_for
from benchbay.record import Status
from benchbay.report import build_report
from benchbay.runner import SuiteRunner
from benchbay.suite import SuiteError, load
from tests.conftest import write_suite

SCRIPT = textwrap.dedent("""\
    import argparse, json, os, sys, time
    import torch

    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--steps", type=int, default=10_000)
    p.add_argument("--fail", default="none")
    args = p.parse_args()
    if args.fail == "oom":
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (script)")
    if args.fail == "exit":
        print("bad flag --nope", file=sys.stderr)
        sys.exit(3)
    if args.fail == "hang":
        time.sleep(3600)
    slow = os.environ.get("STEP_SWITCH", "0") == "1"
    model = torch.nn.Linear(16, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    last = None
    for i in range(args.steps):
        x = torch.randn(args.batch_size, 16)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        time.sleep(0.1 if slow else 0.01)  # a planted ratio of 10
        if args.fail != "no_optimizer":
            opt.step()
        now = time.perf_counter()  # the script's own clock, between its steps' ends
        own = None if last is None else now - last
        last = now
        print(json.dumps({"step": i, "own_s": own}), flush=True)
        print(f"step {i} loss {loss.item():.5f}", flush=True)
""")


def command_suite(tmp_path, fail="none", extra="", steps="{warmup: 2, measure: 6}", sweep="", timeout=120):
    (tmp_path / "train.py").write_text(SCRIPT)
    return write_suite(tmp_path / "suite.yaml", f"""\
name: cmd
workload:
  name: command
  params:
    argv: ["{{python}}", train.py, --batch-size, "{{mbs}}", --fail, "{fail}"]
    env: {{STEP_SWITCH: "{{switch}}"}}
    knobs: {{switch: ["0", "1"]}}
    loss_regex: 'loss ([0-9.]+)'
    cwd: {tmp_path}
{extra}steps: {steps}
timeout: {timeout}
{sweep}""")


def run_suite(path, tmp_path, launcher=None):
    """The suite's records. No cold-start warm-up process (runner.py's docstring): it would start the
    script once more, and no figure here is compared with another run's."""
    runner = SuiteRunner(load(path), tmp_path / "results", launcher=launcher, warm_up=False)
    runner.run_all()
    return store.typed_records(runner.run)


# the worker in this process where the test is not about the point's own process: the script is one anyway

def test_a_script_runs_as_it_is_its_switches_swept_and_its_steps_timed_by_the_probe(tmp_path, in_repo, in_process):
    path = command_suite(tmp_path, sweep='sweep: {zip: {mbs: [2, 4], switch: ["0", "1"]}}\n')
    records = run_suite(path, tmp_path, in_process)
    assert [(r.status, r.knobs["mbs"], r.knobs["switch"]) for r in records] == [(Status.OK, 2, "0"),
                                                                                 (Status.OK, 4, "1")]
    for r in records:
        assert r.extra["probe"] == "optimizer-step hook"
        assert r.metrics["samples_per_step"] == r.knobs["mbs"] and r.metrics["skipped_steps"] == 0
        assert len(r.series["step_times_s"]) == 8 and len(r.series["losses"]) == 8
        assert r.extra["command"][3] == str(r.knobs["mbs"])  # the flag took the point's batch
        assert 0.05 < r.metrics["peak_host_rss_gib"] < 8  # the script's process (torch alone is ~0.3 GiB)
    # the environment switch reached the script: each of its steps sleeps 100 ms against 10
    fast, slow = records
    assert min(slow.series["step_times_s"]) >= 0.1 > fast.metrics["step_time_s"]


def test_the_probes_step_times_agree_with_the_scripts_own_clock(tmp_path, in_repo):
    import torch

    from benchbay.workloads.command import Command

    (tmp_path / "train.py").write_text(SCRIPT)
    params = {"argv": ["{python}", str(tmp_path / "train.py"), "--steps", "12"], "knobs": {"switch": ["1"]},
              "env": {"STEP_SWITCH": "{switch}"}}
    workload = Command(params, {"mbs": 2}, torch.device("cpu"))
    harness = harness_for(workload, 1)
    with harness.settings():
        step = harness.prepare()
        for i in range(10):
            step(i)
        probe = workload.own_figures(10)["times"][1:]
        own = [json.loads(line)["own_s"] for line in workload.output().splitlines() if line.startswith("{")][1:10]
    # the same steps by two clocks: the hook fires as opt.step() ends, the script reads its clock just after;
    # over 9 steps the two spans differ by the gap at the first and last step only
    assert len(probe) == len(own) == 9
    assert abs(sum(probe) - sum(own)) < 0.005 and sum(probe) >= 9 * 0.1


@pytest.mark.parametrize(("fail", "status", "words"), [
    ("oom", Status.OOM, "ran out of memory"),
    ("exit", Status.ERROR, "exit code 3"),
    ("no_optimizer", Status.ERROR, "the probe saw no optimizer step"),
])
def test_a_command_that_fails_ends_in_its_status_with_what_it_said(tmp_path, in_repo, in_process, fail, status,
                                                                   words):
    steps = "{warmup: 1, measure: 2}"
    path = command_suite(tmp_path, fail, steps=steps)
    if fail == "no_optimizer":  # a script that never steps an optimizer ends, and says why it has no steps
        text = path.read_text().replace('"{python}", train.py,', '"{python}", train.py, --steps, "2",')
        path.write_text(text)
    (record,) = run_suite(path, tmp_path, in_process)
    assert record.status == status
    assert words in record.reason
    if fail == "exit":
        assert "bad flag --nope" in record.reason


def test_step_regex_stands_in_where_the_probe_sees_no_optimizer_step(tmp_path, in_repo, in_process):
    path = command_suite(tmp_path, "no_optimizer", extra="", steps="{warmup: 1, measure: 3}")
    text = path.read_text().replace("    cwd:", "    step_regex: 'step \\d+ loss'\n    cwd:")
    path.write_text(text)
    (record,) = run_suite(path, tmp_path, in_process)
    assert record.status == Status.OK, record.reason
    assert record.extra["probe"] == "output" and len(record.series["step_times_s"]) == 4


def test_without_the_probe_the_output_times_the_steps_and_without_a_regex_the_point_is_refused(tmp_path, in_repo,
                                                                                             in_process):
    """probe=off (what the probe costs: suites/command-probe-overhead.yaml): not loaded, so the script's
    steps are timed by its lines; a suite that gives no regex to time them by is told so."""
    no_probe = '{label: no-probe, probe: "off"}'
    path = command_suite(tmp_path, steps="{warmup: 1, measure: 3}", sweep=f"sweep: {{points: [{no_probe}]}}\n")
    refused, = run_suite(path, tmp_path, in_process)
    assert refused.status == Status.SKIPPED and "no step_regex or throughput_regex" in refused.reason
    path.write_text(path.read_text().replace("    cwd:", "    step_regex: 'step \\d+ loss'\n    cwd:")
                    .replace(no_probe, f'{{label: probe, probe: "on"}}, {no_probe}'))
    records = {r.label: r for r in run_suite(path, tmp_path / "again", in_process)}
    assert [r.status for r in records.values()] == [Status.OK, Status.OK]
    assert records["probe"].extra["probe"] == "optimizer-step hook"
    assert records["no-probe"].extra["probe"] == "output" and len(records["no-probe"].series["step_times_s"]) == 4
    assert records["no-probe"].knobs["probe"] == "off"


@pytest.mark.slow  # a point's timeout: 8 s
def test_a_hung_command_times_out_with_nothing_left_running(tmp_path, in_repo):
    path = command_suite(tmp_path, "hang", steps="{warmup: 1, measure: 2}", timeout=8)
    (record,) = run_suite(path, tmp_path)
    assert record.status == Status.TIMEOUT
    left = [p for p in psutil.process_iter(["cmdline", "cwd"])  # gone or not ours to read: info is None
            if "train.py" in " ".join(p.info["cmdline"] or []) and str(tmp_path) in (p.info["cwd"] or "")]
    assert left == []


@pytest.mark.slow  # a killed point's process: 8 s
def test_a_killed_points_scratch_goes_with_the_points_folder(tmp_path, in_repo):
    """The worker is killed at the timeout before it can remove the command's scratch: the scratch lies
    inside the point's folder, which the sweep removes."""
    (tmp_path / "hangs.py").write_text("import pathlib, sys, time\n"
                                       "pathlib.Path(sys.argv[1]).write_text(sys.argv[2])\ntime.sleep(3600)\n")
    path = write_suite(tmp_path / "hang.yaml", f"""\
name: cmd-hang
workload:
  name: command
  params: {{argv: ["{{python}}", {tmp_path / "hangs.py"}, {tmp_path / "where"}, "{{scratch}}"]}}
steps: {{warmup: 1, measure: 1}}
timeout: 8
""")
    (record,) = run_suite(path, tmp_path)
    assert record.status == Status.TIMEOUT
    scratch = Path((tmp_path / "where").read_text())
    assert scratch.name.startswith("benchbay-command-") and not scratch.exists()


def test_a_command_that_is_not_found_is_one_error_before_any_point_runs(tmp_path):
    text = command_suite(tmp_path).read_text().replace('"{python}"', "no-such-program-here")
    with pytest.raises(SuiteError, match=r"argv\[0\]: a command on PATH or a file, got 'no-such-program-here'"):
        load(write_suite(tmp_path / "missing.yaml", text))


def test_a_suite_only_read_needs_no_program_here(tmp_path):
    """A report's --suite reads the suite of runs made on another machine (lerobot-train on a GPU host):
    its program need not be installed where the report is made; the rest is still checked."""
    text = command_suite(tmp_path).read_text().replace('"{python}"', "no-such-program-here")
    suite = load(write_suite(tmp_path / "elsewhere.yaml", text), runnable=False)
    assert suite.params["argv"][0] == "no-such-program-here"
    with pytest.raises(SuiteError, match=r"argv\[3\]: placeholders naming a knob"):
        load(write_suite(tmp_path / "bad.yaml", text.replace('"{mbs}"', '"{nope}"')), runnable=False)


@pytest.mark.parametrize(("change", "expected"), [
    (('"{mbs}"', '"{mbs.__class__}"'), r"argv\[3\]: placeholders naming a knob"),
    (('"{mbs}"', '"{nope}"'), r"argv\[3\]: placeholders naming a knob"),
    (("knobs: {switch:", "knobs: {mbs:"), r"params.knobs.mbs: a name .* not a generic knob"),
    (("knobs: {switch:", "knobs: {probe:"), r"params.knobs.probe: a name .* nor the probe's"),
    (("loss_regex: 'loss ([0-9.]+)'", "loss_regex: 'loss'"), "loss_regex: a regular expression with a group"),
    (("    cwd:", "    series_regex: {Data: 'x ([0-9]+)'}\n    cwd:"), "series_regex: a mapping of series names"),
    (("    cwd:", "    series_regex: {data: 'x'}\n    cwd:"), "series_regex.data: a regular expression with a group"),
    (("    cwd:", "    series_regex: {losses: 'x ([0-9]+)'}\n    cwd:"), "series_regex: a mapping of series names"),
    (("    cwd:", "    series_regex: {switch: 'x ([0-9]+)'}\n    cwd:"), "series_regex: a mapping of series names"),
    (('"{mbs}"', '"{dataset}"'), r"argv\[3\]: placeholders naming a knob"),  # no params.dataset to name
    (("steps:", "devices: {nproc: 2}\nsteps:"), "devices: nproc and nnodes 1 for a command"),  # it launches its ranks
])
def test_a_bad_command_is_an_error_naming_its_key(tmp_path, change, expected):
    text = command_suite(tmp_path).read_text().replace(*change)
    with pytest.raises(SuiteError, match=expected):
        load(write_suite(tmp_path / "bad.yaml", text))


READS_A_DATASET = textwrap.dedent("""\
    import json, pathlib, sys
    import torch

    root, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
    info = json.loads((root / "meta" / "info.json").read_text())
    stats = json.loads((root / "meta" / "stats.json").read_text())  # what a policy normalises with
    mean = torch.tensor(stats["observation.state"]["mean"])
    out.mkdir()  # a training script's output folder: it must not exist yet
    model = torch.nn.Linear(len(mean), 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for i in range(10_000):
        loss = model(torch.randn(4, len(mean)) + mean).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"{info['codebase_version']} loss {loss.item():.5f} data_s:0.00100", flush=True)
""")


def test_a_command_trains_on_a_dataset_benchbay_writes_and_writes_into_its_own_scratch(tmp_path, in_repo,
                                                                                          in_process, monkeypatch):
    monkeypatch.setenv("BENCHBAY_DECODE_CACHE", str(tmp_path / "cache"))
    (tmp_path / "reads.py").write_text(READS_A_DATASET)
    path = write_suite(tmp_path / "suite.yaml", f"""\
name: cmd-dataset
workload:
  name: command
  params:
    argv: ["{{python}}", {tmp_path / "reads.py"}, "{{dataset}}", "{{scratch}}/out"]
    dataset: {{preset: lerobot-libero, codec: h264, height: 32, width: 32, episode_frames: 12, episodes: 2}}
    loss_regex: 'v3.0 loss ([0-9.]+)'
    series_regex: {{data_waits_s: 'data_s:([0-9.]+)'}}
steps: {{warmup: 1, measure: 3}}
sweep: {{grid: {{mbs: [1, 2]}}}}
""")
    records = run_suite(path, tmp_path, in_process)
    assert [r.status for r in records] == [Status.OK, Status.OK], [r.reason for r in records]
    (dataset,) = (tmp_path / "cache").iterdir()  # written once, for both points
    outs = []
    for r in records:
        _, _, root, out = r.extra["command"]
        assert root == str(dataset) and len(r.series["losses"]) == len(r.series["data_waits_s"]) == 4
        assert r.metrics["data_wait_s"] == pytest.approx(0.001)  # the script's own figure, per measured step
        outs.append(out)
    assert outs[0] != outs[1] and not any(Path(o).exists() for o in outs)  # each its own, removed at its end
    # the report groups points by their params: a command's are lists and mappings (argv, env, dataset)
    build_report(records_to_frame([r.to_json() for r in records]), tmp_path / "report")
    assert "![steady-state step times per point]" in (tmp_path / "report" / "report.md").read_text()


@pytest.mark.parametrize(("dataset", "expected"), [
    ("{preset: nope}", r"params.dataset: a mapping with preset: one of \[.*'lerobot-libero'"),
    ("{preset: lerobot, colour: red}", r"params.dataset.colour: a field of the clip spec"),
    ("{preset: lerobot, episodes_per_file: 0}", r"params.dataset: a valid clip spec \(episodes_per_file"),
])
def test_a_bad_dataset_is_an_error_naming_its_key(tmp_path, dataset, expected):
    text = command_suite(tmp_path).read_text().replace("    cwd:", f"    dataset: {dataset}\n    cwd:")
    with pytest.raises(SuiteError, match=expected):
        load(write_suite(tmp_path / "bad.yaml", text))


def test_a_tune_searches_the_commands_own_knobs(tmp_path, in_repo, in_process):
    from benchbay.tune.study import Tuner

    path = command_suite(tmp_path, steps="{warmup: 1, measure: 3}")
    path.write_text(path.read_text() + "tune:\n  space: {switch: ['0', '1'], mbs: [2]}\n  trials: 2\n"
                    "  confirm: false\n")
    result = Tuner(load(path), tmp_path / "results", launcher=in_process).run_study().result
    assert result["best"]["knobs"] == {"switch": "0", "mbs": 2}  # 10 ms a step against 100


def test_the_env_switches_example_validates():
    suite = load("suites/examples/env-switches.yaml")
    assert [p.label for p in suite.expand()] == ["baseline", "+attn", "+compile"]


@pytest.mark.slow
def test_a_command_launched_by_torchrun_with_ddp_over_gloo_is_timed_on_rank_0(tmp_path, in_repo, in_process):
    path = write_suite(tmp_path / "ddp.yaml", """\
name: ddp
workload:
  name: command
  params:
    argv: ["{python}", -m, torch.distributed.run, --nproc-per-node, "2", --master-port, "29533",
           suites/examples/standin_train.py, --batch-size, "{mbs}", --iterations, "12", --width, "32"]
    env: {WALLX_PERF_DDP: "1", OMP_NUM_THREADS: "1"}
    loss_regex: 'loss ([0-9.]+)'
    samples_per_step: "{mbs}"
knobs: {mbs: 4}
steps: {warmup: 4, measure: 6}
timeout: 300
""")
    (record,) = run_suite(path, tmp_path, in_process)
    assert record.status == Status.OK, record.reason
    assert record.extra["probe"] == "optimizer-step hook"
    assert len(record.series["step_times_s"]) == 10 and len(record.series["losses"]) == 10
    # per GPU, a rank's 4 samples a step; all of them, both ranks'
    assert record.metrics["command_ranks"] == 2
    assert record.metrics["samples_per_s"] == pytest.approx(2 * record.metrics["samples_per_s_per_gpu"])


@pytest.mark.slow  # torch.profiler in the command's own process: ~13 s
def test_a_profiled_command_is_profiled_by_its_probe_in_its_own_process(tmp_path, in_repo, in_process):
    """`benchbay profile` of a command point: torch.profiler runs in the script's process, over the
    steps after the measured ones (the worker's own process only waits), and the record has the
    trace's figures."""
    from benchbay.profiling import profile_points

    path = command_suite(tmp_path, steps="{warmup: 1, measure: 2}")
    run = profile_points(load(path), results_root=tmp_path / "results")
    (record,) = store.typed_records(run)
    assert record.status == Status.OK, record.reason
    traces = list((run / "profiles").glob("*/trace.json"))
    assert len(traces) == 1 and (traces[0].parent / "top_ops.csv").exists()
    assert record.extra["profiled_steps"] == 3 and record.extra["profiled_step_s"] > 0.01  # the script sleeps 10 ms
    assert any("addmm" in op["name"] or "linear" in op["name"] for op in record.extra["profile_top_ops"])


@pytest.mark.slow  # Wall-X at toy widths, once a point
def test_the_crosschecks_plain_script_trains_the_step_the_wallx_workload_measures(tmp_path, in_repo):
    """The probe's cross-check compares like with like: suites/examples/wallx_plain_train.py, through
    the command workload, over its own objects and over the harness's, gives the losses the wallx
    workload's point of the same knobs gives, at the depth the suite runs (12 language layers)."""
    tiny = ["knobs.preset=wallx-tiny", "knobs.mbs=2", "knobs.vision_attention=sdpa", "steps.warmup=1",
            "steps.measure=3", "repeats=1", "timeout=300"]
    runner = SuiteRunner(load("suites/wallx-probe-crosscheck.yaml", tiny), tmp_path / "results", warm_up=False)
    runner.run_all()
    records = {r.label: r for r in store.typed_records(runner.run)}
    assert set(records) == {"harness", "script", "script-harness-build"}
    assert all(r.status == Status.OK for r in records.values()), {k: r.reason for k, r in records.items()}
    assert records["harness"].knobs["vision_attention"] == records["script"].knobs["vision_attention"] == "sdpa"
    harness = records["harness"].series["losses"]
    assert len(harness) == 4  # the warm-up step's loss and the measured ones
    for side in ("script", "script-harness-build"):  # the script prints five decimals
        assert records[side].series["losses"] == pytest.approx(harness, rel=1e-3), side


@pytest.mark.slow  # Wall-X at toy width, a few steps a side
def test_the_same_process_check_times_both_sides_of_the_crosscheck_on_one_model(in_repo):
    """suites/examples/wallx_same_process.py runs the harness's step and the plain script's loop body
    in turns on one model: a timed line per round and side, and the script's loss of each of its steps."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "suites/examples/wallx_same_process.py", "--preset", "wallx-tiny",
                          "--layers", "1", "--batch-size", "2", "--steps", "3", "--rounds", "1"],
                         capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": "."})
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert [line.split(":")[0] for line in lines if line.startswith("round")] == ["round 0 harness", "round 0 script"]
    assert [line.split()[1] for line in lines if line.startswith("step")] == ["3", "4", "5"]


def test_a_command_point_starts_its_command_before_the_worker_imports_torch(tmp_path, in_repo, monkeypatch):
    """benchbay.launch.entry, a point's process, imports no torch before it starts a command point's
    command; a point it must leave to the worker (refused, profiled, another workload) it leaves."""
    import subprocess
    import sys

    from benchbay.launch.base import PointSpec
    from benchbay.launch.entry import started_command
    from benchbay.suite import Steps

    check = "import sys, benchbay.launch.entry; assert 'torch' not in sys.modules, 'torch imported'"
    assert subprocess.run([sys.executable, "-c", check], capture_output=True, text=True).returncode == 0
    (tmp_path / "train.py").write_text(SCRIPT)
    params = {"argv": ["{python}", str(tmp_path / "train.py")], "knobs": {"switch": ["0"]}}

    def spec(**given):
        fields = {"workload": "command", "params": params, "knobs": {"mbs": 2}, "steps": Steps(warmup=1, measure=2),
                  "device": "cpu", "timeout": 60, **given}
        return PointSpec(**fields)

    for name, value in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")):  # as the entry sets them
        monkeypatch.setenv(name, value)
    command = started_command(spec())
    try:
        assert command is not None and command.running_now()
        assert command.values()["device"] == "cpu"
    finally:
        command.stop()
    assert started_command(spec(profile=True)) is None
    assert started_command(spec(knobs={"mbs": 2, "probe": "off"})) is None  # refused: no regex to time it by
    assert started_command(spec(workload="tests.fixtures.tinywork:Tiny", params={})) is None


def test_the_report_says_what_each_command_process_cost(tmp_path, in_repo, in_process):
    """Each process split into the command's start-up with its first step, its later steps and the
    harness's share."""
    from benchbay.analysis.command_cost import cost_table

    (record,) = run_suite(command_suite(tmp_path, steps="{warmup: 1, measure: 3}"), tmp_path, in_process)
    assert record.status == Status.OK
    frame = records_to_frame([record.to_json()])
    (row,) = cost_table(frame).to_dict("records")
    assert row["steps"] == 4 and row["process"] == pytest.approx(record.duration_s)
    assert row["start_up_and_first_step"] + row["later_steps"] + row["harness"] == pytest.approx(row["process"])
    assert 0 < row["harness"] < row["process"] and row["start_up_and_first_step"] > 0
    assert 0 < record.metrics["command_stop_s"] == row["stop"] < row["harness"]  # SIGINT, then its exit
    # the probe's hook timed itself: far under the script's 10 ms a step (a host clock and a line written)
    assert 0 < record.metrics["probe_host_s"] == row["probe"] < 0.01
    build_report(frame, tmp_path / "report")
    text = (tmp_path / "report" / "report.md").read_text()
    assert "### What each process cost" in text and f"| {row['harness']:.1f} | {row['stop']:.1f} |" in text
    assert "the command's stop (from SIGINT to its process group gone" in text
    assert f"| {row['probe'] * 1e3:.3f} | {row['probe'] / row['step']:.2%} |" in text


def test_a_cost_section_over_two_runs_says_which_run_each_process_was():
    """A report over a run before a change and one after it: each row names its run, and the text gives
    the harness's range per run rather than one range over both."""
    from benchbay.analysis.command_cost import cost_blocks

    def process(run, duration):
        return {"run_id": run, "point_id": "p1", "repeat": 0, "workload": "command", "status": "ok",
                "duration_s": duration, "step_times_s": [5.0, 1.0, 1.0], "probe_host_s": None, "step_time_s": 1.0}

    records = pd.DataFrame([process("before", 14.0), process("after", 10.0)])
    _, text, table = cost_blocks(pd.DataFrame({"point_id": ["p1"], "name": ["bs4"]}), records)
    assert list(table.frame["run"]) == ["before", "after"]
    assert "7.0 to 7.0 s in run before; 3.0 to 3.0 s in run after" in text.text
    (_, text, table) = cost_blocks(pd.DataFrame({"point_id": ["p1"], "name": ["bs4"]}), records.iloc[:1])
    assert "run" not in table.frame and "added, a process: 7.0 to 7.0 s." in text.text
    assert "of which its stop (s)" not in table.frame and "stop (from SIGINT" not in text.text  # not measured then


def test_the_report_sets_the_recorded_step_times_beside_the_scripts_own_clock():
    """A script that prints its own step time (series own_step_s): over the measured steps (the last
    of each series), the mean of each clock, their difference and the largest of one step."""
    from benchbay.analysis.command_clock import clock_blocks, clock_table

    def process(repeat, timed, own, timed_by="optimizer-step hook", workload="command"):
        return {"run_id": "r", "point_id": "p1", "repeat": repeat, "workload": workload, "status": "ok",
                "measured_steps": 2, "step_times_s": timed, "own_step_s": own, "extra.probe": timed_by}

    records = pd.DataFrame([process(0, [9.0, 1.0, 1.0], [8.0, 1.0, 1.0]),
                            process(1, [9.0, 1.2, 0.9], [8.0, 1.0, 1.0], timed_by="output"),
                            process(2, [1.0], [1.0], workload="tests.fixtures.tinywork:Tiny")])
    table = clock_table(records).set_index("repeat")
    assert list(table.index) == [0, 1]  # a workload's point has no script clock
    assert table.loc[0, "steps"] == 2 and table.loc[0, "difference"] == 0 and table.loc[0, "largest_step_ms"] == 0
    assert table.loc[1, "recorded"] == pytest.approx(1.05) and table.loc[1, "difference"] == pytest.approx(0.05)
    assert table.loc[1, "largest_step_ms"] == pytest.approx(200) and table.loc[1, "timed_by"] == "output"
    _, _, shown = clock_blocks(pd.DataFrame({"point_id": ["p1"], "name": ["bs4"]}), records)
    assert list(shown.frame["difference"]) == ["+0.00%", "+5.00%"]
    assert clock_blocks(pd.DataFrame({"point_id": ["p1"], "name": ["bs4"]}), records.drop(columns="own_step_s")) == []


def _ended(tmp_path, code: str, params=None):
    """A command (``python -c code``) run to its end, waited on for 3 steps: the point's failure."""
    import types

    import torch

    from benchbay.launch.worker import _failure
    from benchbay.workloads.command import Command

    command = Command({**Command.params, "argv": ["{python}", "-c", code], **(params or {})}, {},
                      types.SimpleNamespace(type="cpu"))
    with command.running():
        command.start()
        command.proc.wait()
        with pytest.raises(BaseException) as raised:
            command.wait_for(3)
    return _failure(raised.value, 0, torch.device("cpu"))


@pytest.mark.parametrize(("code", "status", "said"), [
    # a log line with the words, then another failure: an error
    ("import sys; print('config: retry_on=out of memory'); sys.exit('KeyError: dataset.root missing')",
     Status.ERROR, "KeyError: dataset.root missing"),
    # an early clean exit whose log has the words: not an OOM either
    ("print('memory check: 0 out of memory events')", Status.ERROR, "ended (exit code 0) after 0 steps"),
    # an OOM, then more than the tail's 2000 characters of shutdown: found, its own line quoted
    ("import sys; print('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB', flush=True); "
     "[print(f'[rank0] cleanup: closing loader worker {{i}} and flushing logs ....') for i in range(60)]; sys.exit(1)",
     Status.OOM, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"),
    # a real-time signal has no name
    ("import os; os.kill(os.getpid(), 40)", Status.ERROR, "signal 40"),
])
def test_a_commands_end_is_an_oom_only_when_it_failed_with_an_oom_error(tmp_path, code, status, said):
    failure = _ended(tmp_path, code)
    assert failure["status"] == status and said in failure["reason"], failure["reason"]


def test_the_probe_joins_the_suites_own_pythonpath_and_counts_one_process_of_rank_0(tmp_path, monkeypatch):
    """A suite's PYTHONPATH is kept after the probe's; two processes that each think they are rank 0
    (torch.multiprocessing.spawn's, no RANK) count once: the first to write a step."""
    import types

    from benchbay.workloads.command import PROBE_DIR, Command

    code = "import os; print('PYTHONPATH=' + os.environ['PYTHONPATH'], flush=True)"
    command = Command({**Command.params, "argv": ["{python}", "-c", code], "env": {"PYTHONPATH": "/my/lib"}}, {},
                      types.SimpleNamespace(type="cpu"))
    with command.running():
        command.start()
        command.proc.wait()
        assert f"PYTHONPATH={PROBE_DIR}:/my/lib" in command.output()
        lines = [{"step": i, "dt": 0.1, "pid": pid} for i, pid in ((0, 11), (0, 22), (1, 22), (1, 11), (2, 11))]
        Path(f"{command.out}.0").write_text("".join(json.dumps(line) + "\n" for line in lines))
        assert [(s["step"], s["pid"]) for s in command.steps_seen()] == [(0, 11), (1, 11), (2, 11)]


def test_literal_braces_placeholders_of_knobs_a_command_has_and_numbers_a_regex_cannot_read(tmp_path):
    """{{ and }} are braces; {precision}, a knob no command point has, is refused; a loss the script
    prints in its own format ("0.5,") is passed over, not the point's error."""
    import types

    from benchbay.workloads.command import Command, check

    errors = []
    check({"argv": ["sh", "-c", "echo ${{HOME}} {{\"lr\": 1}} {mbs}", "--p={precision}"]},
          lambda key, expected: errors.append((key, expected)))
    assert [key for key, _ in errors] == ["workload.params.argv[3]"] and "got {precision}" in errors[0][1]
    command = Command({**Command.params, "argv": ["x", "${{HOME}} {{\"lr\": 1}} {mbs}"],
                       "loss_regex": r"'loss': (\S+)"}, {"mbs": 4}, types.SimpleNamespace(type="cpu"))
    assert command.fill(command.params["argv"][1]) == '${HOME} {"lr": 1} 4'
    from benchbay.workloads.command import _numbers

    assert _numbers(r"'loss': (\S+)", "{'loss': 0.5, 'lr': 1}\n'loss': 0.25\n") == [0.25]


def test_a_stopped_commands_group_goes_with_it_and_its_scratch_is_removed(tmp_path):
    """A helper the script started, which ignores SIGINT and writes into the scratch folder, is
    killed with the group once the script is gone; removing the scratch never fails the point."""
    import types

    from benchbay.workloads.command import Command

    helper = ("import os, signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
              "[open(os.path.join('{scratch}', f'f{{i}}'), 'w').close() or time.sleep(0.01) for i in range(100000)]")
    code = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {helper!r}]); time.sleep(60)"
    command = Command({**Command.params, "argv": ["{python}", "-c", code]}, {}, types.SimpleNamespace(type="cpu"))
    with command.running():
        command.start()
        folder = Path(command.scratch.name)
        deadline = psutil.time.time() + 30
        while not any(folder.glob("f*")) and psutil.time.time() < deadline:
            psutil.time.sleep(0.05)
        group = [p for p in psutil.process_iter() if _pgid(p.pid) == command.proc.pid]
        assert len(group) == 2
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in group)
    assert not folder.exists()


def _pgid(pid: int) -> int | None:
    import os

    try:
        return os.getpgid(pid)
    except ProcessLookupError:
        return None


def test_only_the_last_steps_loss_is_waited_for(monkeypatch):
    """A loss printed every step may trail the probe's last step by a moment (waited for); one printed
    every few steps is read at once, never waited for to the grace's end."""
    from types import SimpleNamespace

    from benchbay.workloads import command

    def per_step(output: str, steps: int) -> list[float]:
        fake = SimpleNamespace(output=lambda: output, proc=SimpleNamespace(poll=lambda: None))
        return command.Command._per_step(fake, r"loss ([0-9.]+)", steps)

    def no_wait(seconds):
        raise AssertionError("waited")

    monkeypatch.setattr(command.time, "sleep", no_wait)
    assert per_step("loss 1.0\nloss 0.9\n", 8) == [1.0, 0.9]  # every 4 steps: read at once
    with pytest.raises(AssertionError, match="waited"):
        per_step("loss 1.0\nloss 0.9\n", 3)  # every step, the third's line still to come
    assert per_step("loss 1.0\nloss 0.9\nloss 0.8\n", 3) == [1.0, 0.9, 0.8]


@pytest.mark.parametrize("printed, steps, waited", [(2, 4, True), (3, 4, True), (2, 30, False)])
def test_the_last_losses_of_a_script_that_prints_them_a_step_late_are_waited_for(printed, steps, waited):
    """A script that reads each loss a step late (as the harness does) has printed two fewer than the
    probe saw: those come within moments and are waited for; one printing every 10 steps is not."""
    import types

    import torch

    from benchbay.workloads.command import Command

    command = Command({"argv": ["train"], "loss_regex": r"loss ([0-9.]+)"}, {}, torch.device("cpu"))
    command.proc = types.SimpleNamespace(poll=lambda: None)  # still running
    reads = []

    def output():  # a line more at each read, as the script goes on
        reads.append(1)
        return "".join(f"loss {i}.5\n" for i in range(printed + len(reads) - 1))

    command.output = output
    losses = command._per_step(command.params["loss_regex"], steps)
    assert losses == ([i + 0.5 for i in range(steps)] if waited else [0.5, 1.5])
    assert (len(reads) > 1) == waited
