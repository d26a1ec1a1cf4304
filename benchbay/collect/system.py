"""A background sampler of CPU utilisation (this process and its children, psutil) and of the
GPU's utilisation, power and clocks (NVML), at a fixed interval during the measured steps."""

from __future__ import annotations

import math
import statistics
import threading
import time

import psutil

from benchbay.analysis.stats import coefficient_of_variation
from benchbay.collect import Collector, Figures, Window, nvml
from benchbay.record import (
    CHILD_CPU_UTIL,
    CHILD_CPU_UTIL_MEAN,
    CPU_UTIL,
    CPU_UTIL_CV,
    CPU_UTIL_MEAN,
    CPU_UTIL_T,
    GPU_POWER_W,
    GPU_SM_CLOCK_MHZ,
    GPU_UTIL,
)


def _live_children_cpu(proc: psutil.Process) -> dict[tuple[int, float], float]:
    """User + system CPU seconds of each live child of ``proc``, by (pid, creation time)."""
    seconds = {}
    for child in proc.children(recursive=True):
        try:
            seconds[(child.pid, child.create_time())] = sum(child.cpu_times()[:2])
        except psutil.Error:  # exited meanwhile
            pass
    return seconds


def children_cpu_seconds(proc: psutil.Process) -> float:
    """User + system CPU seconds of the live children of ``proc`` (e.g. DataLoader workers)."""
    return sum(_live_children_cpu(proc).values())


class ChildrenCpu:
    """User + system CPU seconds the children of ``proc`` (DataLoader workers, compile workers) used
    since it was made. A child that exited counts at its last reading: dropped from a sum over the
    live ones, its time read as negative load (H200, no loader workers: -28% of a core)."""

    def __init__(self, proc: psutil.Process):
        self.proc = proc
        self.first = _live_children_cpu(proc)
        self.last = dict(self.first)

    def seconds(self) -> float:
        self.last.update(_live_children_cpu(self.proc))
        return sum(self.last.values()) - sum(self.first.values())


def tree_cpu_seconds(proc: psutil.Process) -> float:
    """User + system CPU seconds of ``proc`` and its live children."""
    return sum(proc.cpu_times()[:2]) + children_cpu_seconds(proc)


class SystemSampler(Collector):
    """Samples every ``interval_s`` from ``start`` to ``stop``, in a thread of its own."""

    def __init__(self, gpu_index: int | None, interval_s: float = 0.2):
        self.gpu_index = gpu_index
        self.interval_s = interval_s
        # cpu_util: this process and its children; child_cpu_util: the children alone (loader workers)
        self.series: dict[str, list[float]] = {CPU_UTIL_T: [], CPU_UTIL: [], CHILD_CPU_UTIL: []}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Idempotent; a sampler never started stops without error."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        proc = psutil.Process()
        start = last_t = time.perf_counter()
        children_cpu = ChildrenCpu(proc)
        last_own, last_children = sum(proc.cpu_times()[:2]), 0.0
        while not self._stop.wait(self.interval_s):
            now, own, children = time.perf_counter(), sum(proc.cpu_times()[:2]), children_cpu.seconds()
            elapsed = max(now - last_t, 1e-9)
            # percent of one core, as top shows it: 200% = two cores busy
            self.series[CPU_UTIL].append(100.0 * (own + children - last_own - last_children) / elapsed)
            self.series[CHILD_CPU_UTIL].append(100.0 * (children - last_children) / elapsed)
            self.series[CPU_UTIL_T].append(now - start)
            last_t, last_own, last_children = now, own, children
            if self.gpu_index is not None:
                for key, value in nvml.sample(self.gpu_index).items():
                    self.series.setdefault(key, []).append(value)

    def figures(self, window: Window) -> Figures:
        return Figures(metrics=self.summary(), series=dict(self.series))

    def summary(self) -> dict[str, float | None]:
        util = self.series[CPU_UTIL]
        mean = statistics.fmean(util) if util else None
        cv = coefficient_of_variation(util)
        children = self.series[CHILD_CPU_UTIL]
        out = {CPU_UTIL_MEAN: mean, CPU_UTIL_CV: None if math.isnan(cv) else cv,
               CHILD_CPU_UTIL_MEAN: statistics.fmean(children) if children else None}
        for key in (GPU_UTIL, GPU_POWER_W, GPU_SM_CLOCK_MHZ):
            values = self.series.get(key)
            out[f"{key}_mean"] = statistics.fmean(values) if values else None
        return out
