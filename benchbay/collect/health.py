"""Was the machine quiet while a point ran? pyperf-style system checks, made by the local launcher
in the point's parent process around every point, and stored under ``health`` in its record.

- CPU: the busy time of the CPUs this process may run on, less the CPU time of the runner and of
  the point's processes (the runner's children: once waited for, their time is in the runner's
  ``children_*`` times), is what *other* processes used; the busiest of them are named. The
  frequency governor and a laptop on battery are settings of the machine.
- GPU (NVML, when the point runs on CUDA; read without creating a CUDA context): compute
  processes on the point's GPUs that are not the point's, clock-event (throttle) reasons seen
  while it ran, the power limit against its default, ECC and persistence mode.

:func:`point_warnings` says what makes one point's figures suspect, :func:`machine_warnings`
what makes every figure of this machine less stable. A reading that cannot be made here is None.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from benchbay.collect.nvml import library as nvml_library

GIB = 1024**3
#: other processes using at least this many CPUs (and this share of the usable ones) make a point busy
BUSY_CORES, BUSY_SHARE = 0.25, 0.10
TOP_PROCESSES = 3
#: NVML clock-event reasons: those that slow a GPU down for a cause other than the work itself warn
SLOWDOWNS = {0x8: "hardware slowdown", 0x20: "software thermal slowdown", 0x40: "hardware thermal slowdown",
             0x80: "power brake"}
CLOCK_EVENTS = {0x2: "applications clocks setting", 0x4: "software power cap", 0x10: "sync boost",
                0x100: "display clock setting", **SLOWDOWNS}
_BUSY_FIELDS = ("user", "nice", "system", "irq", "softirq", "steal")  # steal: other virtual machines


# ---- CPU ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CpuSnapshot:
    """CPU time counters at one moment."""

    perf_t: float  # time.perf_counter()
    wall_t: float  # time.time(), to tell processes started since
    busy_s: float  # busy seconds of the usable CPUs
    own_s: float  # CPU seconds of this process and of its waited-for children
    others: dict[tuple[int, float], tuple[str, float]] = field(default_factory=dict)  # (pid, start) -> (name, s)


def usable_cpus() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return list(range(psutil.cpu_count() or 1))


def cpu_snapshot(cpus: list[int]) -> CpuSnapshot:
    per_cpu = psutil.cpu_times(percpu=True)
    busy = sum(getattr(per_cpu[i], f, 0.0) for i in cpus if i < len(per_cpu) for f in _BUSY_FIELDS)
    me = psutil.Process()
    times = me.cpu_times()
    ours = {me.pid, *(p.pid for p in me.children(recursive=True))}
    others = {}
    for proc in psutil.process_iter(["name", "cpu_times", "create_time"]):
        spent = proc.info["cpu_times"]
        if proc.pid not in ours and spent is not None:
            others[(proc.pid, proc.info["create_time"])] = (proc.info["name"], spent.user + spent.system)
    return CpuSnapshot(time.perf_counter(), time.time(), busy,
                       times.user + times.system + times.children_user + times.children_system, others)


def cpu_load(start: CpuSnapshot, end: CpuSnapshot, cpus: int) -> dict[str, Any]:
    """What the point and everything else used of the CPUs between two snapshots (in CPUs, i.e.
    cores busy on average), and the busiest other processes."""
    wall = max(end.perf_t - start.perf_t, 1e-9)
    own = max(end.own_s - start.own_s, 0.0)
    other = max(end.busy_s - start.busy_s - own, 0.0)
    used = []
    for key, (name, spent) in end.others.items():
        before = start.others.get(key)
        if before is None and key[1] < start.wall_t:
            continue  # there before the point yet unseen then: its share is unknown
        share = (spent - (before[1] if before else 0.0)) / wall
        if share >= 0.05:
            used.append((share, key[0], name))
    top = [f"{_command(pid, name)} (pid {pid}) {share:.2f} CPUs"
           for share, pid, name in sorted(used, reverse=True)[:TOP_PROCESSES]]
    # the two counters are read moments apart: others used at least what their own counters say
    other = max(other / wall, sum(share for share, _, _ in used))
    return {"cpu_available": cpus, "cpu_point_cores": own / wall, "cpu_other_cores": other, "cpu_other_top": top}


def _command(pid: int, name: str) -> str:
    """A process's command line, short (``python -m pytest`` says more than ``python``)."""
    try:
        words = psutil.Process(pid).cmdline()
    except psutil.Error:
        return name
    text = " ".join([Path(words[0]).name, *words[1:3]]) if words else name
    return text if len(text) <= 40 else text[:37] + "..."


def cpu_settings(cpus: list[int]) -> dict[str, Any]:
    governors = set()
    for i in cpus:
        path = Path(f"/sys/devices/system/cpu/cpu{i}/cpufreq/scaling_governor")
        try:
            governors.add(path.read_text().strip())
        except OSError:
            pass
    freq = psutil.cpu_freq() if hasattr(psutil, "cpu_freq") else None
    battery = psutil.sensors_battery() if hasattr(psutil, "sensors_battery") else None
    return {"cpu_governor": "/".join(sorted(governors)) or None,
            "cpu_freq_mhz": freq.current if freq else None, "cpu_freq_max_mhz": freq.max if freq and freq.max else None,
            "on_battery": (not battery.power_plugged) if battery and battery.power_plugged is not None else None}


# ---- GPU ----------------------------------------------------------------------------------------
def _read(call, *args):
    try:
        return call(*args)
    except Exception:  # not supported on this GPU, or no permission
        return None


def gpu_handles(lib, count: int) -> list:
    """NVML handles of the first ``count`` GPUs the point sees. NVML ignores CUDA_VISIBLE_DEVICES,
    so it is read here; asking CUDA would create a context in the runner."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = ([x.strip() for x in visible.split(",") if x.strip()] if visible is not None
           else [str(i) for i in range(_read(lib.nvmlDeviceGetCount) or 0)])
    handles = []
    for ident in ids[:count]:
        if ident.startswith(("GPU-", "MIG-")):
            handle = _read(lib.nvmlDeviceGetHandleByUUID, ident)
        else:
            handle = _read(lib.nvmlDeviceGetHandleByIndex, int(ident)) if ident.isdigit() else None
        if handle is not None:
            handles.append(handle)
    return handles


class GpuWatch:
    """Samples the point's GPUs: other compute processes and clock-event reasons."""

    def __init__(self, lib, handles: list):
        self.lib, self.handles = lib, handles
        self.reasons = 0
        self.before: set[int] = set()  # on the GPUs before the point started: never the point's
        self.others: dict[int, tuple[str, float]] = {}  # pid -> (name, GiB)
        # renamed in newer drivers' bindings; the old name remains in older ones
        self._clock_events = getattr(lib, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            lib.nvmlDeviceGetCurrentClocksThrottleReasons

    def sample(self, first: bool = False) -> None:
        me = psutil.Process()
        ours = {me.pid, *(p.pid for p in me.children(recursive=True))}
        for handle in self.handles:
            self.reasons |= _read(self._clock_events, handle) or 0
            for proc in _read(self.lib.nvmlDeviceGetComputeRunningProcesses, handle) or []:
                if first:
                    self.before.add(proc.pid)
                # in a container NVML may give host pids: a pid unknown here that appeared with
                # the point may be the point itself, so only known or earlier processes count
                if proc.pid in ours or not (proc.pid in self.before or psutil.pid_exists(proc.pid)):
                    continue
                name = _read(lambda pid: psutil.Process(pid).name(), proc.pid) or "?"
                used = (getattr(proc, "usedGpuMemory", None) or 0) / GIB
                self.others[proc.pid] = (name, max(used, self.others.get(proc.pid, ("", 0.0))[1]))

    def settings(self) -> dict[str, Any]:
        lib, handle = self.lib, self.handles[0]
        limit = _read(lib.nvmlDeviceGetEnforcedPowerLimit, handle)
        default = _read(lib.nvmlDeviceGetPowerManagementDefaultLimit, handle)
        ecc = _read(lib.nvmlDeviceGetEccMode, handle)
        persistence = _read(lib.nvmlDeviceGetPersistenceMode, handle)
        return {"gpu_power_limit_w": limit / 1e3 if limit else None,
                "gpu_power_default_w": default / 1e3 if default else None,
                "gpu_ecc": bool(ecc[0]) if ecc else None,
                "gpu_persistence": bool(persistence) if persistence is not None else None}

    def result(self) -> dict[str, Any]:
        return {"gpu_other_processes": [f"{name} (pid {pid}, {gib:.1f} GiB)"
                                        for pid, (name, gib) in sorted(self.others.items())],
                "gpu_clock_events": [name for bit, name in sorted(CLOCK_EVENTS.items()) if self.reasons & bit],
                **self.settings()}


# ---- one point ----------------------------------------------------------------------------------
class HealthCheck:
    """Watches the machine while one point runs (``with HealthCheck(gpus): run the point``), then
    ``result()`` is the record's ``health``. ``gpus``: how many GPUs the point uses (0 on CPU)."""

    def __init__(self, gpus: int = 0, interval_s: float = 1.0):
        self.interval_s = interval_s
        self.cpus = usable_cpus()
        lib = nvml_library() if gpus else None
        handles = gpu_handles(lib, gpus) if lib else []
        self.gpu = GpuWatch(lib, handles) if handles else None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._start = self._end = None

    def __enter__(self) -> HealthCheck:
        self._start = cpu_snapshot(self.cpus)
        if self.gpu:
            self.gpu.sample(first=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        if self.gpu:
            self.gpu.sample()
        self._end = cpu_snapshot(self.cpus)

    def _watch(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.gpu.sample()

    def result(self) -> dict[str, Any]:
        health = {**cpu_load(self._start, self._end, len(self.cpus)), **cpu_settings(self.cpus),
                  **(self.gpu.result() if self.gpu else {})}
        return {**health, "warnings": point_warnings(health), "machine_warnings": machine_warnings(health)}


def point_warnings(health: dict[str, Any]) -> list[str]:
    """What made this point's figures suspect: other processes on its CPUs or GPUs, a slowed GPU."""
    out = []
    other, cpus = health.get("cpu_other_cores"), health.get("cpu_available")
    if other is not None and cpus and other >= max(BUSY_CORES, BUSY_SHARE * cpus):
        top = health.get("cpu_other_top") or []
        out.append(f"busy CPU: other processes used {other:.2f} of {cpus} CPUs" + (f" ({', '.join(top)})" if top
                                                                                      else ""))
    if health.get("gpu_other_processes"):
        out.append("shared GPU: " + ", ".join(health["gpu_other_processes"]))
    slowed = [name for name in health.get("gpu_clock_events") or [] if name in SLOWDOWNS.values()]
    if slowed:
        out.append("GPU clocks slowed: " + ", ".join(slowed))
    return out


def machine_warnings(health: dict[str, Any]) -> list[str]:
    """Settings of the machine that make every figure less stable."""
    out = []
    governor = health.get("cpu_governor")
    if governor and governor != "performance":
        out.append(f"CPU frequency governor {governor}, not performance: clocks follow the load")
    if health.get("on_battery"):
        out.append("on battery power: the CPU may be held back")
    limit, default = health.get("gpu_power_limit_w"), health.get("gpu_power_default_w")
    if limit and default and limit < 0.98 * default:
        out.append(f"GPU power limit {limit:.0f} W, below its default {default:.0f} W")
    return out
