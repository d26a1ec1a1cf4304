"""Points as submitit jobs (tried here with submitit's LocalExecutor and DebugExecutor): the
outcome of a local point, failed points and failed jobs recorded as statuses, and the Slurm job
a multi-node point asks for."""

import os

import numpy as np
import pytest
import submitit

from benchbay import knobs as knob_table
from benchbay.launch import process
from benchbay.launch.base import Launch, PointSpec, WorkerResult
from benchbay.launch.local import LocalLauncher
from benchbay.launch.process import Finished
from benchbay.launch.slurm import SlurmLauncher, _combine, job_parameters, node_launch, run_point_submitit
from benchbay.suite import Steps
from tests.conftest import TINY
from tests.fixtures.tinywork import Tiny


def spec(device: str = "cpu", timeout: float = 120, **knobs) -> PointSpec:
    return PointSpec(workload=TINY, params={}, steps=Steps(warmup=1, measure=2), device=device, timeout=timeout,
                     knobs={**knob_table.defaults_for(Tiny), "precision": "fp32", **knobs})


@pytest.mark.slow  # a submitit local job: 10 s
def test_local_job_gives_the_outcome_of_a_local_point(tmp_path, in_repo, in_process):
    local = in_process.run(spec(), tmp_path / "here")  # the worker's result, as a point's process merges it
    job = SlurmLauncher(params={"cluster": "local"}).run(spec(), tmp_path / "job")
    assert job.status == local.status == "ok"
    assert set(local.metrics) == set(job.metrics) and set(local.series) == set(job.series)
    np.testing.assert_allclose(job.series["losses"], local.series["losses"], rtol=1e-6)
    assert job.extra["executor"]["cluster"] == "local" and job.extra["executor"]["job_id"]
    assert job.env["machine_key"] and local.env is None  # the job's node fingerprint
    assert (tmp_path / "job" / "submitit").is_dir()


def test_debug_job_records_a_failing_point(tmp_path, in_repo):
    out = run_point_submitit(spec(fault="raise"), tmp_path / "job", Launch(), {"cluster": "debug"})
    assert out.status == "error" and "ValueError: fixture failure" in out.reason
    assert out.extra["executor"]["cluster"] == "debug"


def test_a_job_that_ends_without_a_result_is_a_crash(tmp_path, in_repo, monkeypatch):
    # submitit waits 15 s for a result file a shared filesystem may show late; a local folder shows it at once
    monkeypatch.setattr(submitit.local.local.LocalJob, "_results_timeout_s", 1)
    out = run_point_submitit(spec(), tmp_path / "job", Launch(), {"cluster": "local", "local_setup": ["exit 3"]})
    assert out.status == "crash" and "without a result" in out.reason
    assert out.extra["executor"]["state"]


def test_a_multi_node_point_asks_for_one_task_per_node_and_merges_every_node(tmp_path, monkeypatch):
    params = job_parameters(spec("cuda", timeout=900), Launch(nproc=8, nnodes=2), {"slurm_partition": "gpu"}, name="p")
    assert params == {"nodes": 2, "tasks_per_node": 1, "gpus_per_node": 8, "cpus_per_task": 64,
                      "timeout_min": 20, "name": "p", "slurm_partition": "gpu"}
    srun = tmp_path / "bin" / "srun"  # submitit's Slurm executor starts only where srun exists
    srun.parent.mkdir()
    srun.write_text("#!/bin/sh\n")
    srun.chmod(0o755)
    monkeypatch.setenv("PATH", f"{srun.parent}:{os.environ['PATH']}")
    executor = submitit.AutoExecutor(folder=tmp_path / "jobs", cluster="slurm")
    executor.update_parameters(**params)
    sbatch = executor._executor._make_submission_file_text("python -m job", "uid")
    for line in ("--nodes=2", "--ntasks-per-node=1", "--gpus-per-node=8", "--cpus-per-task=64", "--time=20",
                 "--partition=gpu"):
        assert f"#SBATCH {line}" in sbatch

    second = node_launch(Launch(nproc=8, nnodes=2, rdzv_endpoint="127.0.0.1:29500"), 1, ["gpu-a", "gpu-b"])
    assert second == Launch(nproc=8, nnodes=2, node_rank=1, rdzv_endpoint="gpu-a:29500")
    assert process.command(tmp_path / "s", tmp_path / "r", second)[3:7] == [
        "--nnodes=2", "--node-rank=1", "--rdzv-backend=c10d", "--rdzv-endpoint=gpu-a:29500"]

    def ranks(first: int, step: float) -> list[WorkerResult]:
        return [WorkerResult(rank=r, status="ok", metrics={"step_time_s": step}) for r in range(first, first + 8)]

    merged = process.merge(_combine([Finished(ranks(0, 1.0), 0, False, "a"), Finished(ranks(8, 1.1), 0, False, "b")]),
                           timeout=900, world_size=16)
    assert merged.status == "ok" and merged.metrics["step_time_s"] == 1.1
    assert [r["rank"] for r in merged.ranks] == list(range(16))
    lost = process.merge(_combine([Finished(ranks(0, 1.0), 0, False, "a"), Finished([], -9, False, "b")]),
                         timeout=900, world_size=16)
    assert lost.status == "crash" and lost.metrics["signal"] == "SIGKILL"


def test_each_launcher_says_where_points_run_and_where_their_files_go(tmp_path):
    local, slurm = LocalLauncher(), SlurmLauncher()
    assert local.device("cpu") == "cpu" and local.device("auto") in ("cpu", "cuda")
    assert slurm.device("auto") == "cuda"  # a login node's own devices say nothing of the job's node
    with local.scratch(tmp_path / "run") as scratch:
        assert scratch.is_dir() and tmp_path not in scratch.parents
    assert not scratch.exists()  # the records keep what matters
    with slurm.scratch(tmp_path / "run") as scratch:
        assert scratch == tmp_path / "run" / "scratch"  # beside the run, where the nodes see it
