"""Run one sweep point in a fresh process (or a torchrun process group) with a timeout, and
classify how it ended: the worker's own result when it wrote one, else crash or timeout."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

STATUS_ORDER = ("oom", "error", "diverged", "crash", "timeout", "skipped", "ok")  # worst first


@dataclass(frozen=True)
class Launch:
    """How many processes a point spans; more than one (or nnodes > 1) goes through torchrun."""

    nproc: int = 1
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str = "127.0.0.1:29400"

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes


def point_env(knobs: dict[str, Any]) -> dict[str, str]:
    """Variables that must be set before the worker initialises CUDA."""
    env = {"NCCL_NVLS_ENABLE": "0",  # NVLink multicast can take a shared host's GPUs down
           "PYTHONUNBUFFERED": "1"}
    if knobs.get("alloc") == "expandable_segments":
        env["PYTORCH_CUDA_ALLOC_CONF"] = env["PYTORCH_ALLOC_CONF"] = "expandable_segments:True"
        if knobs.get("cuda_graph", "off") != "off":
            env["NCCL_GRAPH_REGISTER"] = "0"  # expandable segments + NCCL + graphs can hang (PT #158029)
    if knobs.get("deterministic"):
        env["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    return env


def command(spec_path: Path, result_path: Path, launch: Launch) -> list[str]:
    worker = ["-m", "benchbay.launch.worker", str(spec_path), str(result_path)]
    if launch.world_size == 1:
        return [sys.executable, *worker]
    rdzv = (["--standalone"] if launch.nnodes == 1 else
            [f"--nnodes={launch.nnodes}", f"--node-rank={launch.node_rank}", "--rdzv-backend=c10d",
             f"--rdzv-endpoint={launch.rdzv_endpoint}"])
    return [sys.executable, "-m", "torch.distributed.run", *rdzv, f"--nproc-per-node={launch.nproc}", *worker]


def run_point(spec: dict[str, Any], workdir: Path, timeout: float, launch: Launch = Launch()) -> dict[str, Any]:
    """Run the worker and return its (merged) result; never raises for a failed point.
    KeyboardInterrupt kills the point's process group and propagates."""
    workdir.mkdir(parents=True, exist_ok=True)
    spec_path, result_path, log_path = workdir / "spec.json", workdir / "result.json", workdir / "worker.log"
    spec_path.write_text(json.dumps(spec, default=str))
    for old in workdir.glob("result*.json"):
        old.unlink()
    env = {**os.environ, **point_env(spec["knobs"])}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH")]))
    timed_out = False
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(command(spec_path, result_path, launch), stdout=log, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True, preexec_fn=_die_with_parent)
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill(proc)
        except BaseException:
            _kill(proc)
            raise
    results = [json.loads(p.read_text()) for p in sorted(workdir.glob("result*.json"))]
    tail = log_path.read_text(errors="replace")[-3000:]
    return merge(results, proc.returncode, timed_out, timeout, tail, launch.world_size)


def _die_with_parent() -> None:
    """In the child: a SIGKILLed runner must not leave its point running (Linux only)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def merge(results: list[dict], returncode: int, timed_out: bool, timeout: float, tail: str,
          world_size: int) -> dict[str, Any]:
    """One outcome for the point: the worst rank's status; the slowest rank's figures."""
    if results:
        worst = min(results, key=lambda r: STATUS_ORDER.index(r["status"]))
        if worst["status"] == "ok" and (timed_out or len(results) < world_size):
            return _no_result(returncode, timed_out, timeout, tail, partial=len(results))
        ok = [r for r in results if r["status"] == "ok"]
        if worst["status"] == "ok":
            slowest = max(ok, key=lambda r: r["metrics"].get("step_time_s") or 0.0)
            out = {**slowest, "status": "ok"}
        else:
            out = dict(worst)
        out["ranks"] = [{"rank": r.get("rank", 0), "status": r["status"],
                         "step_time_s": r["metrics"].get("step_time_s"),
                         "peak_mem_allocated_gib": r["metrics"].get("peak_mem_allocated_gib")}
                        for r in sorted(results, key=lambda r: r.get("rank", 0))]
        out["world_size"] = world_size
        return out
    return _no_result(returncode, timed_out, timeout, tail, partial=0)


def _no_result(returncode: int, timed_out: bool, timeout: float, tail: str, partial: int) -> dict[str, Any]:
    base = {"metrics": {"exit_code": returncode}, "series": {}, "extra": {"log_tail": tail}}
    if timed_out:
        return {**base, "status": "timeout", "reason": f"no result within {timeout:g} s (killed)"
                + (f"; {partial} rank(s) had finished" if partial else "")}
    if returncode is not None and returncode < 0:
        sig = signal.Signals(-returncode).name
        base["metrics"]["signal"] = sig
        return {**base, "status": "crash", "reason": f"killed by {sig}: {_last_line(tail)}"}
    return {**base, "status": "crash", "reason": f"exit code {returncode} without a result: {_last_line(tail)}"}


def _last_line(tail: str) -> str:
    lines = [x for x in tail.strip().splitlines() if x.strip()]
    return lines[-1][:300] if lines else "(no output)"
