"""Points run on this machine: each in a fresh process (a torchrun group for several), under a
check of the machine's health (``benchbay.collect.health``)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from benchbay.collect import nvml
from benchbay.collect.health import HealthCheck, gpu_handles
from benchbay.launch import process
from benchbay.launch.base import DeviceType, Launch, Outcome, PointSpec


@dataclass(frozen=True)
class LocalLauncher:
    """Each point on this machine, watched by a ``HealthCheck`` (its record's ``health``)."""

    launch: Launch = field(default_factory=Launch)

    def device(self, requested: str) -> DeviceType:
        """The device type points run on; ValueError when the suite asks for more GPUs than this
        machine has (``validate`` cannot know: a suite may be checked on another host). CPU ranks
        may share cores (a sharding test of 4 ranks on a laptop): the suite's range bounds them."""
        import torch

        device = "cpu" if requested == "cpu" or requested == "auto" and not torch.cuda.is_available() else "cuda"
        gpus = torch.cuda.device_count() if device == "cuda" else 0
        if device == "cuda" and self.launch.nproc > max(gpus, 1):  # one rank per GPU
            raise ValueError(f"devices.nproc: at most the {gpus} GPU(s) of this machine, got {self.launch.nproc}")
        return device

    def memory_gb(self, device: DeviceType) -> float | None:
        """The smallest total memory of the GPUs a point runs on, in GB (10^9 bytes), as NVML reads it
        (asking CUDA would create a context in the runner); None on the CPU or without NVML."""
        if device != "cuda" or (lib := nvml.library()) is None:
            return None
        totals = []
        for handle in gpu_handles(lib, self.launch.nproc):
            try:
                totals.append(lib.nvmlDeviceGetMemoryInfo(handle).total / 1e9)
            except Exception:  # not readable on this GPU
                pass
        return min(totals) if totals else None

    @contextmanager
    def scratch(self, run: Path) -> Iterator[Path]:
        """A temporary folder, deleted after the sweep: the records keep what matters of each
        point's spec, result and log."""
        with tempfile.TemporaryDirectory(prefix="benchbay-", ignore_cleanup_errors=True) as folder:
            yield Path(folder)

    def run(self, spec: PointSpec, workdir: Path) -> Outcome:
        with HealthCheck(gpus=self.launch.nproc if spec.device == "cuda" else 0) as check:
            outcome = process.run_point(spec, workdir, self.launch)
        outcome.health = check.result()
        return outcome
