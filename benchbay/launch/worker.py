"""The process that measures one sweep point (one rank of it under torchrun).

Run by ``python -m benchbay.launch.entry SPEC.json RESULT.json``: builds the workload, applies the
knobs, runs warm-up + measured steps under the collectors and writes a result file atomically.
An exception becomes ``error`` (or ``oom``), a non-finite loss ``diverged``; a crash or a hang
leaves no result file and is classified by the parent (benchbay.launch.process)."""

from __future__ import annotations

import contextlib
import faulthandler
import json
import math
import os
import re
import statistics
import sys
import time
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

# imported before the steps: an import inside the warm-up stalls the step it lands in (pandas alone
# ~0.5 s), and the queue a loader behind the step fills meanwhile hides it from the drain check
from benchbay.analysis.steady import detect_warmup, first_dry_step
from benchbay.collect import Collector, Figures, Window, memory
from benchbay.collect.compile import CompileCounters
from benchbay.collect.energy import EnergyMeter
from benchbay.collect.memory import PeakMemory
from benchbay.collect.memory_snapshot import MemorySnapshot
from benchbay.collect.system import SystemSampler
from benchbay.collect.timing import StepTimer, summarize
from benchbay.knobs.rules import Refused
from benchbay.launch.base import PointSpec, WorkerResult, rank_env
from benchbay.launch.harness import StepHarness, harness_for
from benchbay.launch.process import PHASE_MARK
from benchbay.parent_death import die_with_parent
from benchbay.record import (
    BUILD_S,
    DATA_WAIT_S,
    DATA_WAIT_SHARE,
    DATA_WAITS_S,
    FIRST_STEP_S,
    FLOPS_PER_SAMPLE,
    LOADER_S,
    LOSSES,
    MEASURED_STEPS,
    SAMPLES_PER_S_PER_GPU,
    SAMPLES_PER_STEP,
    STEP_TIMES_S,
    WARMUP_STEPS,
    Status,
)
from benchbay.suite.model import MIN_BUDGETED_STEPS, Steps
from benchbay.workloads import registry
from benchbay.workloads.command import Command, CommandFailed

#: cuBLAS reports a handle it had no memory for as an allocation failure, not an OutOfMemoryError (H200,
#: Wall-X mbs 64: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`)
OOM_MARKERS = ("out of memory", "can't allocate memory", "not enough memory", "cannot allocate memory",
               "cublas_status_alloc_failed")


def write_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        json.dump(data, f, default=str)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _steady_window(times: list[float], steady: str | tuple[int, int], warmup: int) -> tuple[int, int]:
    if isinstance(steady, tuple):
        return steady[0], min(steady[1], len(times))
    if steady == "auto":
        return max(detect_warmup(times), 1 if len(times) > 1 else 0), len(times)
    return min(warmup, len(times) - 1), len(times)


PROFILED_STEPS = 3
#: a loader is behind the step when a batch costs its workers this much more than a step takes
LOADER_BEHIND = 1.05
#: the warm-up drains a loader that is behind for at most this many times its backlog in more steps
DRAIN_LIMIT = 4
#: the steps (and their batches) that tell whether a loader is behind
RECENT = 3
#: the measured steps a tune's early stop judges a trial by: a median of a few, past the warm-up
EARLY_STEPS = 3
#: a point dumps its threads' stacks into its log this long before its timeout (faulthandler's own
#: watchdog thread: it works while the main thread is blocked in C code)
STACK_DUMP_LEAD_S = 5.0


def _profiler(spec: PointSpec, harness: StepHarness) -> Collector:
    """torch.profiler over a few extra steps after the measured ones (so its overhead stays out
    of the timings) when the point is profiled (benchbay.collect.profile; a command's through its
    probe); a collector that measures nothing when it is not (its steps stop before the profiled
    ones: ``_measure``)."""
    if not spec.profile:
        return Collector()
    return harness.profiler(Path(spec.profile_dir), spec.steps.warmup + spec.steps.measure, PROFILED_STEPS)


_STARTED = time.perf_counter()


def phase(name: str) -> None:
    """Say in the point's log which phase the worker is in: a point that times out is named by
    its last phase (benchbay.launch.process reads the log)."""
    print(f"{PHASE_MARK}{name} (at {time.perf_counter() - _STARTED:.1f} s)", flush=True)


@dataclass
class Measured:
    """What the step loop leaves behind."""

    times: list[float]
    #: the warm-up steps run: the spec's, and more for batches made ahead or a loader drained (_measure)
    warmup: int = 0
    build_s: float | None = None  # workload.prepare: the model built and the knobs applied
    losses: list[torch.Tensor] = field(default_factory=list)
    grad_norms: list[torch.Tensor] = field(default_factory=list)
    data_s: list[float] = field(default_factory=list)  # per timed step, when the workload reports it
    loader_s: list[float] = field(default_factory=list)  # per timed step, when the workload reports it
    started: list[float] = field(default_factory=list)  # host clock at each timed step's start
    drain_steps: int = 0  # warm-up steps added while a loader behind the step was still being drained
    step_index: int = -1  # the step running when something failed; -1: before the first
    stopped_early: dict[str, Any] | None = None  # a tune's early stop ended the steps (_slower_than)


def run(spec: PointSpec, command: Command | None = None) -> WorkerResult:
    """The point's steps and figures; ``command``: its command, started before torch was imported
    (benchbay.launch.entry)."""
    rank, world, local_rank = rank_env()
    device = torch.device(spec.device, local_rank) if spec.device == "cuda" else torch.device("cpu")
    own_clock = registry.declaration(spec.workload).own_clock
    if device.type == "cuda" and not own_clock:  # a command's processes hold the device, not this one
        torch.cuda.set_device(device)
    knobs = spec.knobs
    torch.manual_seed(knobs.get("seed", 0))
    result = WorkerResult(status=Status.OK, rank=rank, world_size=world)
    try:  # building and asking it may read the data (decode on cuda opens params.root): a failure is an error
        if command is not None:
            command.device = device
        workload = command or registry.resolve(spec.workload)(spec.params, knobs, device)
        harness = harness_for(workload, world)
        reason = harness.skip_reason()
    except Exception as exc:
        return replace(result, **_failure(exc, -1, device))
    if reason:
        return replace(result, status=Status.SKIPPED, reason=reason)
    needs_group = world > 1 or knobs.get("sharding", "none") != "none"
    if needs_group:
        torch.distributed.init_process_group("nccl" if device.type == "cuda" else "gloo", device_id=device
                                             if device.type == "cuda" else None)
    gpu = device.index if device.type == "cuda" else None
    # the collectors of the measured steps (a command's processes hold the device's memory, not this one)
    window = [SystemSampler(gpu), EnergyMeter(gpu), *([] if own_clock else [PeakMemory(device)])]
    measured = Measured(times=[])
    try:
        snapshot_dir = Path(spec.memory_snapshot_dir) if spec.memory_snapshot else None
        profiler, snapshot = _profiler(spec, harness), MemorySnapshot(snapshot_dir, device)
        with harness.settings(), contextlib.ExitStack() as measuring:  # left on a failure too
            _measure(harness, spec, device, window, measuring, profiler, snapshot, measured)
            phase("metrics")
            result = replace(result, **_figures(harness, spec, measured, [*window, profiler, snapshot,
                                                                          CompileCounters()]))
        result = replace(result, metrics={**result.metrics, **harness.settled_metrics()})
    except Exception as exc:  # classified below; the sweep goes on in the parent
        return replace(result, **_failure(exc, measured.step_index, device, after_steps=bool(measured.times)))
    finally:
        if needs_group and torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    bad = [i for i, x in enumerate(result.series[LOSSES]) if not math.isfinite(x)]
    if bad:
        loss = result.series[LOSSES][bad[0]]
        result = replace(result, status=Status.DIVERGED, reason=f"non-finite loss at step {bad[0]} ({loss})")
    return result


def _measure(harness: StepHarness, spec: PointSpec, device: torch.device, window: list[Collector],
             measuring: contextlib.ExitStack, profiler: Any, snapshot: MemorySnapshot, measured: Measured) -> None:
    """Warm-up, measured and (when profiling) profiled steps; fills ``measured``. The ``window``
    collectors enter ``measuring`` as the measured steps begin and leave it as they end."""
    phase("build")
    started = time.perf_counter()
    workload = harness.workload
    step = harness.prepare()
    measured.build_s = time.perf_counter() - started
    ahead = workload.batches_ahead()  # made while the first steps ran: warm up over them (Workload.batches_ahead)
    measured.warmup = spec.steps.warmup + ahead
    total = measured.warmup + spec.steps.measure
    own_clock = workload.own_clock  # a command's probe times its steps, on the device in its own process
    timer = StepTimer(torch.device("cpu") if own_clock else device)
    extra_steps = PROFILED_STEPS + 1 if spec.profile else 0
    measure_started = 0.0
    i = 0
    with contextlib.ExitStack() as profiling, snapshot:
        while i < total + extra_steps:
            measured.step_index = i
            if i == 0:
                phase("first step (compiles and captures happen here)")
            if i == measured.warmup and measured.drain_steps < DRAIN_LIMIT * ahead and _draining(measured):
                measured.warmup, total, measured.drain_steps = i + 1, total + 1, measured.drain_steps + 1
            if 0 < i == measured.warmup - 1:  # a training step's compute fidelity: its passes after the
                paused = time.perf_counter()  # first step, before the peak is reset, their aftermath unmeasured
                harness.before_last_warmup()
                # not a step's time: the steps' host clock stops for it (_draining reads their periods)
                paused = time.perf_counter() - paused
                measured.started = [t + paused for t in measured.started]
            if i == measured.warmup:  # figures of the measured steps only
                phase(f"measuring steps {i}..{total - 1}")
                harness.start_measuring()
                for collector in window:
                    measuring.enter_context(collector)
                measure_started = time.perf_counter()
            if i == total:
                phase("profiled steps")
                # entered only now: the steps timed are known once they ran (batches made ahead, a
                # loader drained, a measure budget spent); its own warm-up step is the first extra one
                profiling.enter_context(profiler)
            if i < total:
                measured.started.append(time.perf_counter())
                timer.start()
            out = step(i)
            if i < total:
                timer.stop()
                if out.loss is not None:
                    measured.losses.append(out.loss)
                if out.grad_norm is not None:
                    measured.grad_norms.append(out.grad_norm)
                if out.data_s is not None:
                    measured.data_s.append(out.data_s)
                if out.loader_s is not None:
                    measured.loader_s.append(out.loader_s)
                if _budget_spent(spec.steps, measured.warmup, i, total, measure_started):
                    phase(f"measure budget of {spec.steps.max_measure_s} s spent after step {i}")
                    total = i + 1
                elif (rate := _slower_than(spec, measured.warmup, i, total, timer, workload.samples_per_step())):
                    phase(f"stopped early after step {i}: {rate:.3g} samples/s below {spec.stop_below:.3g}")
                    measured.stopped_early = {"after_steps": EARLY_STEPS, SAMPLES_PER_S_PER_GPU: rate,
                                              "below": spec.stop_below}
                    total = i + 1
            if i == total - 1:
                measuring.close()
            if i >= total:
                profiler.step()
            i += 1
    measured.times = timer.times()


def _draining(measured: Measured) -> bool:
    """Whether the warm-up so far left a loader that is behind the step still hidden by its queue:
    no step since the first ran it dry (analysis.steady.first_dry_step), while the last batches
    cost the workers more than the last steps took. Measured then, its steps would find batches
    made ahead and pass for a loader that keeps up (H200, DreamZero-5B mbs 24, 2 decord workers:
    the first 4 measured steps found a batch ready, then every other one waited 1.4-2 s). The last
    batches, not all: those made while the first step compiled took longer."""
    counts = {len(measured.loader_s), len(measured.data_s), len(measured.started)}
    if len(counts) > 1 or len(measured.started) <= RECENT:
        return False
    ends = [*measured.started[1:], time.perf_counter()]
    durations = [end - start for start, end in zip(measured.started, ends, strict=True)]
    return (first_dry_step(measured.data_s, durations) is None
            and statistics.fmean(measured.loader_s[-RECENT:]) > LOADER_BEHIND * statistics.fmean(durations[-RECENT:]))


def _budget_spent(steps: Steps, warmup: int, i: int, total: int, measure_started: float) -> bool:
    """Whether step ``i``, a measured one (after ``warmup``) before the last of ``total``, ends the
    measurement under ``steps.max_measure_s``."""
    budget = steps.max_measure_s
    return (budget is not None and i + 1 - warmup >= MIN_BUDGETED_STEPS and i + 1 < total
            and time.perf_counter() - measure_started >= budget)


def _slower_than(spec: PointSpec, warmup: int, i: int, total: int, timer: StepTimer, samples: int) -> float | None:
    """A tune's early stop: after the first ``EARLY_STEPS`` measured steps (step ``i`` the last of
    them), their median step's samples/s when below ``spec.stop_below``, else None. Reading the
    device's clocks synchronises once."""
    if spec.stop_below is None or i + 1 - warmup != EARLY_STEPS or i + 1 >= total:
        return None
    rate = samples / statistics.median(timer.times()[warmup:])
    return rate if rate < spec.stop_below else None


def _figures(harness: StepHarness, spec: PointSpec, measured: Measured, collectors: list[Collector]) -> dict[str, Any]:
    """The result's metrics, series and extra figures from the measured steps and the collectors."""
    workload = harness.workload
    # a command's: the probe's steps stand for the host's waits; a training step's fidelity over every measured step
    own = harness.figures(len(measured.times))
    times = own.get("times") or measured.times
    loss_values = own.get(LOSSES) or ([float(x) for x in torch.stack(measured.losses).float().cpu()]
                                        if measured.losses else [])
    grad_values = [float(x) for x in torch.stack(measured.grad_norms).float().cpu()] if measured.grad_norms else []
    first, end = _steady_window(times, spec.steps.steady, measured.warmup)
    flops = workload.flops_per_sample()
    window, collected = Window(samples=workload.samples_per_step() * (len(times) - measured.warmup)), Figures()
    for collector in collectors:
        collected |= collector.figures(window)
    metrics = {**summarize(times[first:end]), BUILD_S: measured.build_s, FIRST_STEP_S: times[0],
               WARMUP_STEPS: first,
               SAMPLES_PER_STEP: workload.samples_per_step(), FLOPS_PER_SAMPLE: flops.get("train"),
               "frozen_flops_per_sample": flops.get("frozen"),
               MEASURED_STEPS: end - first, **own.get("metrics", {}), **collected.metrics}
    own_series = own.get("series", {})
    data_s = own_series.get(DATA_WAITS_S) or measured.data_s  # a command's: what its output says
    metrics.update(_data_wait(data_s[first:end], times[first:end]))
    if measured.loader_s[first:end]:  # the mean step a loader can feed (workloads.feed's last_loader_s)
        metrics[LOADER_S] = statistics.fmean(measured.loader_s[first:end])
    return {"metrics": metrics,
            "series": {STEP_TIMES_S: times, LOSSES: loss_values, "grad_norms": grad_values,
                       **({DATA_WAITS_S: data_s} if data_s else {}), **own_series, **collected.series},
            "extra": {**workload.extra_metrics(), **own.get("extra", {}), **collected.extra,
                      # timed steps short of the configured ones: the measure budget ended them
                      **({"measure_budget_spent": True} if len(times) < measured.warmup + spec.steps.measure else {}),
                      **({"drain_steps": measured.drain_steps} if measured.drain_steps else {}),
                      **({"stopped_early": measured.stopped_early} if measured.stopped_early else {})}}


def _data_wait(data_s: list[float], times: list[float]) -> dict[str, float]:
    """How long the steady steps waited for their batches: the mean wait per step (not the median:
    workers deliver batches together, so most steps wait for nothing and one for all), and its
    share of the steps' time (the GPU has nothing of the step to run while the host waits)."""
    if not data_s or len(data_s) != len(times) or not sum(times):
        return {}
    return {DATA_WAIT_S: statistics.fmean(data_s), DATA_WAIT_SHARE: sum(data_s) / sum(times)}


#: how torch's DataLoader re-raises what failed in a worker: "Caught TYPE in DataLoader worker process N."
#: and the worker's whole traceback, whose cause comes last
WORKER_FAILURE = re.compile(r"^Caught (\w+) (in DataLoader worker process \d+)\.\nOriginal Traceback")


def _message(exc: BaseException) -> str:
    """The exception as a record's reason. What failed in a DataLoader worker comes back as a
    RuntimeError that begins with the worker's traceback: the reason names the worker's own error
    instead (a decoder that could not load, seen on the H200 as "RuntimeError: Caught DecodeError
    in DataLoader worker process 0. Original Traceback ..." and a file path cut off)."""
    text = str(exc)
    caught = WORKER_FAILURE.match(text)
    if caught:
        name, where = caught.groups()
        raised = re.findall(rf"^(?:[\w.]+\.)?{name}: (.*)$", text, re.MULTILINE)
        if raised:
            return f"{name} {where}: {raised[-1]}"
    return f"{type(exc).__name__}: {text}"


def _failure(exc: BaseException, step_index: int, device: torch.device, after_steps: bool = False) -> dict[str, Any]:
    if isinstance(exc, Refused):  # found as the knob met the built model: not a failure
        return {"status": Status.SKIPPED, "reason": str(exc)}
    message = _message(exc)
    if after_steps:  # the steps ran; summarising them (FLOPs, the workload's own figures) failed
        message = f"after the measured steps: {message}"
    tail = "".join(traceback.format_exception(exc))[-4000:]
    # Python's own MemoryError (host memory) too, which says nothing more than its name
    # a command's failure carries its output, whose words are not an error's: the command said if it was an OOM
    if isinstance(exc, (torch.OutOfMemoryError, MemoryError)) or (
            not isinstance(exc, CommandFailed) and any(m in str(exc).lower() for m in OOM_MARKERS)):
        where = "while building" if step_index < 0 else f"at step {step_index}"
        first = (str(exc) or type(exc).__name__).splitlines()[0]
        return {"status": Status.OOM, "reason": f"out of memory {where}: {first[:300]}",
                "metrics": {"oom_step": step_index, **memory.current(device)}, "traceback": tail}
    return {"status": Status.ERROR, "reason": message[:2000], "traceback": tail,
            "metrics": {"error_step": step_index}}


def main(argv: list[str] | None = None, command: Command | None = None) -> int:
    if "TORCHELASTIC_RUN_ID" in os.environ:  # a rank under torchrun: die with torchrun, which dies with the runner
        die_with_parent()
    spec_path, result_path = (argv or sys.argv[1:])[:2]
    spec = PointSpec.from_json(json.loads(Path(spec_path).read_text()))
    if spec.deadline:  # a point about to time out says where it stands, in its log
        # from the parent's deadline, the clock that kills it: the imports (13-24 s on a busy host)
        # and torchrun's own start came before this process could count anything
        faulthandler.dump_traceback_later(max(spec.deadline - STACK_DUMP_LEAD_S - time.time(), 1.0), exit=False)
    started = time.time()
    result = run(spec, command)
    result.duration_s = time.time() - started
    path = Path(result_path)
    if result.world_size > 1:
        path = path.with_name(f"{path.stem}.rank{result.rank}{path.suffix}")
    write_atomic(path, result.to_json())
    # non-zero lets torchrun tear down the other ranks of a failed point
    return 0 if result.status in (Status.OK, Status.SKIPPED, Status.DIVERGED) else 1

