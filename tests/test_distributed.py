"""Points of several processes through torchrun (CPU, gloo): every sharding strategy trains like
one process, a rank that fails or hangs becomes the point's status (and leaves nothing running),
the ranks' figures are merged; and the scaling report built on such records.

Every rank draws the same batch, so with gradients averaged across ranks (DDP; FSDP2 with
``set_force_sum_reduction_for_comms`` under gloo) the losses and gradient norms of N processes
equal those of one process at the same micro-batch."""

import tempfile
from pathlib import Path

import numpy as np
import psutil
import pytest
import torch

from benchbay import knobs as knob_table
from benchbay import store
from benchbay.analysis import scaling
from benchbay.analysis.frame import records_to_frame
from benchbay.launch.base import PointSpec, WorkerResult
from benchbay.launch.harness import harness_for
from benchbay.launch.process import Finished, merge
from benchbay.runner import SuiteRunner
from benchbay.suite import Steps, load
from tests.conftest import TINY, InProcessLauncher, write_suite
from tests.fixtures.records import record as stored_record
from tests.fixtures.tinywork import Tiny

STRATEGIES = ("ddp", "fsdp2_full", "fsdp2_grad_op")
STEPS = {"warmup": 1, "measure": 3}


def one_process(workload: str, params: dict, knobs: dict, steps: int) -> tuple[list[float], list[float]]:
    """Losses and gradient norms of the same point without sharding, through the worker's own
    loop in this process."""
    spec = PointSpec(workload=workload, params=params, knobs={**knobs, "sharding": "none"},
                     steps=Steps(warmup=0, measure=steps), device="cpu", timeout=300)
    out = InProcessLauncher().run(spec, Path(tempfile.gettempdir()))
    assert out.status == "ok", out.reason
    return out.series["losses"], out.series["grad_norms"]


def run_suite(tmp_path, monkeypatch, name: str, body: str) -> list[dict]:
    """Run a suite file; its scratch directories go under tmp_path (see _running_under). No cold-start
    warm-up process (runner.py's docstring): no figure here is compared with another."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    summary = SuiteRunner(load(write_suite(tmp_path / f"{name}.yaml", f"name: {name}\n{body}")),
                          tmp_path / "results", warm_up=False).run_all()
    return store.read_records(summary.run)


def _running_under(path) -> list[str]:
    """Processes still running with ``path`` on their command line (leaked ranks)."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmdline = " ".join(proc.info["cmdline"] or ())
        if str(path) in cmdline and proc.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(cmdline)
    return found


def assert_trains_like_one_process(record: dict, reference: tuple[list[float], list[float]], rtol: float) -> None:
    losses, norms = reference
    assert record["status"] == "ok", record["reason"]
    np.testing.assert_allclose(record["series"]["losses"], losses, rtol=rtol)
    # the norm tells averaged gradients from summed ones (the losses cannot: clipping and Adam
    # are scale-free)
    np.testing.assert_allclose(record["series"]["grad_norms"], norms, rtol=rtol)


@pytest.mark.slow
def test_two_ranks_train_like_one_process_under_each_strategy(tmp_path, in_repo, monkeypatch):
    records = run_suite(tmp_path, monkeypatch, "tiny-2proc", f"""
workload: {{name: "{TINY}"}}
knobs: {{precision: fp32}}
sweep: {{points: {[{"label": strategy, "sharding": strategy} for strategy in STRATEGIES]}}}
steps: {{warmup: {STEPS["warmup"]}, measure: {STEPS["measure"]}}}
timeout: 180
devices: {{type: cpu, nproc: 2}}
""")
    assert [r["knobs"]["sharding"] for r in records] == list(STRATEGIES)
    reference = one_process(TINY, {}, {"precision": "fp32"}, sum(STEPS.values()))
    for record in records:
        assert_trains_like_one_process(record, reference, rtol=1e-5)
        assert record["world_size"] == 2 and [r["rank"] for r in record["ranks"]] == [0, 1]
        assert all(r["status"] == "ok" and r["step_time_s"] > 0 for r in record["ranks"])
        m = record["metrics"]
        assert m["step_time_s"] == max(r["step_time_s"] for r in record["ranks"])  # the slowest rank
        assert m["step_time_rank_spread"] >= 0
        assert m["samples_per_s"] == pytest.approx(2 * m["samples_per_s_per_gpu"])
    assert not _running_under(tmp_path)
    table = scaling.scaling_table(records_to_frame(records))  # the stored records feed the scaling report
    assert list(table["configuration"]) == list(STRATEGIES) and set(table["world_size"]) == {2}


@pytest.mark.slow
def test_the_flattened_adamw_trains_alike_in_place_and_on_shards(tmp_path, in_repo, monkeypatch):
    """adamw_sr steps DDP's whole parameters in place (views of its flat weights) and FSDP2's DTensor
    shards through copies: both train like one process (bf16: the gradient norms' own rounding aside)."""
    knobs = {"precision": "bf16", "optimizer": "adamw_sr"}
    records = run_suite(tmp_path, monkeypatch, "tiny-2proc-sr", f"""
workload: {{name: "{TINY}"}}
knobs: {knobs}
sweep: {{points: [{{label: ddp, sharding: ddp}}, {{label: fsdp2_full, sharding: fsdp2_full}}]}}
steps: {{warmup: {STEPS["warmup"]}, measure: {STEPS["measure"]}}}
timeout: 180
devices: {{type: cpu, nproc: 2}}
""")
    reference = one_process(TINY, {}, knobs, sum(STEPS.values()))
    for record in records:
        assert_trains_like_one_process(record, reference, rtol=1e-2)
        assert record["extra"]["fidelity"] == "faithful"


@pytest.mark.slow
def test_a_failing_rank_is_the_points_status_and_leaves_no_process(tmp_path, in_repo, monkeypatch):
    records = run_suite(tmp_path, monkeypatch, "tiny-2proc-faults", f"""
workload: {{name: "{TINY}"}}
knobs: {{precision: fp32}}
sweep:
  points:
    - {{label: oom-rank1, sharding: fsdp2_full, fault: oom, fault_rank: 1}}
    - {{label: segv-rank1, sharding: ddp, fault: segv, fault_rank: 1}}
steps: {{warmup: {STEPS["warmup"]}, measure: {STEPS["measure"]}}}
timeout: 180
devices: {{type: cpu, nproc: 2}}
""")
    oom, segv = records
    assert oom["status"] == "oom" and oom["reason"].startswith("rank 1: out of memory at step 0")
    assert {r["rank"]: r["status"] for r in oom["ranks"]}.get(1) == "oom"
    # rank 0 may record the closed connection as an error: the crash of rank 1 is what happened
    assert segv["status"] == "crash" and segv["reason"].startswith("rank 1 killed by SIGSEGV")
    assert segv["metrics"]["signal"] == "SIGSEGV"
    assert not _running_under(tmp_path)


@pytest.mark.slow  # torchrun's start: 7 s
def test_one_process_through_torchrun_trains_like_a_direct_launch(tmp_path, in_repo, monkeypatch):
    records = run_suite(tmp_path, monkeypatch, "tiny-torchrun1", f"""
workload: {{name: "{TINY}"}}
knobs: {{precision: fp32}}
sweep:
  points: [{{label: ddp, sharding: ddp}}]
steps: {{warmup: {STEPS["warmup"]}, measure: {STEPS["measure"]}}}
timeout: 180
devices: {{type: cpu, nproc: 1, torchrun: true}}
""")
    (record,) = records
    assert record["launcher"] == "torchrun" and record["world_size"] == 1
    assert_trains_like_one_process(record, one_process(TINY, {}, {"precision": "fp32"}, sum(STEPS.values())),
                                   rtol=1e-5)


@pytest.mark.slow
def test_a_hanging_rank_times_out_and_leaves_no_process(tmp_path, in_repo, monkeypatch):
    records = run_suite(tmp_path, monkeypatch, "tiny-hang", f"""
workload: {{name: "{TINY}"}}
knobs: {{precision: fp32, sharding: ddp}}
sweep:
  points:
    - {{label: hang-rank1, fault: hang, fault_rank: 1}}
steps: {{warmup: 1, measure: 1}}
timeout: 15
devices: {{type: cpu, nproc: 2}}
""")
    assert [(r["label"], r["status"]) for r in records] == [("hang-rank1", "timeout")]
    assert "15 s" in records[0]["reason"]
    # torchrun starts each rank in a session of its own: the runner must kill them too
    assert not _running_under(tmp_path)


@pytest.mark.slow
def test_hybrid_sharding_on_four_ranks_trains_like_one_process(tmp_path, in_repo, monkeypatch):
    records = run_suite(tmp_path, monkeypatch, "tiny-4proc", f"""
workload: {{name: "{TINY}"}}
knobs: {{precision: fp32, sharding: fsdp2_hybrid, replicate: 2}}
steps: {{warmup: {STEPS["warmup"]}, measure: {STEPS["measure"]}}}
timeout: 300
devices: {{type: cpu, nproc: 4}}
""")
    reference = one_process(TINY, {}, {"precision": "fp32"}, sum(STEPS.values()))
    assert_trains_like_one_process(records[0], reference, rtol=1e-5)
    assert records[0]["world_size"] == 4 and len(records[0]["ranks"]) == 4


# ---- merging the ranks' results (no processes) -----------------------------------------------

def _rank(rank: int, status: str = "ok", step: float | None = 1.0, **extra) -> WorkerResult:
    return WorkerResult(rank=rank, status=status, reason=None if status == "ok" else f"{status} here",
                        metrics={"step_time_s": step, "peak_mem_allocated_gib": 2.0 + rank}, extra=extra)


def test_merge_keeps_the_slowest_rank_the_spread_and_every_rank():
    out = merge(Finished([_rank(0, step=1.0), _rank(1, step=1.2), _rank(2, step=1.1), _rank(3, step=0.9)],
                         0, False, ""), timeout=60, world_size=4)
    assert out.status == "ok" and out.metrics["step_time_s"] == 1.2  # rank 1
    assert out.metrics["step_time_rank_spread"] == pytest.approx((1.2 - 0.9) / 1.05)
    assert [(r["rank"], r["step_time_s"], r["peak_mem_allocated_gib"]) for r in out.ranks] == \
        [(0, 1.0, 2.0), (1, 1.2, 3.0), (2, 1.1, 4.0), (3, 0.9, 5.0)]


TORCHRUN_SUMMARY = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
=======================================================
benchbay.launch.worker FAILED
-------------------------------------------------------
Failures:
[1]:
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 20940)  (SIGTERM)
-------------------------------------------------------
Root Cause (first observed failure):
[0]:
  rank      : 1 (local_rank: 1)
  exitcode  : -11 (pid: 20941)  (SIGSEGV)
  traceback : Signal 11 (SIGSEGV) received by PID 20941
======================================================="""

ERROR_SEEN_FIRST = """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
=======================================================
benchbay.launch.worker FAILED
-------------------------------------------------------
Failures:
[1]:
  rank      : 1 (local_rank: 1)
  exitcode  : -11 (pid: 20941)  (SIGSEGV)
-------------------------------------------------------
Root Cause (first observed failure):
[0]:
  rank      : 0 (local_rank: 0)
  exitcode  : 1 (pid: 20940)
======================================================="""


def test_merge_blames_the_first_rank_to_fail_when_it_left_no_result():
    out = merge(Finished([_rank(0, "error")], 1, False, TORCHRUN_SUMMARY), timeout=60, world_size=2)
    assert out.status == "crash" and out.reason == "rank 1 killed by SIGSEGV (the first rank to fail)"
    assert out.metrics["signal"] == "SIGSEGV" and out.ranks[0]["reason"] == "error here"
    oom = merge(Finished([_rank(0, "error"), _rank(1, "oom")], 1, False, TORCHRUN_SUMMARY), timeout=60,
                world_size=2)
    assert oom.status == "oom"  # rank 1 wrote its own result: it says what happened
    # torchrun may see rank 0's error about the closed connection before rank 1's crash
    crash = merge(Finished([_rank(0, "error")], 1, False, ERROR_SEEN_FIRST), timeout=60, world_size=2)
    assert crash.status == "crash" and crash.reason.startswith("rank 1 killed by SIGSEGV (it left no result")
    stopped = ERROR_SEEN_FIRST.replace("-11 (pid: 20941)  (SIGSEGV)", "-15 (pid: 20941)  (SIGTERM)")
    assert merge(Finished([_rank(0, "error")], 1, False, stopped), timeout=60, world_size=2).status == "error"


def test_a_worker_that_dies_after_its_deadline_stack_dump_timed_out():
    """A signal in the seconds between the worker's stack dump (faulthandler's "Timeout (...)!") and the
    kill is the timeout's, with where it stood; the same signal without the dump stays a crash."""
    dump = ("benchbay phase: first step (at 16.6 s)\nTimeout (0:02:39.664162)!\n"
            "Thread 0x00007f0814909140 (most recent call first):\n  File \"compile_fx.py\", line 9 in compile\n")
    out = merge(Finished([], -11, False, dump), timeout=165, world_size=1)
    assert out.status == "timeout" and out.metrics["signal"] == "SIGSEGV"
    assert out.reason.startswith("no result within 165 s (killed by SIGSEGV as its stacks were dumped")
    assert "in phase 'first step (at 16.6 s)'" in out.reason and "compile_fx.py" in out.reason
    crash = merge(Finished([], -11, False, "benchbay phase: first step (at 16.6 s)\n"), timeout=165, world_size=1)
    assert crash.status == "crash" and crash.reason.startswith("killed by SIGSEGV in phase 'first step")
    # killed at the deadline itself: the ranks that had finished and where the rest stood
    killed = merge(Finished([_rank(0)], 1, True, "log", "in phase 'x'"), timeout=60, world_size=2)
    assert killed.status == "timeout"
    assert killed.reason == "no result within 60 s (killed); 1 rank(s) had finished; in phase 'x'"


def test_hybrid_sharding_on_two_ranks_is_skipped_with_its_reason_said_once():
    knobs = {**knob_table.defaults_for(Tiny), "precision": "fp32", "sharding": "fsdp2_hybrid", "replicate": 2}
    reason = harness_for(Tiny({}, knobs, torch.device("cpu")), 2).skip_reason()
    assert "replicate >= 2 groups of >= 2 shards" in reason
    # every rank skips alike: the point's reason is theirs, not one rank's
    skipped = [WorkerResult(rank=rank, status="skipped", reason=reason) for rank in (0, 1)]
    out = merge(Finished(skipped, 0, False, ""), timeout=60, world_size=2)
    assert out.status == "skipped" and out.reason == reason


def test_merge_reports_the_worst_rank_and_missing_ranks():
    failed = merge(Finished([_rank(0), _rank(1, "oom", None)], 1, False, ""), timeout=60, world_size=2)
    assert failed.status == "oom" and failed.reason == "rank 1: oom here"
    assert failed.ranks[1] == {"rank": 1, "status": "oom", "reason": "oom here",
                                  **dict.fromkeys(("step_time_s", "step_time_p90_s", "peak_mem_reserved_gib",
                                                   "host_rss_gib")), "peak_mem_allocated_gib": 3.0}
    partial = merge(Finished([_rank(0)], -9, False, "killed"), timeout=60, world_size=2)
    assert partial.status == "crash" and partial.metrics["signal"] == "SIGKILL"


# ---- the scaling report ----------------------------------------------------------------------

def _record(label: str, knobs: dict, world: int, samples_per_s: float, nnodes: int = 1, status: str = "ok",
            extra: dict | None = None) -> dict:
    metrics = {"samples_per_s": samples_per_s, "samples_per_s_per_gpu": samples_per_s / world,
               "step_time_s": 10 * world / samples_per_s, "step_time_rank_spread": 0.02,
               "peak_mem_reserved_gib": 90.0} if status == "ok" else {}
    return stored_record(point_id=label, label=label, status=status, world_size=world, nnodes=nnodes, knobs=knobs,
                         params={"preset": "p"}, env={"gpu": "NVIDIA H200"}, extra=extra or {}, metrics=metrics)


def test_scaling_table_reproduces_the_published_two_node_efficiency():
    ddp = {"sharding": "ddp", "mbs": 26}
    one_node, two_nodes, failed = (_record("optimized", ddp, 8, 242.1), _record("optimized", ddp, 16, 438.2, nnodes=2),
                                   _record("optimized", ddp, 16, 0.0, nnodes=2, status="oom"))
    two_nodes["suite"] = failed["suite"] = "wallx-scaling-2x8"  # the same configuration under another suite name
    frame = records_to_frame([one_node, two_nodes, failed])  # failed repeats do not count
    table = scaling.scaling_table(frame)
    assert list(table["world_size"]) == [8, 16] and list(table["nnodes"]) == [1, 2]
    two_nodes = table.iloc[1]
    assert two_nodes["speedup"] == pytest.approx(1.81, abs=0.005)
    assert two_nodes["efficiency"] == pytest.approx(0.905, abs=0.001)
    assert two_nodes["ideal_speedup"] == 2 and table.iloc[0]["efficiency"] == 1.0


def test_scaling_table_per_configuration_with_communication(tmp_path):
    comm_phase = {"phases": {"forward": 0.1, "communication": 0.05}}
    nccl_ops = {"profile_top_ops": [{"name": "ncclDevKernel_AllGather_RING_LL", "time_s": 0.02, "share": 0.1},
                                    {"name": "sm90_gemm", "time_s": 0.1, "share": 0.5},
                                    {"name": "ncclDevKernel_ReduceScatter_Sum_f32", "time_s": 0.01, "share": 0.05}]}
    frame = records_to_frame([
        _record("ddp", {"sharding": "ddp"}, 1, 100.0),
        _record("ddp", {"sharding": "ddp"}, 2, 180.0, extra=comm_phase),
        _record("ddp", {"sharding": "ddp"}, 4, 300.0),
        _record("fsdp", {"sharding": "fsdp2_full"}, 2, 150.0, extra=nccl_ops),
        _record("fsdp", {"sharding": "fsdp2_full"}, 8, 500.0),
    ])
    table = scaling.scaling_table(frame).set_index(["configuration", "world_size"])
    assert table.loc[("ddp", 4), "efficiency"] == pytest.approx(0.75)
    assert table.loc[("ddp", 2), "efficiency"] == pytest.approx(0.9)
    assert table.loc[("fsdp", 8), "efficiency"] == pytest.approx(500 / (4 * 150))  # against its smallest run
    assert table.loc[("ddp", 2), "comm_s"] == 0.05 and table.loc[("ddp", 2), "comm_source"] == "phase"
    assert table.loc[("fsdp", 2), "comm_s"] == pytest.approx(0.03)
    assert table.loc[("fsdp", 2), "comm_source"] == "collectives"
    assert np.isnan(table.loc[("ddp", 4), "comm_s"])
    png = scaling.plot_scaling(scaling.scaling_table(frame), tmp_path / "scaling.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert scaling.plot_scaling(scaling.scaling_table(frame.iloc[:1]), tmp_path / "none.png") is None


# ---- the real workloads' tiny presets ----------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("workload, params, knobs", [
    ("dreamzero", {"preset": "dreamzero-tiny"}, {"precision": "fp32", "attention": "sdpa"}),
    ("wallx", {"preset": "wallx-tiny"}, {"precision": "fp32"}),
], ids=["dreamzero-tiny", "wallx-tiny"])
def test_tiny_presets_train_alike_with_their_blocks_sharded_over_two_ranks(tmp_path, in_repo, monkeypatch,
                                                                          workload, params, knobs):
    """FSDP2 splits each of the workload's own blocks across the ranks. What the other strategies
    add is not the workload's: DDP (one rank finds an unused parameter as two do) runs over one
    rank in test_dreamzero and test_wallx, grad_op differs from full in resharding only (Tiny above)."""
    records = run_suite(tmp_path, monkeypatch, f"{workload}-2proc", f"""
workload: {{name: {workload}, params: {params}}}
knobs: {knobs | {"sharding": "fsdp2_full"}}
steps: {{warmup: {STEPS["warmup"]}, measure: {STEPS["measure"]}}}
timeout: 300
devices: {{type: cpu, nproc: 2}}
""")
    (record,) = records
    assert_trains_like_one_process(record, one_process(workload, params, knobs, sum(STEPS.values())), rtol=1e-4)


def test_scaling_configurations_of_the_same_label_are_told_apart():
    frame = records_to_frame([_record("ddp", {"sharding": "ddp", "mbs": mbs}, world, rate)
                              for mbs in (8, 16) for world, rate in ((1, 10.0 * mbs), (2, 19.0 * mbs))])
    table = scaling.scaling_table(frame)
    assert list(table["configuration"]) == ["ddp (mbs=8)"] * 2 + ["ddp (mbs=16)"] * 2
    assert list(table["efficiency"]) == pytest.approx([1.0, 0.95, 1.0, 0.95])


@pytest.mark.slow
def test_two_nodes_of_one_process_train_like_one_node_of_two(tmp_path, in_repo, cli_env, monkeypatch):
    """The multi-node path on one host: two `benchbay run` commands, one per node (nnodes 2, a local
    rendezvous), give what one node of two processes gives: the same losses and gradient norms,
    one record (node 0's) with both ranks."""
    import socket
    import subprocess

    from tests.conftest import benchbay_cmd

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    body = f"""
workload: {{name: "{TINY}"}}
knobs: {{precision: fp32, sharding: ddp}}
sweep: {{points: [{{label: ddp}}]}}
steps: {{warmup: {STEPS["warmup"]}, measure: {STEPS["measure"]}}}
timeout: 180
devices: {{type: cpu, nproc: 1, nnodes: 2, rdzv_endpoint: "127.0.0.1:{port}"}}
"""
    suite = write_suite(tmp_path / "tiny-2nodes.yaml", f"name: tiny-2nodes\n{body}")
    nodes = [subprocess.Popen(benchbay_cmd("run", str(suite), "--set", f"devices.node_rank={rank}", "--results",
                                           str(tmp_path / f"node{rank}"), "--no-report"),
                              env=cli_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for rank in (0, 1)]
    outputs = [node.communicate(timeout=300)[0] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], outputs
    (record,) = store.read_records(next((tmp_path / "node0" / "tiny-2nodes").iterdir()))
    assert not list((tmp_path / "node1").rglob("records.jsonl")) or not store.read_records(
        next((tmp_path / "node1" / "tiny-2nodes").iterdir()))  # node 1 measures but does not record
    assert record["nnodes"] == 2 and record["world_size"] == 2 and record["launcher"] == "torchrun"
    # one node of two processes trains like one process too (the first test above)
    reference = one_process(TINY, {}, {"precision": "fp32"}, sum(STEPS.values()))
    assert_trains_like_one_process(record, reference, rtol=1e-5)
