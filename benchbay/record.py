"""What the store keeps of one point and repeat (one line of ``records.jsonl``), and the statuses a
point can end in. Both are stated here once: the runner builds records, the launchers report
statuses, the reports, ``compare`` and ``gate`` read them."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import sys
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
#: in ``extra`` of a record a Slurm node measured: the machine key of the host that submitted it
SUBMITTED_FROM = "submitted_from"
#: the figure of ``extra`` that is a data loader's own throughput over its measured window (the
#: decode workload's): a loader's samples/s is what it delivered (benchbay.runner.derived_metrics)
DELIVERED_RATE = "loader_samples_per_s"
#: the names benchbay writes under ``metrics`` and ``series``: a constant for each the code spells
#: out, by group as ``FIGURES`` lists them (the stored name is the value: never rename one)
# the step timer
STEP_TIME_S = "step_time_s"
STEP_TIME_MEAN_S = "step_time_mean_s"
STEP_TIME_P10_S = "step_time_p10_s"
STEP_TIME_P90_S = "step_time_p90_s"
STEP_TIME_CV = "step_time_cv"
# the worker
BUILD_S = "build_s"
FIRST_STEP_S = "first_step_s"
WARMUP_STEPS = "warmup_steps"
MEASURED_STEPS = "measured_steps"
SAMPLES_PER_STEP = "samples_per_step"
FLOPS_PER_SAMPLE = "flops_per_sample"
DATA_WAIT_S = "data_wait_s"
DATA_WAIT_SHARE = "data_wait_share"
LOADER_S = "loader_s"
# the runner's throughput
SAMPLES_PER_S = "samples_per_s"
SAMPLES_PER_S_PER_GPU = "samples_per_s_per_gpu"
MFU = "mfu"
PEAK_FLOPS = "peak_flops"
# memory
PEAK_MEM_ALLOCATED_GIB = "peak_mem_allocated_gib"
PEAK_MEM_RESERVED_GIB = "peak_mem_reserved_gib"
ALLOC_RETRIES = "alloc_retries"
DEVICE_MEM_TOTAL_GIB = "device_mem_total_gib"
NVML_MEM_USED_GIB = "nvml_mem_used_gib"
HOST_RSS_GIB = "host_rss_gib"
PEAK_HOST_RSS_GIB = "peak_host_rss_gib"
#: a command's probe: host seconds a step inside its hook (what it adds to a step on the host)
PROBE_HOST_S = "probe_host_s"
#: a command's stop: seconds from the first signal (SIGINT) to its process group gone, once its steps were in
COMMAND_STOP_S = "command_stop_s"
#: the ranks a command launched itself (torchrun in its argv), as its probe saw them: its samples/s are all of theirs
COMMAND_RANKS = "command_ranks"
#: a command's steps whose optimizer step its GradScaler skipped (inf or NaN gradients), as its probe saw them
SKIPPED_STEPS = "skipped_steps"
MEM_ALLOCATED_GIB = "mem_allocated_gib"
MEM_RESERVED_GIB = "mem_reserved_gib"
# the system sampler
CPU_UTIL_MEAN = "cpu_util_mean"
CPU_UTIL_CV = "cpu_util_cv"
CHILD_CPU_UTIL_MEAN = "child_cpu_util_mean"
GPU_UTIL_MEAN = "gpu_util_mean"
# energy
ENERGY_J_PER_SAMPLE = "energy_j_per_sample"
ENERGY_WATTS = "energy_watts"
# update and compute fidelity
UPDATE_APPLIED_SHARE = "update_applied_share"
UPDATE_APPLIED_SHARE_SE = "update_applied_share_se"
UPDATE_LOST_SHARE = "update_lost_share"
COMPUTE_GRADIENT_COSINE = "compute_gradient_cosine"
# the launchers
STEP_TIME_RANK_SPREAD = "step_time_rank_spread"
SIGNAL = "signal"
# older runs'
COMPILE_TIME_S = "compile_time_s"
# the series
STEP_TIMES_S = "step_times_s"
LOSSES = "losses"
DATA_WAITS_S = "data_waits_s"
OWN_STEP_S = "own_step_s"  # a command's own step clock (its series_regex): the report checks step times by it
CPU_UTIL = "cpu_util"
CPU_UTIL_T = "cpu_util_t"
CHILD_CPU_UTIL = "child_cpu_util"
GPU_UTIL = "gpu_util"
GPU_POWER_W = "gpu_power_w"
GPU_SM_CLOCK_MHZ = "gpu_sm_clock_mhz"

#: every name benchbay writes under ``metrics`` and ``series`` (by line: the step timer; the worker;
#: the runner's throughput; memory; the system sampler; energy; update and compute fidelity; the launchers; older
#: runs'; then the series), those the code names once spelled here. A flat frame spreads both beside the knobs
#: (benchbay.analysis.frame): a frame without ``knob_names`` tells its knobs from them by these names
#: (benchbay.analysis.points)
FIGURES = frozenset({
    STEP_TIME_S, STEP_TIME_MEAN_S, STEP_TIME_P10_S, STEP_TIME_P90_S, STEP_TIME_CV,
    BUILD_S, FIRST_STEP_S, WARMUP_STEPS, MEASURED_STEPS, SAMPLES_PER_STEP, FLOPS_PER_SAMPLE, "frozen_flops_per_sample",
        DATA_WAIT_S, DATA_WAIT_SHARE, LOADER_S, "oom_step", "error_step",
    SAMPLES_PER_S, SAMPLES_PER_S_PER_GPU, MFU, PEAK_FLOPS,
    PEAK_MEM_ALLOCATED_GIB, PEAK_MEM_RESERVED_GIB, ALLOC_RETRIES, "num_ooms", DEVICE_MEM_TOTAL_GIB, NVML_MEM_USED_GIB,
        HOST_RSS_GIB, PEAK_HOST_RSS_GIB, MEM_ALLOCATED_GIB, MEM_RESERVED_GIB,
    CPU_UTIL_MEAN, CPU_UTIL_CV, CHILD_CPU_UTIL_MEAN, GPU_UTIL_MEAN, "gpu_power_w_mean", "gpu_sm_clock_mhz_mean",
    ENERGY_J_PER_SAMPLE, ENERGY_WATTS,
    UPDATE_APPLIED_SHARE, UPDATE_APPLIED_SHARE_SE, UPDATE_LOST_SHARE, "fidelity_sampled_elements",
        COMPUTE_GRADIENT_COSINE, "compute_gradient_error", "compute_sampled_tensors",
    STEP_TIME_RANK_SPREAD, "exit_code", SIGNAL, PROBE_HOST_S, COMMAND_RANKS, SKIPPED_STEPS, COMMAND_STOP_S,
    COMPILE_TIME_S,
    STEP_TIMES_S, LOSSES, "grad_norms", DATA_WAITS_S, CPU_UTIL, CPU_UTIL_T, CHILD_CPU_UTIL, GPU_UTIL, GPU_POWER_W,
        GPU_SM_CLOCK_MHZ,
})


#: the figures of ``metrics`` that are words, not numbers: the signal that killed a point's process
WORD_FIGURES = frozenset({SIGNAL})


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
    # both name folders (a profile's, a memory snapshot's): a stored id must not climb out of its run
    pid = data["point_id"]
    if not isinstance(pid, str) or pid in ("", ".", "..") or len(pid) > 128 or set(pid) & set("/\\\0"):
        raise ValueError(f"point_id: expected one folder's name (no '/', not '..'), got {_kind(pid)}")
    if isinstance(data.get("repeat"), bool) or not isinstance(data.get("repeat", 0), int) or data.get("repeat", 0) < 0:
        raise ValueError(f"repeat: expected a whole number >= 0, got {_kind(data.get('repeat'))}")
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
    # an integer must fit a float: 10**400 passed here and overflowed in compare and the gate
    return value is None or isinstance(value, int) and not isinstance(value, bool) and abs(value) <= _MAX_FLOAT_INT


_MAX_FLOAT_INT = int(sys.float_info.max)


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
