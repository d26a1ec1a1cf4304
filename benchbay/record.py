"""What the store keeps of one point and repeat (one line of ``records.jsonl``), and the statuses a
point can end in. Both are stated here once: the runner builds records, the launchers report
statuses, the reports, ``compare`` and ``gate`` read them."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import types
import typing
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

#: the stored schema: 2 writes strict JSON (a non-finite number is null); 1 (or none: older runs,
#: imports) wrote bare NaN and Infinity. ``migrate`` reads every version as today's.
SCHEMA = 2
#: the key of ``extra`` naming the batch search (its configuration's id) a record is a probe of:
#: in ``extra``, as records have always stored it (``Record.search_group``)
SEARCH_GROUP = "search_group"
#: the key of ``extra`` naming the knob that search varies (mbs unless the suite says)
SEARCH_KNOB = "search_knob"
#: the figure of ``extra`` that is a data loader's own throughput over its measured window (the
#: decode workload's): a loader's samples/s is what it delivered (benchbay.runner.derived_metrics)
DELIVERED_RATE = "loader_samples_per_s"
#: the names benchbay writes under ``metrics`` and ``series`` (by line: the step timer; the worker;
#: the runner's throughput; memory; the system sampler; energy; update and compute fidelity; the launchers; older
#: runs'; then the series). A flat frame spreads both beside the knobs (benchbay.analysis.frame): a
#: frame without ``knob_names`` tells its knobs from them by these names (benchbay.analysis.points)
FIGURES = frozenset("""
    step_time_s step_time_mean_s step_time_p10_s step_time_p90_s step_time_cv
    build_s first_step_s warmup_steps measured_steps samples_per_step flops_per_sample frozen_flops_per_sample
        data_wait_s data_wait_share loader_s oom_step error_step
    samples_per_s samples_per_s_per_gpu mfu peak_flops
    peak_mem_allocated_gib peak_mem_reserved_gib alloc_retries num_ooms device_mem_total_gib nvml_mem_used_gib
        host_rss_gib peak_host_rss_gib mem_allocated_gib mem_reserved_gib
    cpu_util_mean cpu_util_cv child_cpu_util_mean gpu_util_mean gpu_power_w_mean gpu_sm_clock_mhz_mean
    energy_j_per_sample energy_watts
    update_applied_share update_applied_share_se update_lost_share fidelity_sampled_elements
        compute_gradient_cosine compute_gradient_error compute_sampled_tensors
    step_time_rank_spread exit_code signal
    compile_time_s
    step_times_s losses grad_norms data_waits_s cpu_util cpu_util_t child_cpu_util gpu_util gpu_power_w
        gpu_sm_clock_mhz
""".split())


#: the figures of ``metrics`` that are words, not numbers: the signal that killed a point's process
WORD_FIGURES = frozenset({"signal"})


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
    metrics: dict[str, Any] = field(default_factory=dict)  # figures by name (see docs/guide.md's Results)
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
        return finite(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, data: Any) -> Record:
        """A stored record (fields this class does not know are not kept: read the JSON for them);
        ValueError, saying what is wrong, for one that is not a record of a schema this reads."""
        return cls.from_valid(validate(data))

    @classmethod
    def from_valid(cls, data: dict[str, Any]) -> Record:
        """A record of JSON that ``validate`` has passed already (``store.read_records``' records):
        not checked twice."""
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls) if f.name in data})

    @property
    def name(self) -> str:
        return self.label or self.point_id

    @property
    def search_group(self) -> str | None:
        """The batch search this record is a probe of (its configuration's id), or None."""
        return self.extra.get(SEARCH_GROUP)

    @property
    def failed(self) -> bool:
        """True when the point fails the run: an oom of a batch search's probe does not."""
        return self.status in FAILED and not (self.status == Status.OOM and self.search_group is not None)


def finite(value: Any) -> Any:
    """``value`` with every non-finite float as None: strict JSON has no NaN or Infinity."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def migrate(data: dict[str, Any]) -> dict[str, Any]:
    """A stored record of an older schema as today's: the one place older versions are read."""
    if data.get("schema", 1) == 1:
        data = {**finite(data), "schema": 2}
    return data


def validate(data: Any) -> dict[str, Any]:
    """The JSON of a stored record, migrated to today's schema and checked against ``Record``'s
    fields and types; ValueError saying what does not fit."""
    if not isinstance(data, dict):
        raise ValueError(f"expected a record (a JSON object), got {_kind(data)}")
    if not isinstance(data.get("schema", 1), int) or not 1 <= data.get("schema", 1) <= SCHEMA:
        raise ValueError(f"schema {data['schema']!r}: this benchbay reads schemas 1 to {SCHEMA} (a newer one "
                         "wrote it?)")
    data = migrate(data)
    fields = dataclasses.fields(Record)
    missing = [f.name for f in fields if f.name not in data and f.default is f.default_factory is dataclasses.MISSING]
    if missing:
        raise ValueError(f"expected a record: it lacks {', '.join(missing)}")
    for f in fields:
        if f.name in data and not _fits(data[f.name], _HINTS[f.name]):
            raise ValueError(f"{f.name}: expected {_describe(_HINTS[f.name])}, got {_kind(data[f.name])}")
    _check_values(data)
    return data


def _check_values(data: dict[str, Any]) -> None:
    """The values inside a record's fields that every reader takes as they are: a figure is a
    finite number (or null), a series a list of them, the machine's fingerprint plain values (or a
    mapping of them: its packages), the start an ISO 8601 time; ValueError naming the first that is not."""
    for name, value in data.get("metrics", {}).items():
        if not (_number(value) or name in WORD_FIGURES and isinstance(value, str)):
            raise ValueError(f"metrics.{name}: expected a finite number or null, got {_kind(value)}")
    for name, values in data.get("series", {}).items():
        if not isinstance(values, list) or not all(map(_number, values)):
            raise ValueError(f"series.{name}: expected a list of finite numbers or nulls, got {_kind(values)}")
    for name, value in data.get("env", {}).items():
        if not (_plain(value) or isinstance(value, dict) and all(map(_plain, value.values()))):
            raise ValueError(f"env.{name}: expected a string, number, boolean or null, got {_kind(value)}")
    try:
        if data.get("started_at") is not None:
            dt.datetime.fromisoformat(data["started_at"])
    except ValueError:
        raise ValueError(f"started_at: expected an ISO 8601 time, got {_kind(data['started_at'])}") from None


def _number(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    return value is None or isinstance(value, int) and not isinstance(value, bool)


def _plain(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))


_HINTS = typing.get_type_hints(Record)
_WORDS = {str: "a string", int: "an integer", float: "a number", dict: "a mapping", list: "a list",
          type(None): "null"}


def _fits(value: Any, hint: Any) -> bool:
    """Whether a JSON value is of a field's type (the outer type of a dict or list: their items are
    the readers' to judge)."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, arg) for arg in typing.get_args(hint))
    if origin is Literal:
        return value in typing.get_args(hint)
    kind = origin or hint
    if kind is Status:
        return isinstance(value, str) and value in set(Status)
    if isinstance(value, bool):
        return False
    return isinstance(value, (int, float) if kind is float else kind)


def _describe(hint: Any) -> str:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return " or ".join(map(_describe, typing.get_args(hint)))
    if typing.get_origin(hint) is Literal or hint is Status:
        return "one of " + ", ".join(map(str, typing.get_args(hint) or list(Status)))
    return _WORDS[typing.get_origin(hint) or hint]


def _kind(value: Any) -> str:
    text = json.dumps(value, default=str)
    return "null" if value is None else f"{type(value).__name__} {text[:40]}"
