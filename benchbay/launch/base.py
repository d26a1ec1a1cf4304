"""What every launcher takes and gives: the processes a point spans (``Launch``), the point as the
worker reads it (``PointSpec``, written as ``spec.json``), what one rank's worker gives back
(``WorkerResult``, written as ``result.json``), how the point ended (``Outcome``), and the
``Launcher`` protocol (``LocalLauncher``: this machine; ``SlurmLauncher``: a Slurm job)."""

from __future__ import annotations

import dataclasses
import os
import socket
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from benchbay.record import Status
from benchbay.suite.model import Devices, Steps

DeviceType = Literal["cpu", "cuda"]


@dataclass(frozen=True)
class Launch:
    """How many processes a point spans; more than one (or nnodes > 1, or ``torchrun``) goes through
    torchrun."""

    nproc: int = 1
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str = "127.0.0.1:29400"
    torchrun: bool = False  # also a single process: to check that the launcher adds no cost

    @classmethod
    def of(cls, devices: Devices) -> Launch:
        return cls(devices.nproc, devices.nnodes, devices.node_rank, devices.rdzv_endpoint, devices.torchrun)

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes

    @property
    def launcher(self) -> Literal["direct", "torchrun"]:
        return "torchrun" if self.torchrun or self.world_size > 1 else "direct"


def rank_env() -> tuple[int, int, int]:
    """rank, world size, local rank; where torchrun did not start this process, a one-process group's
    variables, set in its environment (and a command's, which inherits them) once."""
    if "RANK" not in os.environ:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    rank, world, local = (int(os.environ[k]) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))
    return rank, world, local


@dataclass(frozen=True, kw_only=True)
class PointSpec:
    """One point as its process (``benchbay.launch.entry``, then the worker) reads it from ``spec.json``."""

    workload: str
    params: dict[str, Any]
    knobs: dict[str, Any]
    steps: Steps
    device: DeviceType
    timeout: float
    profile: bool = False  # run under torch.profiler (``benchbay profile``), into profile_dir
    profile_dir: str | None = None
    memory_snapshot: bool = False  # record the allocator's history (a batch search's edges)
    memory_snapshot_dir: str | None = None
    compile_cache_dir: str | None = None  # shared by the run's points; None: a cold cache of its own
    #: when the parent kills the point (its clock, set as it launches): the worker dumps its stacks before
    deadline: float | None = None
    #: a tune's early stop: end the steps once the first measured ones give fewer samples/s per
    #: process than this (benchbay.launch.worker.EARLY_STEPS)
    stop_below: float | None = None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> PointSpec:
        """A spec as ``spec.json`` holds it (``steady`` a JSON list where a range of steps)."""
        steps = dict(data["steps"])
        if isinstance(steps.get("steady"), list):
            steps["steady"] = tuple(steps["steady"])
        return cls(**{**data, "steps": Steps(**steps)})


@dataclass(kw_only=True)
class WorkerResult:
    """What one rank's worker measured (or why it could not), as its result file holds it."""

    status: Status
    reason: str | None = None
    rank: int = 0
    world_size: int = 1
    metrics: dict[str, Any] = field(default_factory=dict)
    series: dict[str, list[Any]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    traceback: str | None = None
    duration_s: float | None = None  # the worker's own run, imports aside

    def __post_init__(self) -> None:
        self.status = Status(self.status)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> WorkerResult:
        return cls(**data)


@dataclass(kw_only=True)
class Outcome:
    """How a point ended, from its result files (merged over its ranks) or from how its processes
    or job ended."""

    status: Status
    reason: str | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    series: dict[str, list[Any]] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)
    ranks: list[dict[str, Any]] = field(default_factory=list)  # each rank's own figures
    traceback: str | None = None
    env: dict[str, Any] | None = None  # the fingerprint of the node that ran it, where not this machine
    health: dict[str, Any] = field(default_factory=dict)  # this machine while it ran, where checked

    @classmethod
    def from_result(cls, result: WorkerResult) -> Outcome:
        """One rank's result as the point's outcome."""
        return cls(status=result.status, reason=result.reason, metrics=dict(result.metrics),
                   series=dict(result.series), extra=dict(result.extra), traceback=result.traceback)


class Launcher(Protocol):
    """Runs points: chosen once per sweep, it knows where a point runs and where its scratch goes."""

    launch: Launch

    def device(self, requested: str) -> DeviceType:
        """The device type points run on, for the suite's ``devices.type`` (may be "auto")."""
        ...

    def scratch(self, run: Path) -> AbstractContextManager[Path]:
        """The folder for the points' spec, result and log files during a sweep of ``run``."""
        ...

    def run(self, spec: PointSpec, workdir: Path) -> Outcome:
        """Run one point in ``workdir``; never raises for a failed point (KeyboardInterrupt stops it)."""
        ...
