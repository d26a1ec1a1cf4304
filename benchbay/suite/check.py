"""A suite's raw mapping checked into a typed Suite: every problem (file, key path, what was
expected) collected before any is raised, and every number held to a sane range."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from benchbay import knobs as knob_table
from benchbay.analysis.thresholds import parse_threshold
from benchbay.store import BASELINES_DIR, SAFE_NAME
from benchbay.suite import tune as tune_space
from benchbay.suite.model import (
    DEVICE_KEYS,
    PATH_PARAMS,
    TOLERANCE_KEYS,
    Devices,
    Point,
    Problem,
    Search,
    Steps,
    Suite,
    SuiteError,
    card_class,
    per_card,
    per_device,
)
from benchbay.workloads import registry
from benchbay.workloads.base import Workload

#: sane ranges of a suite's numbers: past them a typo (or a hostile file) would grow the process
#: without end (repeats: 1e9 reached 7.3 GB) or start more processes than any host holds
MAX_REPEATS = 1000
MAX_STEPS = 100_000
MAX_TIMEOUT_S = 7 * 24 * 3600.0
MAX_NPROC = 256  # processes on one node
MAX_NNODES = 4096
MAX_SEARCH = 1 << 20
MAX_POINTS = 10_000  # points x grid x zip: a few grid axes of a few dozen values pass it


#: where a point's compiled graphs are cached: "point", cold for each point (its first step is its
#: compile time); "run", shared by the run's points (a later point with the same graphs loads them:
#: cheaper points where compile time is not the question)
COMPILE_CACHES = ("point", "run")

_TOP_KEYS = {"name", "description", "workload", "knobs", "sweep", "steps", "repeats", "timeout", "compile_cache",
             "devices", "breakdown", "gate", "profile", "equivalent", "equivalent_tolerance",
             "price_per_gpu_hour", "tune"}


def from_dict(raw: dict[str, Any], file: str = "<suite>", *, runnable: bool = True) -> Suite:
    """The suite ``raw`` holds, validated; ``runnable=False`` for a suite only read (a report's
    ``--suite``), not run here: a command workload's program need not be on this machine."""
    v = Validator(file, runnable)
    for key in raw:
        if key not in _TOP_KEYS:
            v.error(key, f"a known key: {sorted(_TOP_KEYS)}")
    name = v.typed(raw, "name", str, required=True)
    if name == BASELINES_DIR:  # results/baselines/ holds the baselines, not a suite's runs
        v.error("name", f"a name other than {BASELINES_DIR!r} (the results root's folder of baselines)")
    if name is not None and not SAFE_NAME.fullmatch(name):  # it names the results and reports folders
        v.error("name", f"one path component of letters, digits, '.', '_' and '-', starting with a letter or "
                f"digit, got {name!r}")
    points_have_workloads = bool(sweep_points := (raw.get("sweep") or {}).get("points")) and isinstance(
        sweep_points, list) and all(isinstance(p, dict) and "workload" in p for p in sweep_points)
    if raw.get("workload") is None and points_have_workloads:
        workload_name, params, cls = "", {}, None
    else:
        workload_name, params, cls = v.workload(raw.get("workload"))
    knobs = v.mapping(raw, "knobs")
    sweep = v.mapping(raw, "sweep")
    points, grid, zipped, exclude = v.sweep(sweep, cls, knobs)
    lengths = {len(x) for x in zipped.values() if isinstance(x, list)}
    if len(lengths) > 1:
        v.error("sweep.zip", f"lists of equal length (got lengths {sorted(lengths)})")
    count = max(len(points), 1) * math.prod(len(x) for x in grid.values() if isinstance(x, list)) * max(lengths or {1})
    if count > MAX_POINTS:
        v.error("sweep", f"at most {MAX_POINTS} points (points x grid x zip), got {count}")
    search = v.search(sweep.get("search"), cls)
    steps = v.steps(raw.get("steps", {}))
    devices = v.devices(raw.get("devices", {}))
    repeats = v.positive(raw, "repeats", int, 1, MAX_REPEATS)
    timeout = v.positive(raw, "timeout", (int, float), 600, MAX_TIMEOUT_S)
    price = v.positive(raw, "price_per_gpu_hour", (int, float), None)
    compile_cache = raw.get("compile_cache", "point")
    if compile_cache not in COMPILE_CACHES:
        v.error("compile_cache", f"one of {list(COMPILE_CACHES)}, got {compile_cache!r}")
    breakdown = v.list_of(raw, "breakdown", str)
    labels = {p.get("label") for p in points}
    for i, label in enumerate(breakdown):
        if label not in labels:
            v.error(f"breakdown[{i}]", f"a label of sweep.points ({sorted(x for x in labels if x)}), got {label!r}")
    gate = v.list_of(raw, "gate", str)
    for i, text in enumerate(gate):  # here, not first at `benchbay gate` after validate said valid
        try:
            parse_threshold(text)
        except ValueError as exc:
            v.error(f"gate[{i}]", str(exc))
    description = v.typed(raw, "description", str) or ""
    profile = v.list_of(raw, "profile", str)
    for i, label in enumerate(profile):  # a label no point has would profile nothing, silently
        if label not in labels:
            v.error(f"profile[{i}]", f"a label of sweep.points ({sorted(x for x in labels if x)}), got {label!r}")
    if steps.max_measure_s is not None:
        if profile:  # the profiler's schedule counts the measured steps
            v.error("steps.max_measure_s", "no budget with profile (profiled steps follow a fixed step count)")
        if devices.nproc * devices.nnodes > 1:  # each rank would stop on its own clock, mid-collective
            v.error("steps.max_measure_s", "one process (nproc and nnodes 1): ranks would stop at different steps")
    if cls is not None and cls.name == "command" and devices.nproc * devices.nnodes > 1:
        # each rank's worker would start the whole command once more
        v.error("devices", "nproc and nnodes 1 for a command: it launches its own ranks (torchrun in its argv)")
    equivalent = v.list_of(raw, "equivalent", list)
    for i, group in enumerate(equivalent):  # loss curves that should match
        for j, label in enumerate(group):
            if label not in labels:
                v.error(f"equivalent[{i}][{j}]", f"a label of sweep.points, got {label!r}")
    tolerance = v.mapping(raw, "equivalent_tolerance")  # the report's loss check: atol + rtol * |first|
    for key, value in tolerance.items():
        if key not in TOLERANCE_KEYS:
            v.error(f"equivalent_tolerance.{key}", "rtol, atol or window")
        elif key == "window" and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            v.error("equivalent_tolerance.window", f"an integer >= 1 (steps in each trailing mean), got {value!r}")
        elif not _number(value) or value < 0:
            v.error(f"equivalent_tolerance.{key}", f"a finite number >= 0, got {value!r}")
    tune = None if raw.get("tune") is None else tune_space.check(raw["tune"], cls, knobs, price, v.error)
    if tune is not None and search is not None:
        v.error("tune", "no sweep.search beside it (the tune searches the batch itself)")
    v.raise_if_any()
    suite = Suite(name=name, workload=workload_name, path=file, description=description,
                  params=params, knobs=knobs, points=points, grid=grid, zip=zipped, exclude=exclude, search=search,
                  steps=steps, repeats=repeats, timeout=float(timeout), compile_cache=compile_cache, devices=devices,
                  breakdown=breakdown, equivalent=equivalent, equivalent_tolerance=tolerance, gate=gate,
                  profile=profile,
                  price_per_gpu_hour=None if price is None else float(price), tune=tune, raw=raw)
    if search is None:  # a search collapses points that differ only in the searched knob, on purpose
        v.distinct_points(suite)
    v.raise_if_any()
    return suite



class Validator:
    def __init__(self, file: str, runnable: bool = True):
        self.file, self.runnable = file, runnable
        self.problems: list[Problem] = []

    def error(self, key: str, expected: str) -> None:
        self.problems.append(Problem(self.file, key, expected))

    def raise_if_any(self) -> None:
        if self.problems:
            raise SuiteError(self.problems)

    def typed(self, node: dict, key: str, kind, required: bool = False, prefix: str = ""):
        if key not in node:
            if required:
                self.error(prefix + key, f"required ({_kind_name(kind)})")
            return None
        value = node[key]
        if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
            self.error(prefix + key, f"{_kind_name(kind)}, got {value!r}")
            return None
        return value

    def positive(self, node: dict, key: str, kind, default, most: float = math.inf):
        """A number in (0, most]; NaN and infinity are refused (a timeout of .inf overflowed every point)."""
        value = self.typed(node, key, kind)
        if value is None:
            return default
        if not 0 < value <= most or not math.isfinite(value):
            self.error(key, f"a finite number > 0{'' if most == math.inf else f' and <= {most:g}'}, got {value!r}")
            return default
        return value

    def mapping(self, node: dict, key: str, prefix: str = "") -> dict:
        value = self.typed(node, key, dict, prefix=prefix)
        return value if value is not None else {}

    def list_of(self, node: dict, key: str, kind, prefix: str = "") -> list:
        value = self.typed(node, key, list, prefix=prefix)
        if value is None:
            return []
        good = []
        for i, item in enumerate(value):
            if isinstance(item, kind):
                good.append(item)
            else:
                self.error(f"{prefix}{key}[{i}]", f"{_kind_name(kind)}, got {item!r}")
        return good

    def workload(self, node, where: str = "workload") -> tuple[str, dict, type[Workload] | None]:
        if node is None:
            self.error(where, "required: a registered name "
                       f"({sorted(registry.available())}) or {{name: ..., params: {{...}}}}")
            return "", {}, None
        if isinstance(node, str):
            node = {"name": node}
        if not isinstance(node, dict):
            self.error(where, "a workload name or a mapping with name and params")
            return "", {}, None
        for key in node:  # a misspelt params (parms:) was dropped, and the point ran on defaults
            if key not in ("name", "params"):
                self.error(f"{where}.{key}", "name or params")
        name = self.typed(node, "name", str, required=True, prefix=f"{where}.")
        params = self.mapping(node, "params", prefix=f"{where}.")
        if name is None:
            return "", params, None
        try:
            cls = registry.declaration(name).with_params(params)
        except LookupError as exc:
            self.error(f"{where}.name", str(exc))
            return name, params, None
        if cls.name == "command":
            from benchbay.workloads.command import check

            check(params, lambda key, expected: self.error(key.replace("workload", where, 1), expected),
                  programs=self.runnable)
        for key, value in params.items():
            here = f"{where}.params.{key}"
            if key not in cls.params:
                self.error(here, f"a parameter of {name}: {sorted(cls.params)}")
                continue
            if isinstance(value, dict) and key not in cls.mapping_params:
                if not per_device(value):
                    self.error(here, f"a value, or one per device type {sorted(DEVICE_KEYS)}")
                    continue
                if not self.device_values(value, here):
                    continue
            if not self.param_values(cls, key, value, here):
                continue
            if key in PATH_PARAMS:
                self.existing_paths(value, here)
            elif key in cls.param_values:
                for one in _values(value):
                    if one is not None and one not in cls.param_values[key]:
                        self.error(here, f"one of {list(cls.param_values[key])}, got {one!r}")
        return name, params, cls

    def param_values(self, cls: type[Workload], key: str, value, where: str) -> bool:
        """A param's values are single finite values (an 80,000-element list validated for minutes),
        except a mapping param's and a command's (its own check: argv is a list)."""
        if key in cls.mapping_params or cls.name == "command":
            return True
        for one in _values(value):
            if isinstance(one, (list, dict)) or isinstance(one, float) and not math.isfinite(one):
                self.error(where, f"a single finite value (or one per device type), got {_kind(one)}")
                return False
        return True

    def device_values(self, value: dict, where: str) -> bool:
        """A per-device param's entries: a value each; CUDA's may be one per card memory class
        ({24: small, 141: real}, GB: ``suite.model.by_card_memory``). Whether they are well formed."""
        ok = True
        for device, one in value.items():
            if not isinstance(one, dict):
                continue
            if device != "cuda" or not one:
                self.error(f"{where}.{device}", "a value" + (", or one per card memory class in GB "
                           "({24: ..., 80: ...})" if device == "cuda" else " (the CPU has no card memory classes)")
                           + f", got {one!r}")
                ok = False
                continue
            for gb, entry in one.items():
                if not card_class(gb):
                    self.error(f"{where}.cuda.{gb}", f"a card memory class: a number of GB > 0 (24, 40, 80, 141), "
                               f"got {gb!r}")
                    ok = False
                elif isinstance(entry, (dict, list)):
                    self.error(f"{where}.cuda.{gb}", f"a value, got {entry!r}")
                    ok = False
        return ok

    def existing_paths(self, value, where: str) -> None:
        for path in _values(value):
            if isinstance(path, str) and not Path(path).exists():
                self.error(where, f"an existing path (data on disk), got {path!r}: it does not exist")

    def knobs(self, cls: type[Workload], values: dict, where: str) -> None:
        for key, value in values.items():
            self.knob(cls, key, value, f"{where}.{key}")

    def knob(self, cls: type[Workload], name: str, value, where: str) -> None:
        specs = knob_table.specs_for(cls)
        if name not in specs:
            self.error(where, f"a known knob of {cls.name}: {sorted(specs)}")
            return
        expected = knob_table.check_value(cls, name, value)
        if expected:
            self.error(where, f"{expected}, got {value!r}")
        elif name in _KNOB_MAX and _integer(value) and value > _KNOB_MAX[name]:  # 10**32 validated
            self.error(where, f"an integer <= {_KNOB_MAX[name]}, got {value!r}")

    def sweep(self, sweep: dict, cls: type[Workload] | None, knobs: dict) -> tuple[list, dict, dict, list]:
        """The sweep's points, grid, zip and exclude rules, and the suite's knobs, each checked
        against every workload that receives it."""
        for key in sweep:
            if key not in {"points", "grid", "zip", "exclude", "search"}:
                self.error(f"sweep.{key}", "one of points, grid, zip, exclude, search")
        points = self.list_of(sweep, "points", dict, prefix="sweep.")
        if sweep.get("points") == []:
            self.error("sweep.points", "at least one point (leave points out to run the suite's knobs as one point)")
        grid = self.mapping(sweep, "grid", prefix="sweep.")
        zipped = self.mapping(sweep, "zip", prefix="sweep.")
        exclude = self.list_of(sweep, "exclude", dict, prefix="sweep.")
        classes = [cls] if cls is not None else []
        for i, point in enumerate(points):
            point_cls = cls
            if "workload" in point:
                _, _, point_cls = self.workload(point["workload"], f"sweep.points[{i}].workload")
                classes.append(point_cls)
            if point_cls is not None:
                self.knobs(point_cls, {k: x for k, x in point.items() if k not in ("label", "workload")},
                           f"sweep.points[{i}]")
            if "label" in point and not isinstance(point["label"], str):
                self.error(f"sweep.points[{i}].label", "a string")
            elif "label" in point and not point["label"].isprintable():
                # a newline in a label ends a row of a table and can forge a line of the gate's summary
                self.error(f"sweep.points[{i}].label", f"printable characters only, got {point['label']!r}")
            elif "label" in point and any(p.get("label") == point["label"] for p in points[:i]):
                # a label names one point in --point, breakdown, equivalent and the reports
                self.error(f"sweep.points[{i}].label", f"a label no other point has, got {point['label']!r} again")
        classes = [c for c in classes if c is not None]
        for key, value in knobs.items():
            if cls is not None:
                self.knob(cls, key, value, f"knobs.{key}")
                continue
            # every point names its workload: a suite knob goes to each point whose workload knows it
            receivers = [c for c in classes if key in knob_table.specs_for(c)]
            if classes and not receivers:
                self.error(f"knobs.{key}", f"a knob of {sorted({c.name for c in classes})}")
            for c in receivers:
                self.knob(c, key, value, f"knobs.{key}")
        for c in classes:
            for section, axes in (("grid", grid), ("zip", zipped)):
                for axis, values in axes.items():
                    if not isinstance(values, list) or not values:
                        self.error(f"sweep.{section}.{axis}", "a non-empty list of values")
                        continue
                    for j, value in enumerate(values):
                        self.knob(c, axis, value, f"sweep.{section}.{axis}[{j}]")
            for i, rule in enumerate(exclude):
                self.knobs(c, rule, f"sweep.exclude[{i}]")
        self.problems = list(dict.fromkeys(self.problems))  # one workload per point may repeat a problem
        return points, grid, zipped, exclude

    def distinct_points(self, suite: Suite) -> None:
        """Two points with the same knobs would be one measurement: the second would never run.
        Checked for the CPU and for a card of each memory class that the params name."""
        cards = [("cpu", None)] + [("cuda", gb) for gb in suite.card_classes() or [None]]
        for device, memory_gb in cards:
            seen: dict[str, Point] = {}
            for point in suite.expand(device, memory_gb):
                first = seen.setdefault(point.point_id, point)
                if first is not point:
                    where = "" if device == "cpu" else f" on {device}" if memory_gb is None else \
                        f" on a {memory_gb:g} GB card"
                    self.error("sweep", f"points that differ: {first.label or first.index!r} and "
                               f"{point.label or point.index!r} have the same workload, params and knobs{where}")
                    return

    def steps(self, node) -> Steps:
        if not isinstance(node, dict):
            self.error("steps", "a mapping with warmup, measure, steady")
            return Steps()
        for key in node:
            if key not in ("warmup", "measure", "steady", "max_measure_s"):
                self.error(f"steps.{key}", "one of warmup, measure, steady, max_measure_s")
        warmup = node.get("warmup", Steps.warmup)
        measure = node.get("measure", Steps.measure)
        if not _integer(warmup) or not 0 <= warmup <= MAX_STEPS:
            self.error("steps.warmup", f"an integer from 0 to {MAX_STEPS}, got {warmup!r}")
            warmup = Steps.warmup
        if not _integer(measure) or not 1 <= measure <= MAX_STEPS:
            self.error("steps.measure", f"an integer from 1 to {MAX_STEPS}, got {measure!r}")
            measure = Steps.measure
        steady = node.get("steady", "all")
        if isinstance(steady, list) and len(steady) == 2 and all(map(_integer, steady)):
            steady = tuple(steady)
        elif steady not in ("all", "auto"):
            self.error("steps.steady", f"'all', 'auto' or [first, end) step indices, got {steady!r}")
            steady = "all"
        budget = node.get("max_measure_s")
        if budget is not None and (not _number(budget) or budget <= 0):
            self.error("steps.max_measure_s", f"a number of seconds > 0, got {budget!r}")
            budget = None
        if budget is not None and isinstance(steady, tuple):
            self.error("steps.max_measure_s", "steady: all or auto (a budget can end the steps before a fixed window)")
        out = Steps(warmup, measure, steady, None if budget is None else float(budget))
        if isinstance(steady, tuple) and not 0 <= steady[0] < steady[1] <= out.warmup + out.measure:
            self.error("steps.steady", f"0 <= first < end <= warmup + measure ({out.warmup + out.measure}), "
                       f"got {list(steady)}")
        return out

    def devices(self, node) -> Devices:
        if not isinstance(node, dict):
            self.error("devices", "a mapping with type, nproc")
            return Devices()
        allowed = {"type", "nproc", "nnodes", "node_rank", "rdzv_endpoint", "torchrun"}
        for key in node:
            if key not in allowed:
                self.error(f"devices.{key}", f"one of {sorted(allowed)}")
        kind = node.get("type", "auto")
        if kind not in ("auto", "cpu", "cuda"):
            self.error("devices.type", f"one of ['auto', 'cpu', 'cuda'], got {kind!r}")
        ints = {}
        for key, lo, hi in (("nproc", 1, MAX_NPROC), ("nnodes", 1, MAX_NNODES), ("node_rank", 0, MAX_NNODES - 1)):
            value = node.get(key, getattr(Devices, key))
            if not _integer(value) or not lo <= value <= hi:
                self.error(f"devices.{key}", f"an integer from {lo} to {hi}, got {value!r}")
                value = getattr(Devices, key)
            ints[key] = value
        if ints["node_rank"] >= ints["nnodes"]:
            self.error("devices.node_rank", f"below nnodes ({ints['nnodes']}), got {ints['node_rank']}")
        endpoint = self.typed(node, "rdzv_endpoint", str, prefix="devices.") or Devices.rdzv_endpoint
        torchrun = self.typed(node, "torchrun", bool, prefix="devices.") or False
        return Devices(kind, rdzv_endpoint=endpoint, torchrun=torchrun, **ints)

    def search(self, node, cls) -> Search | None:
        if node is None:
            return None
        if not isinstance(node, dict):
            self.error("sweep.search", "a mapping with knob, min, max")
            return None
        allowed = {"knob", "min", "max", "headroom_gib", "zero_retries", "step", "memory_snapshots"}
        for key in node:
            if key not in allowed:
                self.error(f"sweep.search.{key}", f"one of {sorted(allowed)}")
        knob = node.get("knob", "mbs")
        if cls is not None and knob not in knob_table.specs_for(cls):
            self.error("sweep.search.knob", f"a known knob of {cls.name}")
        lo, hi = node.get("min", 1), node.get("max", 256)
        if not (_integer(lo) and _integer(hi) and 1 <= lo <= hi <= MAX_SEARCH):  # true is no integer here
            self.error("sweep.search", f"integers 1 <= min <= max <= {MAX_SEARCH}, got min={lo!r} max={hi!r}")
            return None
        step = node.get("step", 1)
        if not _integer(step) or step < 1 or lo % step or hi % step:
            self.error("sweep.search.step", f"a positive integer dividing min and max, got {step!r}")
            step = 1
        headroom = node.get("headroom_gib")
        if headroom is not None and (not _number(headroom) or headroom < 0):
            self.error("sweep.search.headroom_gib", f"a finite number of GiB >= 0, got {headroom!r}")
            headroom = None
        zero_retries = node.get("zero_retries", False)
        if not isinstance(zero_retries, bool):  # YAML 1.2: 'no' is a string here, and was truthy
            self.error("sweep.search.zero_retries", f"true or false, got {zero_retries!r}")
        snapshots = node.get("memory_snapshots", True)
        if not isinstance(snapshots, bool):
            self.error("sweep.search.memory_snapshots", f"true or false, got {snapshots!r}")
        return Search(knob, lo, hi, headroom, zero_retries is True, step, snapshots is True)


#: the largest value of a generic integer knob: a batch beyond the search's cap, a seed beyond int64
_KNOB_MAX = {"mbs": MAX_SEARCH, "seed": 2**63 - 1}


def _kind(value) -> str:
    """A value as an error names it: its type and length, not an 80,000-element repr."""
    return f"a {type(value).__name__} of {len(value)}" if isinstance(value, (list, dict)) else repr(value)


def _values(value) -> list:
    """A param's values: itself, or each device's (each card memory class's, on CUDA)."""
    if not isinstance(value, dict):
        return [value]
    return [x for one in value.values() for x in (one.values() if per_card(one) else [one])]


def _integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # YAML's true is an int to Python


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _kind_name(kind) -> str:
    names = {str: "a string", int: "an integer", dict: "a mapping", list: "a list", bool: "true or false"}
    if isinstance(kind, tuple):
        return "a number"
    return names.get(kind, kind.__name__)
