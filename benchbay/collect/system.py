"""A background sampler of CPU utilisation (this process and its children, psutil) and of the
GPU's utilisation, power and clocks (NVML), at a fixed interval during the measured steps."""

from __future__ import annotations

import math
import statistics
import threading
import time

import psutil

from benchbay.analysis.stats import coefficient_of_variation
from benchbay.collect import nvml


def tree_cpu_seconds(proc: psutil.Process) -> float:
    """User + system CPU seconds of ``proc`` and its live children (e.g. DataLoader workers)."""
    total = sum(proc.cpu_times()[:2])
    for child in proc.children(recursive=True):
        try:
            total += sum(child.cpu_times()[:2])
        except psutil.Error:
            pass
    return total


class SystemSampler:
    def __init__(self, gpu_index: int | None, interval_s: float = 0.2):
        self.gpu_index = gpu_index
        self.interval_s = interval_s
        self.series: dict[str, list[float]] = {"cpu_util_t": [], "cpu_util": []}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Idempotent; a sampler never started stops without error."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def __enter__(self) -> SystemSampler:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _run(self) -> None:
        proc = psutil.Process()
        start = last_t = time.perf_counter()
        last_cpu = tree_cpu_seconds(proc)
        while not self._stop.wait(self.interval_s):
            now, cpu = time.perf_counter(), tree_cpu_seconds(proc)
            # percent of one core, as top shows it: 200% = two cores busy
            self.series["cpu_util"].append(100.0 * (cpu - last_cpu) / max(now - last_t, 1e-9))
            self.series["cpu_util_t"].append(now - start)
            last_t, last_cpu = now, cpu
            if self.gpu_index is not None:
                for key, value in nvml.sample(self.gpu_index).items():
                    self.series.setdefault(key, []).append(value)

    def summary(self) -> dict[str, float | None]:
        util = self.series["cpu_util"]
        mean = statistics.fmean(util) if util else None
        cv = coefficient_of_variation(util)
        out = {"cpu_util_mean": mean, "cpu_util_cv": None if math.isnan(cv) else cv}
        for key in ("gpu_util", "gpu_power_w", "gpu_sm_clock_mhz"):
            values = self.series.get(key)
            out[f"{key}_mean"] = statistics.fmean(values) if values else None
        return out
