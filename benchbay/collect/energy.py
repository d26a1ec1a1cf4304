"""Energy over the measured steps: NVML's total energy counter of the point's GPU (millijoules
since the driver loaded), else RAPL's package counter on a CPU point where
/sys/class/powercap is readable, else nothing and the record says why (``energy_absent``)."""

from __future__ import annotations

import time
from pathlib import Path

from benchbay.collect import Collector, Figures, Window, nvml
from benchbay.record import ENERGY_J_PER_SAMPLE, ENERGY_WATTS

RAPL = Path("/sys/class/powercap")


def _rapl_packages(root: Path) -> list[Path]:
    """The package domains (intel-rapl:N, not their sub-domains) whose counter can be read."""
    zones = []
    for zone in sorted(root.glob("intel-rapl:*")):
        if zone.name.count(":") == 1:
            try:
                int((zone / "energy_uj").read_text())
                zones.append(zone)
            except (OSError, ValueError):
                pass
    return zones


class EnergyMeter(Collector):
    """Joules per sample and mean watts of this process's device over its window; where they came
    from, or why there are none (``extra``)."""

    def __init__(self, cuda_index: int | None, rapl_root: Path = RAPL):
        self.cuda_index = cuda_index
        self.rapl_root = rapl_root
        self._start: tuple[float, float] | None = None
        self._joules: float | None = None
        self._seconds = 0.0
        self.source = "nvml" if cuda_index is not None else "rapl"

    def _read(self) -> float | None:
        """Joules on the counter now (None where it cannot be read)."""
        if self.cuda_index is not None:
            mj = nvml.total_energy_mj(self.cuda_index)
            return None if mj is None else mj / 1e3
        zones = _rapl_packages(self.rapl_root)
        return sum(int((z / "energy_uj").read_text()) for z in zones) / 1e6 if zones else None

    def start(self) -> None:
        joules = self._read()
        self._start = None if joules is None else (joules, time.perf_counter())

    def stop(self) -> None:
        if self._start is None or self._joules is not None:
            return
        joules = self._read()
        if joules is not None and joules >= self._start[0]:  # a RAPL counter that wrapped is dropped
            self._joules, self._seconds = joules - self._start[0], time.perf_counter() - self._start[1]

    def figures(self, window: Window) -> Figures:
        if self._joules is not None:
            metrics = {ENERGY_J_PER_SAMPLE: self._joules / window.samples,
                       ENERGY_WATTS: self._joules / self._seconds} if self._seconds and window.samples else {}
            return Figures(metrics=metrics, extra={"energy_source": self.source})
        what = "NVML's energy counter" if self.source == "nvml" else "RAPL (/sys/class/powercap)"
        return Figures(extra={"energy_absent": f"{what} not readable here"})
