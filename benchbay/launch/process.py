"""Run one sweep point in a fresh process (or a torchrun process group) with a timeout, and
classify how it ended: the worker's own result when it wrote one, else crash or timeout."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import psutil

from benchbay.interrupts import raise_if_swallowed
from benchbay.launch.base import Launch, Outcome, PointSpec, WorkerResult
from benchbay.parent_death import adopt_orphans, die_with_parent
from benchbay.record import (
    HOST_RSS_GIB,
    PEAK_MEM_ALLOCATED_GIB,
    PEAK_MEM_RESERVED_GIB,
    SIGNAL,
    STEP_TIME_P90_S,
    STEP_TIME_RANK_SPREAD,
    STEP_TIME_S,
    Status,
)
from benchbay.workloads.command import POINT_DIR_ENV

ALLOC_VARS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")
#: what a point's workers write their threads' stacks into their log on (faulthandler, benchbay.launch.entry)
STACKS_SIGNAL = signal.SIGUSR1
#: how long a stopped point's workers get to write them
STACKS_WAIT_S = 1.0
#: the end of a stopped point's log that is kept
KEPT_LOG_CHARS = 20_000


class PointInterrupted(KeyboardInterrupt):
    """A Ctrl-C or SIGTERM (a call's time limit) while a point ran: the end of its log, its stacks
    in it, and where it stood (its phase, its innermost frames), so that a point that never ends
    within a call says why."""

    def __init__(self, log: str, where: str):
        super().__init__()
        self.log, self.where = log, where


def point_env(knobs: dict[str, Any]) -> dict[str, str]:
    """Variables that must be set before the worker initialises CUDA."""
    env = {"NCCL_NVLS_ENABLE": "0",  # NVLink multicast can take a shared host's GPUs down
           "PYTHONUNBUFFERED": "1"}
    if knobs.get("alloc") == "expandable_segments":
        env.update(dict.fromkeys(ALLOC_VARS, "expandable_segments:True"))
        if knobs.get("cuda_graph", "off") != "off":
            env["NCCL_GRAPH_REGISTER"] = "0"  # expandable segments + NCCL + graphs can hang (PT #158029)
    if knobs.get("deterministic"):
        env["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    return env


def command(spec_path: Path, result_path: Path, launch: Launch) -> list[str]:
    worker = ["-m", "benchbay.launch.entry", str(spec_path), str(result_path)]
    if launch.launcher == "direct":
        return [sys.executable, *worker]
    rdzv = (["--standalone"] if launch.nnodes == 1 else
            [f"--nnodes={launch.nnodes}", f"--node-rank={launch.node_rank}", "--rdzv-backend=c10d",
             f"--rdzv-endpoint={launch.rdzv_endpoint}"])
    return [sys.executable, "-m", "torch.distributed.run", *rdzv, f"--nproc-per-node={launch.nproc}", *worker]


@dataclass
class Finished:
    """What the processes of one point (on one node) left behind."""

    results: list[WorkerResult]  # one per rank that wrote a result file
    returncode: int | None
    timed_out: bool
    tail: str  # the end of the log
    stall: str = ""  # a timed-out point: its last phase and innermost frames


def run_point(spec: PointSpec, workdir: Path, launch: Launch) -> Outcome:
    """Run the worker and return its (merged) result; never raises for a failed point.
    KeyboardInterrupt (or SIGTERM, which the runner turns into one) kills the point's processes and propagates."""
    # each node sees only its own ranks' results (the Slurm launcher gathers every node's)
    return merge(run_ranks(spec, workdir, launch), spec.timeout, launch.nproc)


def run_ranks(spec: PointSpec, workdir: Path, launch: Launch) -> Finished:
    """This node's processes of the point, unmerged (a multi-node launcher merges all nodes')."""
    workdir.mkdir(parents=True, exist_ok=True)
    spec_path, result_path, log_path = workdir / "spec.json", workdir / "result.json", workdir / "worker.log"
    # the deadline the worker dumps its stacks before: this process's clock, started at the launch
    spec_path.write_text(json.dumps(replace(spec, deadline=time.time() + spec.timeout).to_json(), default=str))
    for old in workdir.glob("result*.json"):
        old.unlink()
    env = {k: v for k, v in os.environ.items() if k not in ALLOC_VARS}  # alloc=default means default
    env.update(point_env(spec.knobs))
    # a cold compile cache per point unless the suite shares one: first-step (compile) times must
    # not depend on earlier points
    env["TORCHINDUCTOR_CACHE_DIR"] = spec.compile_cache_dir or str(workdir / "inductor")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH")]))
    env[POINT_MARK] = mark = secrets.token_hex(8)
    env[POINT_DIR_ENV] = str(workdir.resolve())
    timed_out, state, interrupted = False, "", False
    adopt_orphans()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(command(spec_path, result_path, launch), stdout=log, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True, preexec_fn=die_with_parent)
        started = _created(proc.pid)
        try:
            raise_if_swallowed()  # a Ctrl-C as Popen forked
            proc.wait(timeout=spec.timeout)
        except subprocess.TimeoutExpired:
            timed_out, state = True, tree_state(proc.pid)
        except KeyboardInterrupt:
            interrupted, state = True, tree_state(proc.pid)
            state = "; ".join(filter(None, [state, _ask_for_stacks(proc, launch, log_path)]))
        finally:  # also after a clean exit: nothing the point started outlives it
            _kill(proc, mark, started)
    log = log_path.read_text(errors="replace")
    # a hang or a stop: the phase it was in, where it stood (wherever they are in the log), what its processes did
    stall = "; ".join(filter(None, [stall_summary(log), state])) if timed_out or interrupted else ""
    if interrupted:
        raise PointInterrupted(log[-KEPT_LOG_CHARS:], stall)
    results = [WorkerResult.from_json(json.loads(p.read_text())) for p in sorted(workdir.glob("result*.json"))]
    return Finished(results, proc.returncode, timed_out, log[-3000:], stall)


def _ask_for_stacks(proc: subprocess.Popen, launch: Launch, log_path: Path) -> str:
    """Have the point's workers (not torchrun, which the signal would end) write their stacks into the
    log; where none came, what the kernel says of the signal in each worker."""
    with contextlib.suppress(psutil.Error):
        first = psutil.Process(proc.pid)
        workers = [first] if launch.launcher == "direct" else first.children()
        for worker in workers:
            worker.send_signal(STACKS_SIGNAL)
        time.sleep(STACKS_WAIT_S)
        if not has_stacks(log_path.read_text(errors="replace")):
            return "; ".join(filter(None, (signal_state(worker.pid, STACKS_SIGNAL) for worker in workers)))
    return ""


def signal_state(pid: int, sig: int) -> str:
    """What the kernel says of ``sig`` in process ``pid`` (Linux): whether a handler catches it, whether
    it is pending, and in how many of its threads it is blocked (blocked in all, it is never delivered)."""
    bit = 1 << (sig - 1)

    def mask(status: str, key: str) -> int:
        found = re.search(rf"^{key}:\s*([0-9a-f]+)", status, re.M)
        return int(found.group(1), 16) if found else 0

    try:
        process = Path(f"/proc/{pid}/status").read_text()
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return ""
    threads = []
    for task in tasks:
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            threads.append((task / "status").read_text())
    blocked = sum(bool(mask(status, "SigBlk") & bit) for status in threads)
    caught = "caught" if mask(process, "SigCgt") & bit else "not caught"
    pending = ", pending" if (mask(process, "ShdPnd") | mask(process, "SigPnd")) & bit else ""
    return f"{signal.Signals(sig).name} in {pid}: {caught}{pending}, blocked in {blocked} of {len(threads)} threads"


def tree_state(pid: int) -> str:
    """What the processes of a stalled point were doing when it was killed, as the OS saw it: each
    process's state and the CPU it had used (sleeping with little CPU: waiting; running: a loop in
    C or Python; disk-sleep: blocked in the kernel, e.g. a driver call)."""
    try:
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.Error:
        return ""
    parts = []
    for p in tree:
        with contextlib.suppress(psutil.Error):
            cpu = p.cpu_times()
            parts.append(f"{p.name()} {p.pid}: {p.status()}, {cpu.user + cpu.system:.1f} s CPU, "
                         f"{p.num_threads()} threads")
    return "processes: " + ", ".join(parts) if parts else ""


#: set in a point's environment, so that its processes are known wherever they went
POINT_MARK = "BENCHBAY_POINT"


def _created(pid: int) -> float:
    """When the process started, on psutil's clock (its children's start times are on the same)."""
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:  # gone already: none of its descendants can be older than now
        return psutil.time.time()


def _kill(proc: subprocess.Popen, mark: str, started: float) -> None:
    """SIGKILL the point's process group and every process of the point: torchrun starts each rank
    in a session of its own (killing torchrun's group alone would leave hung ranks running), and a
    step may start one in a session of its own that its parent's exit orphaned; each carries the
    point's mark in its environment, or is still a descendant of the point's first process, or is
    an orphan re-parented to this process (adopt_orphans) since the point started."""
    doomed = []
    for p in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if p.environ().get(POINT_MARK) == mark:
                doomed.append(p)
    if proc.poll() is None:  # once reaped, its pid may be another process's
        with contextlib.suppress(psutil.Error):
            doomed += psutil.Process(proc.pid).children(recursive=True)
    adopted = _adopted(proc.pid, started)
    doomed += adopted
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # the group outlives its first process while any member lives
    for p in doomed:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    proc.wait()
    _wait_dead(doomed)
    for p in adopted:  # ours to reap now, or they stay zombies for the rest of the sweep
        with contextlib.suppress(ChildProcessError):
            os.waitpid(p.pid, os.WNOHANG)


def _adopted(point_pid: int, started: float) -> list[psutil.Process]:
    """This process's children that the point left behind: started no earlier than the point, and
    not the point's first process (the runner starts nothing else while a point runs)."""
    found = []
    with contextlib.suppress(psutil.Error):
        for child in psutil.Process().children():
            with contextlib.suppress(psutil.Error):
                if child.pid != point_pid and child.create_time() >= started:
                    found += [child, *child.children(recursive=True)]
    return found


#: how long the killed processes of a point get to be gone (or zombies) before the sweep goes on
KILL_WAIT_S = 5.0


def _wait_dead(procs: list[psutil.Process]) -> None:
    """Until each process is gone or a zombie: a SIGKILLed process dies when it next runs, a moment
    later on a busy host, and one orphaned into a session of its own is not ours to reap."""
    deadline = time.monotonic() + KILL_WAIT_S
    for p in procs:
        while time.monotonic() < deadline:
            try:
                if not p.is_running() or p.status() == psutil.STATUS_ZOMBIE:
                    break
            except psutil.NoSuchProcess:
                break
            time.sleep(0.01)


#: each rank's own figures, kept in the record's ``ranks`` list
RANK_FIGURES = (STEP_TIME_S, STEP_TIME_P90_S, PEAK_MEM_ALLOCATED_GIB, PEAK_MEM_RESERVED_GIB, HOST_RSS_GIB)
#: torchrun's summary of a failed group: every failed rank with its exit code (< 0: signal), the
#: first one to fail ("Root Cause") last
FAILURE = re.compile(r"rank\s*:\s*(\d+)\s*\(local_rank.*?exitcode\s*:\s*(-?\d+)", re.S)


def merge(done: Finished, timeout: float, world_size: int) -> Outcome:
    """One outcome for the point: the worst rank's status (its reason prefixed with its rank), or
    a crash when the first rank to fail died without a result (the others' errors, such as a closed
    connection, follow from it); the slowest rank's figures, the spread of step times across ranks
    and every rank's own figures."""
    results = sorted(done.results, key=lambda r: r.rank)
    lost = _lost_rank(done.tail, results)
    worst = min(results, key=lambda r: list(Status).index(r.status), default=None)
    if worst is None or lost or (worst.status == Status.OK and (done.timed_out or len(results) < world_size)):
        out = _no_result(done, timeout, partial=len(results), lost=lost)
    elif worst.status == Status.OK:
        out = Outcome.from_result(max(results, key=lambda r: r.metrics.get(STEP_TIME_S) or 0.0))
        out.metrics[STEP_TIME_RANK_SPREAD] = _rank_spread(results)
    else:
        out = Outcome.from_result(worst)
        if world_size > 1 and out.status != Status.SKIPPED and out.reason:  # every rank skips alike
            out.reason = f"rank {worst.rank}: {out.reason}"
    out.ranks = [{"rank": r.rank, "status": r.status, **{k: r.metrics.get(k) for k in RANK_FIGURES},
                  **({"reason": r.reason} if r.status != Status.OK else {})} for r in results]
    return out


def _lost_rank(tail: str, results: list[WorkerResult]) -> tuple[int, int, bool] | None:
    """A failed rank that wrote no result, its exit code, and whether torchrun saw it fail first.
    torchrun's first is preferred; else one that died by a signal of its own (torchrun may see a
    rank's error about a closed connection before the crash of the rank that closed it), never one
    that torchrun itself stopped with SIGTERM."""
    summary = tail[tail.rfind("Failures:"):] if "Failures:" in tail else tail[tail.rfind("Root Cause"):]
    failures = [(int(rank), int(code)) for rank, code in FAILURE.findall(summary)]
    reported = {r.rank for r in results}
    silent = [(rank, code) for rank, code in failures if rank not in reported]
    if failures and failures[-1] in silent:
        return (*failures[-1], True)
    own = [(rank, code) for rank, code in silent if code != -signal.SIGTERM]
    return (*own[0], False) if own else None


def _rank_spread(ok: list[WorkerResult]) -> float | None:
    """(slowest - fastest) / median of the ranks' step times: how unevenly the ranks ran."""
    times = sorted(t for r in ok if (t := r.metrics.get(STEP_TIME_S)))
    if not times:
        return None
    return (times[-1] - times[0]) / statistics.median(times)


def _no_result(done: Finished, timeout: float, partial: int,
               lost: tuple[int, int, bool] | None = None) -> Outcome:
    returncode, tail = done.returncode, done.tail
    metrics: dict[str, Any] = {"exit_code": returncode}

    def crash(reason: str, signal_number: int | None = None) -> Outcome:
        if signal_number is not None:
            metrics[SIGNAL] = _signal_name(signal_number)
        return Outcome(status=Status.CRASH, reason=reason, metrics=metrics, extra={"log_tail": tail})

    def out_of_time(how: str, where: str) -> Outcome:
        return Outcome(status=Status.TIMEOUT, metrics=metrics, extra={"log_tail": tail},
                       reason=f"no result within {timeout:g} s ({how})" + (f"; {where}" if where else ""))

    if done.timed_out:
        return out_of_time("killed", "; ".join(filter(None, [f"{partial} rank(s) had finished" if partial else "",
                                                             done.stall])))
    if lost:
        rank, code, first = lost
        why = "(the first rank to fail)" if first else "(it left no result; the other ranks' errors follow)"
        if code < 0:
            return crash(f"rank {rank} killed by {_signal_name(-code)} {why}", -code)
        return crash(f"rank {rank} ended with exit code {code} without a result {why}")
    if returncode is not None and returncode < 0 and DEADLINE_DUMP.search(tail):
        # it died in the seconds between its deadline's stack dump and the kill (seen on an H100: a
        # SIGSEGV just after the dump, inductor compiling): it ran out of time, whatever ended it
        metrics[SIGNAL] = _signal_name(-returncode)
        return out_of_time(f"killed by {_signal_name(-returncode)} as its stacks were dumped before the deadline",
                           stall_summary(tail))
    where = f" in phase '{phase}'" if (phase := last_phase(tail)) else ""
    if returncode is not None and returncode < 0:
        return crash(f"killed by {_signal_name(-returncode)}{where}: {_last_line(tail)}", -returncode)
    return crash(f"exit code {returncode} without a result{where}: {_last_line(tail)}")


#: the line faulthandler's watchdog writes as it dumps a worker's stacks, a little before its deadline
#: (benchbay.launch.worker's STACK_DUMP_LEAD_S)
DEADLINE_DUMP = re.compile(r"^Timeout \(\d+:\d\d:\d\d(?:\.\d+)?\)!$", re.M)
PHASE_MARK = "benchbay phase: "  # how benchbay.launch.worker announces a phase in its log
#: a thread's stack in faulthandler's dump ("Current thread" for the one that took the signal asking for
#: it, as after a Ctrl-C); the main thread (the first started) comes last
_THREAD_STACK = re.compile(r"(?:Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):\n((?:  File .*\n?)+)")


def last_phase(log: str) -> str | None:
    lines = [line[len(PHASE_MARK):] for line in log.splitlines() if line.startswith(PHASE_MARK)]
    return lines[-1] if lines else None


def has_stacks(log: str) -> bool:
    """Whether a worker log holds a faulthandler dump of its threads."""
    return _THREAD_STACK.search(log) is not None


def stall_summary(log: str, frames: int = 4) -> str:
    """'in phase X at <innermost frames of the main thread>' from a worker log with a stack dump."""
    parts = []
    if phase := last_phase(log):
        parts.append(f"in phase '{phase}'")
    dumps = _THREAD_STACK.findall(log)
    if dumps:
        where = [line.strip() for line in dumps[-1].strip().splitlines()[:frames]]
        parts.append("at " + " <- ".join(where))
    return "; ".join(parts)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _last_line(tail: str) -> str:
    # not a rule of "=" or "-", nor the worker's own phase marks
    lines = [x for x in tail.strip().splitlines() if x.strip(" =-") and not x.startswith(PHASE_MARK)]
    return lines[-1][:300] if lines else "(no output)"
