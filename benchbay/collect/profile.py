"""torch.profiler over a few steady steps of a point, and what its trace says.

``StepProfiler``, entered right before the steps to profile, records ``active`` of them after its
own warm-up step (host activity and, when the process uses CUDA, device activity) and on exit
writes into its folder:

- ``trace.json``: the Chrome trace (open it in https://ui.perfetto.dev or chrome://tracing);
- ``top_ops.csv``: the top kernels by device time (CUDA) or operators by self host time (CPU),
  seconds per step and share of the profiled time of that kind, the rest in an ``other`` row.

``summary()`` gives what the record keeps under ``extra`` (``analyse`` gives the same from any
stored trace): the top-ops table, seconds per step of each op family over every kernel and of
each phase of the step (the ``record_function`` ranges the harness and the workloads emit; on
CUDA the device time of the kernels launched inside a range, on CPU the range's host time; the
innermost range wins, and what lies in none is ``unattributed``: a step whose loss opens no
``forward`` range has its forward there), the profiled step itself, the share of the profiled
device time the GPU sat idle between kernels (launch-bound time) and host-device syncs per step
(the compiler's counters are in every record: ``benchbay.collect.compile``). On CPU the phases
add up to the profiled step; on CUDA to the device's busy time, the idle share being the rest."""

from __future__ import annotations

import bisect
import csv
import functools
import itertools
import json
import os
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, schedule

from benchbay.collect import Collector, Figures, Window
from benchbay.collect.op_family import family

PHASES = ("data", "frozen_encoders", "forward", "backward", "optimizer", "communication")
#: the step's time (host) or kernels (device) in no phase range, so that the phases cover the step
UNATTRIBUTED = "unattributed"
TOP_OPS = 15
STEP_RANGE = "ProfilerStep#"  # torch.profiler's range around each step
DEVICE_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset"}
LAUNCH_CATEGORIES = {"cuda_runtime", "cuda_driver"}  # inductor's triton kernels go through the driver API
# host calls that block until the device has caught up (runtime and driver API; "_v2"/"_ptsz" dropped)
BLOCKING_CALLS = {"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize", "cudaMemcpy",
                  "cuStreamSynchronize", "cuCtxSynchronize", "cuEventSynchronize", "cuMemcpyDtoH"}
SCALAR_READ = "aten::_local_scalar_dense"  # where every .item(), bool(t), float(t) of a tensor ends
# torch.optim's step range: its .item() calls read host-side step counters, not device values
OPTIMIZER_STEP_RANGE = "Optimizer.step#"


class StepProfiler(Collector):
    """A collector started right before the steps to profile; ``step()`` after every step.

    Its schedule starts where it is started, not at a count of steps fixed beforehand: the first
    step is its own warm-up (its start-up cost stays out of the record), the next ``active`` are
    recorded. Under torchrun each rank writes into ``out_dir/rank<N>``. A window that ended in an
    exception writes nothing."""

    def __init__(self, out_dir: Path, active: int):
        world = int(os.environ.get("WORLD_SIZE", "1"))
        self.out_dir = Path(out_dir) / f"rank{os.environ.get('RANK', '0')}" if world > 1 else Path(out_dir)
        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available() and torch.cuda.is_initialized():  # a CPU point on a GPU host stays CPU
            activities.append(ProfilerActivity.CUDA)
        self._profiler = profile(activities=activities, schedule=schedule(wait=0, warmup=1, active=active, repeat=1))
        self._summary: dict[str, Any] = {"profile_dir": str(self.out_dir)}
        self._running = False

    def start(self) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self._profiler.__enter__()
        self._running = True

    def step(self) -> None:
        self._profiler.step()

    def stop(self, failed: bool = False) -> None:
        if self._running:
            self._running = False
            self._profiler.__exit__(None, None, None)
            if not failed:
                self._summary.update(self._write())

    def __exit__(self, exc_type, exc, tb) -> bool:
        self.stop(failed=exc_type is not None)
        return False

    def figures(self, window: Window) -> Figures:
        return Figures(extra=dict(self._summary))

    def _write(self) -> dict[str, Any]:
        if self._profiler.profiler is None:
            return {"profile_error": "no step was recorded (fewer steps than its warm-up + active)"}
        trace = self.out_dir / "trace.json"
        self._profiler.export_chrome_trace(str(trace))
        return summarise(trace)


class ProbeTrace(Collector):
    """The trace a command's probe writes (benchbay/workloads/probe): torch.profiler over the steps
    after the measured ones, in the command's own process; read once it is there (the probe writes
    it as the last profiled step ends, a moment after the worker saw that step)."""

    def __init__(self, out_dir: Path, running: Callable[[], bool], wait_s: float = 120.0):
        self.trace = Path(out_dir) / "trace.json"
        self.running = running  # whether the command still runs (and may still write it)
        self.wait_s = wait_s

    def step(self) -> None:
        """The worker's steps past the measured ones: the probe profiles them on its own."""

    def figures(self, window: Window) -> Figures:
        deadline = time.monotonic() + self.wait_s
        while not self.trace.exists() and self.running() and time.monotonic() < deadline:
            time.sleep(0.05)
        if not self.trace.exists():
            return Figures(extra={"profile_dir": str(self.trace.parent), "profile_error":
                                  "the command's probe wrote no trace (it ended before its profiled steps)"})
        return Figures(extra={"profile_dir": str(self.trace.parent), **summarise(self.trace)})


def summarise(trace: Path) -> dict[str, Any]:
    """A trace's summary figures (``analyse``), its top ops written beside it as top_ops.csv."""
    try:
        figures = analyse(trace)
    except Exception as exc:  # a trace this code cannot read must not cost the point its timings
        return {"profile_error": f"{type(exc).__name__}: {exc}"}
    write_top_ops(trace.parent / "top_ops.csv", figures["profile_top_ops"])
    return figures


def analyse(trace_path: Path) -> dict[str, Any]:
    """The summary figures of a trace written by ``StepProfiler`` (or any torch.profiler trace
    with ``ProfilerStep#`` ranges)."""
    trace = Trace(json.loads(Path(trace_path).read_text())["traceEvents"])
    steps = max(len(trace.steps), 1)
    return {
        "profiled_steps": len(trace.steps),
        "profile_top_ops": trace.top_ops(steps),
        "profile_families": trace.family_seconds(steps),
        "phases": trace.phase_seconds(steps),
        "profiled_step_s": sum(e["dur"] for e in trace.steps) / 1e6 / steps if trace.steps else None,
        "phase_clock": "device" if trace.device else "host",
        "idle_gap_share": trace.idle_gap_share(),
        "syncs_per_step": trace.host_syncs() / steps,
    }


def write_top_ops(path: Path, table: list[dict[str, Any]]) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=["name", "calls_per_step", "time_s", "share"])
        writer.writeheader()
        writer.writerows(table)


def _end(event: dict[str, Any]) -> float:
    return event["ts"] + event["dur"]


def _thread(event: dict[str, Any]) -> tuple[Any, Any]:
    return event["pid"], event["tid"]


class Trace:
    """The complete events (``"ph": "X"``) of a Chrome trace, sorted into what the figures need.
    Times are microseconds, as in the trace."""

    def __init__(self, events: list[dict[str, Any]]):
        spans = sorted((e for e in events if e.get("ph") == "X" and "dur" in e), key=lambda e: e["ts"])
        annotations = [e for e in spans if e.get("cat") == "user_annotation"]
        self.steps = [e for e in annotations if e["name"].startswith(STEP_RANGE)]
        start, end = (self.steps[0]["ts"], max(map(_end, self.steps))) if self.steps else (float("-inf"), float("inf"))

        def in_steps(e: dict[str, Any]) -> bool:
            return start <= e["ts"] <= end

        self.annotations = [e for e in annotations if in_steps(e)]
        self.ops = [e for e in spans if e.get("cat") == "cpu_op" and in_steps(e)]
        self.calls = [e for e in spans if e.get("cat") in LAUNCH_CATEGORIES and in_steps(e)]
        self.device = [e for e in spans if e.get("cat") in DEVICE_CATEGORIES]
        self.launch_of = {e["args"]["correlation"]: e for e in self.calls if "correlation" in e.get("args", {})}
        self.thread_ops: dict[tuple, list[dict[str, Any]]] = defaultdict(list)  # callers before callees
        for e in sorted(self.ops, key=lambda e: (e["ts"], -e["dur"])):
            self.thread_ops[_thread(e)].append(e)
        self._thread_starts = {k: [e["ts"] for e in ops] for k, ops in self.thread_ops.items()}

    # ---- what took the time ---------------------------------------------------------------------
    @functools.cached_property
    def _op_times(self) -> tuple[Counter, Counter]:
        """Microseconds and calls of each kernel by device time on CUDA, each operator by self
        host time on CPU (one walk of the trace for the top ops and the families)."""
        time_us, calls = Counter(), Counter()
        if self.device:
            for e in self.device:
                time_us[e["name"]] += e["dur"]
                calls[e["name"]] += 1
        else:
            time_us = self._self_times()
            calls.update(e["name"] for e in self.ops)
        return time_us, calls

    def family_seconds(self, steps: int) -> dict[str, float]:
        """Seconds per step of each op family (``op_family``) over every kernel (operator on CPU)."""
        seconds: Counter = Counter()
        for name, t in self._op_times[0].items():
            seconds[family(name)] += t / 1e6 / steps
        return dict(seconds.most_common())

    def top_ops(self, steps: int, top: int = TOP_OPS) -> list[dict[str, Any]]:
        """Kernels by device time on CUDA, operators by self host time on CPU; the rest as ``other``."""
        time_us, calls = self._op_times
        total = sum(time_us.values()) or 1.0
        ranked = time_us.most_common()
        rows = [(name, calls[name], t) for name, t in ranked[:top]]
        rest = ranked[top:]
        rows.append(("other", sum(calls[name] for name, _ in rest), sum(t for _, t in rest)))
        return [{"name": name, "calls_per_step": n / steps, "time_s": t / 1e6 / steps, "share": t / total}
                for name, n, t in rows]

    def _self_times(self) -> Counter:
        """Host time of each operator less the time of the operators it called (per thread)."""
        self_us: Counter = Counter()
        for ops in self.thread_ops.values():
            open_ops: list[dict[str, Any]] = []  # the chain of callers of the current op
            for e in ops:
                while open_ops and _end(open_ops[-1]) <= e["ts"]:
                    open_ops.pop()
                if open_ops:
                    self_us[open_ops[-1]["name"]] -= e["dur"]
                self_us[e["name"]] += e["dur"]
                open_ops.append(e)
        return self_us

    def phase_seconds(self, steps: int) -> dict[str, float]:
        """Seconds per step of each phase range present, and ``unattributed``: on CUDA the device
        time of the work launched inside each range, on CPU the host time of the step inside it; the
        innermost phase range wins either way, so no time is counted twice."""
        ranges = [e for e in self.annotations if e["name"] in PHASES]
        seconds = dict.fromkeys([*sorted({e["name"] for e in ranges}, key=PHASES.index), UNATTRIBUTED], 0.0)
        if not self.device:
            for step in self.steps:
                for name, us in _partition(step, [e for e in ranges if _thread(e) == _thread(step)]):
                    seconds[name] += us / 1e6 / steps
            return seconds
        starts = [e["ts"] for e in ranges]
        for e in self.device:
            launch = self.launch_of.get(e.get("args", {}).get("correlation"))
            if launch:  # launched in the profiled steps
                phase = _innermost(ranges, starts, launch)
                seconds[phase["name"] if phase else UNATTRIBUTED] += e["dur"] / 1e6 / steps
        return seconds

    # ---- where the device waited ----------------------------------------------------------------
    def idle_gap_share(self) -> float | None:
        """Share of the device timeline (first to last device activity, all streams merged) with no
        kernel, copy or memset running: time the GPU waited for the host."""
        if not self.device:
            return None
        busy, (run_start, run_end) = 0.0, (self.device[0]["ts"], _end(self.device[0]))
        for e in self.device[1:]:
            if e["ts"] > run_end:
                busy += run_end - run_start
                run_start, run_end = e["ts"], _end(e)
            else:
                run_end = max(run_end, _end(e))
        busy += run_end - run_start
        span = max(map(_end, self.device)) - self.device[0]["ts"]
        return max(0.0, 1.0 - busy / span) if span > 0 else 0.0

    def host_syncs(self) -> int:
        """Host-device syncs in the profiled steps. On CUDA: blocking runtime calls and copies to
        pageable host memory, those inside one operator (a copy and its stream sync) counted once.
        On CPU, where no device calls exist: the scalar reads (``.item()``) that would sync on a GPU,
        outside torch.optim's step (its step counters live on the host)."""
        if self.device:
            pageable = {e.get("args", {}).get("correlation") for e in self.device
                        if "DtoH" in e["name"] and "Pageable" in e["name"]}
            blocking = [e for e in self.calls if e["name"].split("_")[0] in BLOCKING_CALLS
                        or e.get("args", {}).get("correlation") in pageable]
            return len({self._innermost_op_key(e) for e in blocking})
        optimizer = [e for e in self.annotations if e["name"].startswith(OPTIMIZER_STEP_RANGE)]
        return sum(1 for e in self.ops if e["name"] == SCALAR_READ
                   and not any(_thread(o) == _thread(e) and o["ts"] <= e["ts"] <= _end(o) for o in optimizer))

    def _innermost_op_key(self, call: dict[str, Any]) -> tuple:
        """The innermost operator around a host call (the call itself when it has none)."""
        thread = _thread(call)
        op = _innermost(self.thread_ops.get(thread, []), self._thread_starts.get(thread, []), call)
        return (thread, op["ts"] if op else call["ts"])


def _partition(step: dict[str, Any], ranges: list[dict[str, Any]]) -> list[tuple[str, float]]:
    """A step's host time cut at every phase range's ends, each piece the innermost (latest
    started) range's around it, or ``unattributed``: (phase, microseconds) pieces that add up to the step."""
    start, end = step["ts"], _end(step)
    inside = [e for e in ranges if e["ts"] < end and _end(e) > start]
    cuts = sorted({start, end, *(min(max(t, start), end) for e in inside for t in (e["ts"], _end(e)))})
    pieces = []
    for low, high in itertools.pairwise(cuts):
        around = [e for e in inside if e["ts"] <= low and _end(e) >= high]
        pieces.append((max(around, key=lambda e: e["ts"])["name"] if around else UNATTRIBUTED, high - low))
    return pieces


def _innermost(ranges: list[dict[str, Any]], starts: list[float], event: dict[str, Any]) -> dict[str, Any] | None:
    """The latest-starting of ``ranges`` (sorted by start) that contains ``event``'s start."""
    i = bisect.bisect_right(starts, event["ts"]) - 1
    while i >= 0:
        if _end(ranges[i]) >= event["ts"]:
            return ranges[i]
        i -= 1
    return None
