"""What a suite is, once read: its typed configs (steps, devices, batch search, the suite) and its
expansion into sweep points. Reading and checking a suite file: benchbay.suite."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal

from benchbay import knobs as knob_table
from benchbay.store import MANIFEST, SAFE_NAME, point_id, read_manifest
from benchbay.suite.tune import Tune
from benchbay.workloads import registry


@dataclass(frozen=True)
class Problem:
    file: str
    key: str
    expected: str

    def __str__(self) -> str:
        return f"{self.file}: {self.key}: {self.expected}"


class SuiteError(ValueError):
    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("invalid suite:\n" + "\n".join(f"  {p}" for p in problems))


@dataclass(frozen=True)
class Steps:
    warmup: int = 3
    measure: int = 10
    #: 'all' = every measured step; 'auto' = from where step times stop trending; [a, b) = step indices
    steady: Literal["all", "auto"] | tuple[int, int] = "all"
    #: stop measuring once the measured steps took this many seconds, after MIN_BUDGETED_STEPS of
    #: them: a step that decoding slows to 40 s is measured over 3 steps, not 16
    max_measure_s: float | None = None


#: the fewest measured steps a time budget leaves: a median and a spread need a few
MIN_BUDGETED_STEPS = 3


@dataclass(frozen=True)
class Devices:
    type: Literal["auto", "cpu", "cuda"] = "auto"
    nproc: int = 1
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str = "127.0.0.1:29400"
    torchrun: bool = False  # launch a single process through torchrun too


@dataclass(frozen=True)
class Search:
    """Largest feasible value of ``knob`` per configuration: doubling from min, then bisection."""

    knob: str = "mbs"
    min: int = 1
    max: int = 256
    headroom_gib: float | None = None  # also require peak reserved <= device memory - headroom
    zero_retries: bool = False  # also require no allocator retries
    step: int = 1  # probe multiples of step only (min and max are multiples too)
    # on CUDA, re-run the edges with the allocator's history recorded: each costs a whole point
    memory_snapshots: bool = True


@dataclass(frozen=True)
class Point:
    index: int
    label: str | None
    workload: str
    params: dict[str, Any]
    knobs: dict[str, Any]
    point_id: str
    excluded: str | None = None  # reason, when an exclude rule matched


TOLERANCE_KEYS = ("rtol", "atol", "window")  # equivalent_tolerance: the loss check's, in a suite and stored
DEVICE_KEYS = {"cpu", "cuda"}
#: workload params that name data on disk (the decode workload's LeRobot dataset): they must exist
PATH_PARAMS = ("root",)


def per_device(value: Any) -> bool:
    """Whether a param's value is given per device type: ``{cpu: tiny, cuda: real}``."""
    return isinstance(value, dict) and bool(value) and set(value) <= DEVICE_KEYS


def card_class(key: Any) -> bool:
    """Whether ``key`` names a card memory class: a number of GB > 0 (24, 40, 80, 141)."""
    return isinstance(key, (int, float)) and not isinstance(key, bool) and math.isfinite(key) and key > 0


def per_card(value: Any) -> bool:
    """Whether a CUDA value is given per card memory class: ``{24: small, 80: mid, 141: real}``."""
    return isinstance(value, dict) and bool(value) and all(card_class(k) for k in value)


def by_card_memory(choices: Mapping[float, Any], memory_gb: float | None) -> Any:
    """The value of ``choices`` (card memory class in GB -> value) for a GPU of ``memory_gb`` GB:
    the entry of the largest class not above the card's memory. GB are 10^9 bytes, as cards are
    sold and as NVML reads their total (a "24 GB" RTX 4090 reads 25.8, an "80 GB" A100 85.9, a
    "141 GB" H200 150.8), so a card lands in the class it is sold as. A card smaller than every
    class, or one whose memory is unknown (None: a Slurm login node does not see the job's GPUs),
    takes the smallest class's entry: entries grow with the card, the smallest fits the most."""
    fitting = [gb for gb in choices if memory_gb is not None and gb <= memory_gb]
    return choices[max(fitting) if fitting else min(choices)]


def card_choice(memory_gb: float | None, classes: list[float]) -> str:
    """The line a sweep on CUDA prints when its params are given per card memory class."""
    chosen = by_card_memory({gb: gb for gb in classes}, memory_gb)
    card = "GPU memory unknown" if memory_gb is None else f"a {memory_gb:.1f} GB GPU"
    rule = "the largest class not above the card" if memory_gb is not None and memory_gb >= chosen else "the smallest"
    return (f"{card}: params given per card memory class ({', '.join(f'{gb:g}' for gb in classes)} GB) "
            f"take {rule}: {chosen:g} GB")


def for_device(params: dict[str, Any], device: str, memory_gb: float | None = None) -> dict[str, Any]:
    """A param given per device type ({cpu: tiny, cuda: real}) takes the value for ``device``; one
    that names no value for ``device`` is left out (the workload's default holds). On CUDA the value
    may be given per card memory class ({cuda: {24: tiny, 141: real}}): ``by_card_memory`` picks
    the entry for a card of ``memory_gb`` GB."""
    out = {}
    for key, value in params.items():
        if per_device(value):
            if device not in value:
                continue
            value = value[device]
            if device == "cuda" and per_card(value):
                value = by_card_memory(value, memory_gb)
        out[key] = value
    return out


def card_classes(params: dict[str, Any]) -> set[float]:
    """The card memory classes (GB) that ``params`` name."""
    return {gb for value in params.values() if per_device(value) and per_card(value.get("cuda"))
            for gb in value["cuda"]}


@dataclass
class Suite:
    name: str
    workload: str
    path: str = "<suite>"
    description: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    knobs: dict[str, Any] = field(default_factory=dict)
    points: list[dict[str, Any]] = field(default_factory=list)
    grid: dict[str, list[Any]] = field(default_factory=dict)
    zip: dict[str, list[Any]] = field(default_factory=dict)
    exclude: list[dict[str, Any]] = field(default_factory=list)
    search: Search | None = None
    steps: Steps = Steps()
    repeats: int = 1
    timeout: float = 600.0
    compile_cache: str = "point"  # COMPILE_CACHES
    devices: Devices = Devices()
    breakdown: list[str] = field(default_factory=list)
    equivalent: list[list[str]] = field(default_factory=list)  # groups of labels whose losses should match
    equivalent_tolerance: dict[str, float] = field(default_factory=dict)  # their check's rtol, atol and window
    gate: list[str] = field(default_factory=list)
    profile: list[str] = field(default_factory=list)  # labels of points to run under the profiler
    price_per_gpu_hour: float | None = None  # the tables' cost per 1M samples (benchbay.analysis.cost)
    tune: Tune | None = None  # what `benchbay tune` searches (benchbay.tune)
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def world_size(self) -> int:
        return self.devices.nproc * self.devices.nnodes

    @property
    def point_labels(self) -> list[str]:
        return _labels(self.points)

    def card_classes(self) -> list[float]:
        """The card memory classes (GB) that the suite's params name, the points' own included."""
        own = [_workload_node(p["workload"]).get("params") or {} for p in self.points if "workload" in p]
        return sorted(set().union(*(card_classes(params) for params in [self.params, *own])))

    def expand(self, device: str = "cpu", memory_gb: float | None = None) -> list[Point]:
        """Every sweep point for a device type (and, on CUDA, a card of ``memory_gb`` GB: see
        ``for_device``): explicit points x grid product x zipped axes, excludes marked. A point may
        name its own workload (``workload: {name, params}``)."""
        grid_keys = list(self.grid)
        zip_rows = [dict(zip(self.zip, row, strict=True)) for row in zip(*self.zip.values(), strict=True)] \
            if self.zip else [{}]
        out: list[Point] = []
        for explicit in self.points or [{}]:
            explicit = dict(explicit)
            label = explicit.pop("label", None)
            workload, params = self.workload, self.params
            if "workload" in explicit:
                own = _workload_node(explicit.pop("workload"))
                workload, params = own["name"], own.get("params", {})
            params = for_device(params, device, memory_gb)
            defaults = knob_table.defaults_for(registry.declaration(workload).with_params(params))
            own_knobs = {k: v for k, v in self.knobs.items() if k in defaults}  # suite knobs it understands
            for values in itertools.product(*(self.grid[k] for k in grid_keys)):
                for zipped in zip_rows:
                    varied = {**dict(zip(grid_keys, values, strict=True)), **zipped}
                    knobs = {**defaults, **own_knobs, **explicit, **varied}
                    # a point without a label is named by its knobs (never by its hash in errors and tables)
                    named = varied if label else {**explicit, **varied}
                    full_label = " ".join(filter(None, [label, *(f"{k}={v}" for k, v in named.items())])) or None
                    out.append(Point(len(out), full_label, workload, params, knobs,
                                     point_id(workload, params, knobs, self.world_size),
                                     excluded_by(self.exclude, knobs)))
        return out


@dataclass(frozen=True, kw_only=True)
class SuiteMeta:
    """What analysis (the report, the cost columns) reads of a suite: of the suite being run
    (``of``), or of a stored run's, parsed from its manifest's ``suite_as_run`` (``from_raw``). A
    stored suite is not checked again into a ``Suite``: that imports the workload it names, and
    reading results never runs code that they name."""

    name: str
    description: str = ""
    breakdown: list[str] = field(default_factory=list)  # labels in order: the optimisation breakdown
    search: Search | None = None
    equivalent: list[list[str]] = field(default_factory=list)
    equivalent_tolerance: dict[str, float] = field(default_factory=dict)
    price_per_gpu_hour: Any = None  # checked where read (analysis.cost.prices): a stored one is untrusted
    gate: list[str] = field(default_factory=list)  # thresholds, parsed (and refused) where gated
    point_labels: list[str] = field(default_factory=list)  # sweep.points' labels: the tables' order

    @classmethod
    def of(cls, suite: Suite) -> SuiteMeta:
        return cls(**{f.name: getattr(suite, f.name) for f in fields(cls)})

    @classmethod
    def from_raw(cls, raw: Any, source: str = "<manifest>") -> SuiteMeta:
        """A suite's mapping as a manifest keeps it, written by any version: absent keys take their
        defaults; a key of the wrong type (a tampered manifest) is a ValueError naming ``source``."""
        check = _StoredCheck(source)
        raw = check.mapping(raw, "suite_as_run") or {}
        sweep = check.mapping(raw.get("sweep"), "suite_as_run.sweep") or {}
        search = check.mapping(sweep.get("search"), "suite_as_run.sweep.search")
        known = {f.name for f in fields(Search)}
        if search is not None:
            search = {k: v for k, v in search.items() if k in known}
            for key, value in search.items():
                check.typed(value, f"suite_as_run.sweep.search.{key}", _SEARCH_TYPES[key])
        name, tolerance = raw.get("name", ""), "suite_as_run.equivalent_tolerance"
        if "name" in raw:
            check.safe_name(name, "suite_as_run.name")
        return cls(name=name, description=check.typed(raw.get("description") or "", "suite_as_run.description", "text"),
                   breakdown=check.labels(raw.get("breakdown"), "suite_as_run.breakdown"),
                   search=None if search is None else Search(**search),
                   equivalent=[check.labels(group, f"suite_as_run.equivalent[{i}]") for i, group in
                               enumerate(check.typed(raw.get("equivalent") or [], "suite_as_run.equivalent", "list"))],
                   equivalent_tolerance=check.tolerance(raw.get(tolerance[13:]), tolerance),
                   price_per_gpu_hour=raw.get("price_per_gpu_hour"),
                   gate=check.labels(raw.get("gate"), "suite_as_run.gate"),
                   point_labels=_labels(sweep.get("points") or []))

    @classmethod
    def of_run(cls, run: Path) -> SuiteMeta:
        """A stored run's suite, from its manifest (the defaults where it keeps none)."""
        return cls.from_raw(read_manifest(run).get("suite_as_run") or {}, str(Path(run) / MANIFEST))

    @property
    def batch_knob(self) -> str:
        """The knob the batch-size sections read: the search's, else the one a search takes by default."""
        return (self.search or Search()).knob


#: what each stored sweep.search key must be: a tampered one reached arithmetic in the tables
_SEARCH_TYPES = {"knob": "text", "min": "integer", "max": "integer", "step": "integer", "headroom_gib": "number",
                 "zero_retries": "boolean", "memory_snapshots": "boolean"}
_IS = {"text": lambda v: isinstance(v, str), "list": lambda v: isinstance(v, list),
       "boolean": lambda v: isinstance(v, bool),
       "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
       "number": lambda v: v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)
                                         and math.isfinite(v))}


@dataclass(frozen=True)
class _StoredCheck:
    """The types of a stored suite's keys, checked where read: a manifest is untrusted."""

    source: str

    def fail(self, key: str, expected: str) -> ValueError:
        return ValueError(f"{self.source}: {key}: expected {expected}")

    def typed(self, value: Any, key: str, kind: str) -> Any:
        if not _IS[kind](value):
            raise self.fail(key, f"a {kind}" if kind != "integer" else "an integer")
        return value

    def mapping(self, value: Any, key: str) -> Mapping[str, Any] | None:
        if value is not None and not isinstance(value, Mapping):
            raise self.fail(key, "a mapping")
        return value

    def tolerance(self, value: Any, key: str) -> dict[str, float]:
        """The loss check's rtol, atol (numbers >= 0) and window (steps >= 1); other keys are dropped."""
        kept = {k: v for k, v in (self.mapping(value, key) or {}).items() if k in TOLERANCE_KEYS}
        for k, v in kept.items():
            if k == "window" and not (_IS["integer"](v) and v >= 1):
                raise self.fail(f"{key}.{k}", "an integer >= 1")
            if k != "window" and (v is None or not _IS["number"](v) or v < 0):
                raise self.fail(f"{key}.{k}", "a number >= 0")
        return kept

    def labels(self, value: Any, key: str) -> list[str]:
        if value is None:
            return []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(key, "a list of strings")
        return list(value)

    def safe_name(self, value: Any, key: str) -> str:
        if not isinstance(value, str) or not SAFE_NAME.fullmatch(value):
            raise self.fail(key, "a suite name (letters, digits, '.', '_' and '-')")
        return value


def _labels(points: Any) -> list[str]:
    """The labels of a suite's explicit points, in order (a stored suite's points are unchecked)."""
    return [p["label"] for p in points if isinstance(p, Mapping) and isinstance(p.get("label"), str)] \
        if isinstance(points, list) else []


def _workload_node(node: str | dict[str, Any]) -> dict[str, Any]:
    return {"name": node} if isinstance(node, str) else node


def excluded_by(rules: list[dict[str, Any]], knobs: dict[str, Any]) -> str | None:
    for i, rule in enumerate(rules):
        if all(knobs.get(k) == v for k, v in rule.items()):
            return f"excluded by sweep.exclude[{i}] {rule}"
    return None


