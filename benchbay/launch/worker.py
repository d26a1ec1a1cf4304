"""The process that measures one sweep point (one rank of it under torchrun).

``python -m benchbay.launch.worker SPEC.json RESULT.json``: builds the workload, applies the
knobs, runs warm-up + measured steps under the collectors and writes a result file atomically.
An exception becomes ``error`` (or ``oom``), a non-finite loss ``diverged``; a crash or a hang
leaves no result file and is classified by the parent (benchbay.launch.process)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import socket
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch

from benchbay.collect import memory
from benchbay.collect.memory_snapshot import MemorySnapshot
from benchbay.collect.system import SystemSampler
from benchbay.collect.timing import StepTimer, summarize
from benchbay.knobs import training
from benchbay.workloads import registry
from benchbay.workloads.base import TrainingWorkload

OOM_MARKERS = ("out of memory", "can't allocate memory", "not enough memory", "cannot allocate memory")


def write_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(data, f, default=str)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _init_distributed(device_type: str) -> tuple[int, int, int]:
    """rank, world size, local rank; a one-process group when torchrun did not start us."""
    if "RANK" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    rank, world, local = (int(os.environ[k]) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
    return rank, world, local


def _steady_window(times: list[float], steps: dict) -> tuple[int, int]:
    warmup, steady = steps["warmup"], steps["steady"]
    if isinstance(steady, (list, tuple)):
        return steady[0], min(steady[1], len(times))
    if steady == "auto":
        from benchbay.analysis.steady import detect_warmup

        return max(detect_warmup(times), 1 if len(times) > 1 else 0), len(times)
    return min(warmup, len(times) - 1), len(times)


class _NoProfiler(contextlib.nullcontext):
    def step(self) -> None:
        pass

    def summary(self) -> dict[str, Any]:
        return {}


PROFILED_STEPS = 3


def _profiler(spec: dict[str, Any], measured_steps: int):
    """torch.profiler over a few extra steps after the measured ones (so its overhead stays out
    of the timings) when the point is profiled (benchbay.collect.profile)."""
    if not spec.get("profile"):
        return _NoProfiler()
    from benchbay.collect.profile import StepProfiler

    # the profiler's own warm-up step (tracing already on) is the first extra step, never a timed one
    return StepProfiler(Path(spec["profile_dir"]), warmup=measured_steps + 1, active=PROFILED_STEPS)


def run(spec: dict[str, Any]) -> dict[str, Any]:
    device_type = spec["device"]
    rank, world, local_rank = _init_distributed(device_type)
    device = torch.device(device_type, local_rank) if device_type == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    knobs = spec["knobs"]
    torch.manual_seed(knobs.get("seed", 0))
    cls = registry.resolve(spec["workload"])
    workload = cls(spec["params"], knobs, device)
    result: dict[str, Any] = {"status": "ok", "reason": None, "rank": rank, "world_size": world,
                              "metrics": {}, "series": {}, "extra": {}}
    reason = (training.skip_reason(knobs, device, world) if isinstance(workload, TrainingWorkload) else None) \
        or workload.skip_reason()
    if reason:
        return {**result, "status": "skipped", "reason": reason}
    needs_group = world > 1 or knobs.get("sharding", "none") != "none"
    if needs_group:
        torch.distributed.init_process_group("nccl" if device.type == "cuda" else "gloo", device_id=device
                                             if device.type == "cuda" else None)
    steps = spec["steps"]
    total = steps["warmup"] + steps["measure"]
    timer = StepTimer(device)
    losses: list[torch.Tensor] = []
    grad_norms: list[torch.Tensor] = []
    step_index = -1
    sampler = SystemSampler(device.index if device.type == "cuda" else None)  # started at the measured steps
    try:
        if isinstance(workload, TrainingWorkload):
            train_step = training.prepare(workload, knobs, device)

            def one_step(i: int):
                with torch.profiler.record_function("data"):
                    batch = workload.batch(i)
                loss, grad_norm, _ = train_step(batch)
                losses.append(loss)
                grad_norms.append(grad_norm)
        else:
            workload.setup()

            def one_step(i: int):
                value = workload.step(i)
                if value is not None:
                    losses.append(torch.as_tensor(value, dtype=torch.float32))

        profiler = _profiler(spec, total)
        extra_steps = PROFILED_STEPS + 1 if spec.get("profile") else 0
        snapshot = MemorySnapshot.from_spec(spec, device)
        with profiler, snapshot:
            for step_index in range(total + extra_steps):
                if step_index == steps["warmup"]:  # figures of the measured steps only
                    memory.reset(device)
                    sampler.start()
                if step_index < total:
                    timer.start()
                one_step(step_index)
                if step_index < total:
                    timer.stop()
                if step_index == total - 1:
                    sampler.stop()
                profiler.step()
        times = timer.times()
        del losses[total:], grad_norms[total:]  # profiled steps after the measured ones
    except Exception as exc:  # classified below; the sweep goes on in the parent
        return {**result, **_failure(exc, step_index, device)}
    finally:
        sampler.stop()
        if needs_group and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()

    loss_values = [float(x) for x in torch.stack(losses).float().cpu()] if losses else []
    grad_values = [float(x) for x in torch.stack(grad_norms).float().cpu()] if grad_norms else []
    first, end = _steady_window(times, steps)
    flops = workload.flops_per_sample()
    metrics = {**summarize(times[first:end]), "first_step_s": times[0], "warmup_steps": first,
               "samples_per_step": workload.samples_per_step(), "flops_per_sample": flops.get("train"),
               "frozen_flops_per_sample": flops.get("frozen"),
               "measured_steps": end - first, **memory.peak(device), **sampler.summary()}
    result.update(metrics=metrics,
                  series={"step_times_s": times, "losses": loss_values, "grad_norms": grad_values,
                          **sampler.series},
                  extra={**workload.extra_metrics(), **profiler.summary(), **snapshot.summary()})
    bad = [i for i, x in enumerate(loss_values) if not math.isfinite(x)]
    if bad:
        result.update(status="diverged", reason=f"non-finite loss at step {bad[0]} ({loss_values[bad[0]]})")
    return result


def _failure(exc: BaseException, step_index: int, device: torch.device) -> dict[str, Any]:
    message = f"{type(exc).__name__}: {exc}"
    tail = "".join(traceback.format_exception(exc))[-4000:]
    if isinstance(exc, torch.OutOfMemoryError) or any(m in str(exc).lower() for m in OOM_MARKERS):
        where = "while building" if step_index < 0 else f"at step {step_index}"
        return {"status": "oom", "reason": f"out of memory {where}: {str(exc).splitlines()[0][:300]}",
                "metrics": {"oom_step": step_index, **memory.current(device)}, "traceback": tail}
    return {"status": "error", "reason": message[:2000], "traceback": tail,
            "metrics": {"error_step": step_index}}


def main(argv: list[str] | None = None) -> int:
    if "TORCHELASTIC_RUN_ID" in os.environ:  # a rank under torchrun: die with torchrun, which dies with the runner
        from benchbay.launch.process import die_with_parent

        die_with_parent()
    spec_path, result_path = (argv or sys.argv[1:])[:2]
    spec = json.loads(Path(spec_path).read_text())
    started = time.time()
    result = run(spec)
    result["duration_s"] = time.time() - started
    path = Path(result_path)
    if result["world_size"] > 1:
        path = path.with_name(f"{path.stem}.rank{result['rank']}{path.suffix}")
    write_atomic(path, result)
    # non-zero lets torchrun tear down the other ranks of a failed point
    return 0 if result["status"] in ("ok", "skipped", "diverged") else 1


if __name__ == "__main__":
    sys.exit(main())
