"""Points run on this machine: each in a fresh process (a torchrun group for several), under a
check of the machine's health (``benchbay.collect.health``)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from benchbay.collect.health import HealthCheck
from benchbay.launch import process
from benchbay.launch.base import DeviceType, Launch, Outcome, PointSpec


@dataclass(frozen=True)
class LocalLauncher:
    """Each point on this machine, watched by a ``HealthCheck`` (its record's ``health``)."""

    launch: Launch = field(default_factory=Launch)

    def device(self, requested: str) -> DeviceType:
        if requested != "auto":
            return "cuda" if requested == "cuda" else "cpu"
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"

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
