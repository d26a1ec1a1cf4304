"""What the store keeps of one point and repeat (one line of ``records.jsonl``), and the statuses a
point can end in. Both are stated here once: the runner builds records, the launchers report
statuses, the reports, ``compare`` and ``gate`` read them."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal


class Status(StrEnum):
    """How a point ended, worst first: a point of several ranks ends as its worst rank."""

    OOM = "oom"
    ERROR = "error"
    DIVERGED = "diverged"  # a non-finite loss
    CRASH = "crash"  # the process died without a result (exit code or signal)
    TIMEOUT = "timeout"
    SKIPPED = "skipped"  # excluded by the suite, or not possible on this machine
    OK = "ok"


#: statuses that fail a run (its exit code); an oom of a batch search's probe is a result instead
FAILED = frozenset({Status.OOM, Status.ERROR, Status.DIVERGED, Status.CRASH, Status.TIMEOUT})

SCHEMA = 1


@dataclass(kw_only=True)
class Record:
    """One point and repeat as stored; the JSON has these fields, in this order. Records of older
    runs and imported ones may lack the fields that have defaults."""

    schema: int = SCHEMA
    suite: str
    run_id: str
    point_id: str
    label: str | None = None
    repeat: int = 0
    workload: str
    params: dict[str, Any] = field(default_factory=dict)
    knobs: dict[str, Any] = field(default_factory=dict)
    device: str | None = None  # "cpu" or "cuda": what the point ran on
    status: Status
    reason: str | None = None
    metrics: dict[str, Any] = field(default_factory=dict)  # figures by name (see the README's Results)
    series: dict[str, list[Any]] = field(default_factory=dict)  # per step: step_times_s, losses...
    extra: dict[str, Any] = field(default_factory=dict)  # the workload's and the profiler's own figures
    world_size: int = 1
    nnodes: int = 1
    launcher: Literal["direct", "torchrun"] | None = None
    ranks: list[dict[str, Any]] = field(default_factory=list)  # each rank's own figures
    env: dict[str, Any] = field(default_factory=dict)  # the machine's fingerprint (benchbay.collect.env)
    health: dict[str, Any] = field(default_factory=dict)  # the machine while it ran (benchbay.collect.health)
    started_at: str | None = None
    duration_s: float | None = None

    def __post_init__(self) -> None:
        self.status = Status(self.status)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Record:
        """A stored record (fields this class does not know are not kept: read the JSON for them)."""
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data})

    @property
    def name(self) -> str:
        return self.label or self.point_id

    @property
    def failed(self) -> bool:
        """True when the point fails the run: an oom of a batch search's probe does not."""
        return self.status in FAILED and not (self.status == Status.OOM and "search_group" in self.extra)
