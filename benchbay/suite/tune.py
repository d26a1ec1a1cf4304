"""A suite's ``tune:`` block, read and checked: the knobs to search and their values, what to
maximise or minimise, the constraints a trial must meet, and the budgets. Read without torch or
Optuna (``validate`` checks it like any key of a suite)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from benchbay import knobs as knob_table
from benchbay.record import ENERGY_J_PER_SAMPLE, FIGURES, MFU, SAMPLES_PER_S, SAMPLES_PER_S_PER_GPU, STEP_TIME_S

#: what a tune may optimise, each in its natural direction; any other figure of a record's metrics
#: is accepted as ``{metric: NAME, direction: maximize|minimize}``. Cost per 1M samples needs the
#: suite's ``price_per_gpu_hour``.
OBJECTIVES: dict[str, Literal["maximize", "minimize"]] = {
    SAMPLES_PER_S_PER_GPU: "maximize", SAMPLES_PER_S: "maximize", MFU: "maximize",
    STEP_TIME_S: "minimize", ENERGY_J_PER_SAMPLE: "minimize", "cost_per_m_samples": "minimize"}
#: objectives that are throughput in another unit, each with the direction in which it rewards more
#: samples/s: the early stop compares a trial's first steps' samples/s, so it applies only to these,
#: optimised that way (step time is not one: a smaller batch steps faster at fewer samples/s)
THROUGHPUT: dict[str, str] = {SAMPLES_PER_S_PER_GPU: "maximize", SAMPLES_PER_S: "maximize", MFU: "maximize",
                              "cost_per_m_samples": "minimize"}
MAX_TRIALS = 10_000
#: the largest max of an integer range (sweep.search's cap): a range of 10**400 overflowed a float
MAX_INT_RANGE = 1 << 20
MAX_DEVICE_SECONDS = 30 * 24 * 3600.0
_KEYS = {"space", "objective", "constraints", "trials", "device_seconds", "confirm", "early_stop", "seed", "start"}
_CONSTRAINTS = {"faithful", "max_peak_gib", "zero_retries"}


@dataclass(frozen=True)
class IntRange:
    """An integer knob searched over ``min..max`` in multiples of ``step`` (the batch)."""

    min: int
    max: int
    step: int = 1

    def values(self) -> range:
        return range(self.min, self.max + 1, self.step)


@dataclass(frozen=True)
class Objective:
    metric: str = SAMPLES_PER_S_PER_GPU
    direction: Literal["maximize", "minimize"] = "maximize"

    def better(self, a: float, b: float) -> bool:
        """Whether ``a`` is better than ``b``."""
        return a > b if self.direction == "maximize" else a < b


@dataclass(frozen=True)
class Constraints:
    """What a trial must meet to count (an oom, crash, timeout or NaN never does):
    ``faithful``: its update fidelity says faithful and its compute fidelity is not lossy
    (benchbay.collect.fidelity, benchbay.collect.compute_fidelity); a point with FP8 GEMMs (float8,
    encoders_float8) whose compute fidelity was not measured (``compute_fidelity_skipped``) counts half
    a violation, as an uncertain update does: its gradients' arithmetic changed and nothing compared them;
    ``max_peak_gib``: its peak reserved memory at most this (tune for a smaller card on a larger one);
    ``zero_retries``: the allocator never freed its cache and retried (a batch that only runs so)."""

    faithful: bool = False
    max_peak_gib: float | None = None
    zero_retries: bool = False


@dataclass(frozen=True)
class Confirm:
    """The best ``top`` distinct trials are measured ``repeats`` more times, each in a process of its
    own, before a winner is named: one within the noise of the best is a tie."""

    top: int = 3
    repeats: int = 2


@dataclass(frozen=True)
class Tune:
    space: dict[str, IntRange | tuple[Any, ...]]
    objective: Objective = Objective()
    constraints: Constraints = Constraints()
    trials: int | None = None
    device_seconds: float | None = None
    confirm: Confirm = Confirm()
    #: stop a trial after its first measured steps when they run below this share of the best
    #: samples/s so far (False: never); only where the objective rewards samples/s (``stops_early``)
    early_stop: float | None = 0.8
    seed: int = 0
    #: configurations tried first (a published recipe, the hand-walked best): each a mapping of space knobs
    start: list[dict[str, Any]] = field(default_factory=list)

    def stops_early(self) -> bool:
        """Whether the early stop applies: the objective is throughput (samples/s, samples/s per GPU or
        MFU maximised, cost per 1M samples minimised); else a trial slower in samples/s may be the
        better one, and every trial runs all its steps."""
        return self.early_stop is not None and THROUGHPUT.get(self.objective.metric) == self.objective.direction

    def as_json(self) -> dict[str, Any]:
        return {"space": {k: v.__dict__ if isinstance(v, IntRange) else list(v) for k, v in self.space.items()},
                "objective": self.objective.__dict__, "constraints": self.constraints.__dict__,
                "trials": self.trials, "device_seconds": self.device_seconds, "confirm": self.confirm.__dict__,
                "early_stop": self.early_stop, "seed": self.seed, "start": self.start}


def check(node: Any, workload_cls: type | None, fixed: Mapping[str, Any], price: Any, error) -> Tune | None:
    """The ``tune:`` block checked against the workload's knobs; ``error(key, expected)`` collects
    each problem (the suite's Validator). ``fixed``: the suite's own knobs."""
    if not isinstance(node, dict):
        error("tune", "a mapping with space, objective, constraints, trials or device_seconds")
        return None
    for key in node:
        if key not in _KEYS:
            error(f"tune.{key}", f"one of {sorted(_KEYS)}")
    space = _space(node.get("space"), workload_cls, fixed, error)
    objective = _objective(node.get("objective", SAMPLES_PER_S_PER_GPU), price, error)
    constraints = _constraints(node.get("constraints", {}), error)
    trials = node.get("trials")
    if trials is not None and not (_integer(trials) and 1 <= trials <= MAX_TRIALS):
        error("tune.trials", f"an integer from 1 to {MAX_TRIALS}, got {trials!r}")
    seconds = node.get("device_seconds")
    if seconds is not None and not (_number(seconds) and 0 < seconds <= MAX_DEVICE_SECONDS):
        error("tune.device_seconds", f"a number of seconds > 0 and <= {MAX_DEVICE_SECONDS:g}, got {seconds!r}")
    if trials is None and seconds is None:
        error("tune", "a budget: trials, device_seconds or both")
    confirm = _confirm(node.get("confirm", {}), error)
    early = node.get("early_stop", Tune.early_stop)
    if early is False:
        early = None
    elif not (_number(early) and 0 < early < 1):
        error("tune.early_stop", f"a share of the best throughput in (0, 1), or false, got {early!r}")
        early = None
    seed = node.get("seed", 0)
    if not (_integer(seed) and seed >= 0):
        error("tune.seed", f"an integer >= 0, got {seed!r}")
    start = node.get("start", [])
    if not isinstance(start, list) or not all(isinstance(s, dict) for s in start):
        error("tune.start", "a list of mappings of knobs in the space")
        start = []
    for i, one in enumerate(start):
        for knob, value in one.items():
            if space is not None and knob not in space:
                error(f"tune.start[{i}].{knob}", f"a knob of tune.space ({sorted(space)})")
            elif space is not None and not _in_space(space[knob], value):
                error(f"tune.start[{i}].{knob}", f"a value of tune.space.{knob}, got {value!r}")
    if space is None or objective is None:
        return None
    return Tune(space=space, objective=objective, constraints=constraints, trials=trials,
                device_seconds=None if seconds is None else float(seconds), confirm=confirm, early_stop=early,
                seed=seed if _integer(seed) else 0, start=start)


def _space(node: Any, cls: type | None, fixed: Mapping[str, Any], error) -> dict | None:
    if not isinstance(node, dict) or not node:
        error("tune.space", "a non-empty mapping of knob -> list of values, or {min, max} for an integer knob")
        return None
    specs = knob_table.specs_for(cls) if cls is not None else {}
    space: dict[str, IntRange | tuple[Any, ...]] = {}
    for knob, values in node.items():
        where = f"tune.space.{knob}"
        if cls is not None and knob not in specs:
            error(where, f"a known knob of {cls.name}: {sorted(specs)}")
            continue
        if knob in fixed:
            error(where, f"a knob not also fixed in the suite's knobs (knobs.{knob} = {fixed[knob]!r})")
        if isinstance(values, dict):
            integer = isinstance(specs.get(knob), knob_table.Knob) and specs[knob].type is int
            lo, hi, step = values.get("min"), values.get("max"), values.get("step", 1)
            if cls is not None and not integer:
                error(where, "a list of values ({min, max} is for an integer knob such as mbs)")
            elif set(values) - {"min", "max", "step"}:
                error(where, "{min, max} and optionally step")
            elif not (_integer(lo) and _integer(hi) and _integer(step) and 1 <= lo <= hi <= MAX_INT_RANGE
                      and 1 <= step <= MAX_INT_RANGE):
                error(where, f"integers 1 <= min <= max <= {MAX_INT_RANGE} and step >= 1, got {values!r}")
            elif (hi - lo) % step:
                error(where, f"max - min a multiple of step, got {values!r}")
            else:
                space[knob] = IntRange(lo, hi, step)
            continue
        if not isinstance(values, list) or not values:
            error(where, "a non-empty list of values, or {min, max} for an integer knob")
            continue
        if len({repr(v) for v in values}) != len(values):
            error(where, f"distinct values, got {values!r}")
            continue
        good = True
        for i, value in enumerate(values):
            if not isinstance(value, (str, int, float, bool)) or isinstance(value, float) and not math.isfinite(value):
                error(f"{where}[{i}]", f"a string, number or true/false, got {value!r}")
                good = False
            elif cls is not None and (expected := knob_table.check_value(cls, knob, value)):
                error(f"{where}[{i}]", f"{expected}, got {value!r}")
                good = False
        if good:
            space[knob] = tuple(values)
    return space if len(space) == len(node) else None


def _objective(node: Any, price: Any, error) -> Objective | None:
    if isinstance(node, str):
        node = {"metric": node}
    if not isinstance(node, dict) or not isinstance(node.get("metric"), str):
        error("tune.objective", f"a figure to optimise ({sorted(OBJECTIVES)}) or {{metric, direction}}")
        return None
    metric = node["metric"]
    direction = node.get("direction", OBJECTIVES.get(metric))
    if metric not in OBJECTIVES and metric not in FIGURES:
        error("tune.objective.metric", f"one of {sorted(OBJECTIVES)} or a record's metric, got {metric!r}")
        return None
    if direction not in ("maximize", "minimize"):
        error("tune.objective.direction", f"maximize or minimize, got {direction!r}")
        return None
    if metric == "cost_per_m_samples" and price is None:
        error("tune.objective", "price_per_gpu_hour in the suite (the cost per 1M samples is priced by it)")
    return Objective(metric, direction)


def _constraints(node: Any, error) -> Constraints:
    if not isinstance(node, dict):
        error("tune.constraints", f"a mapping of {sorted(_CONSTRAINTS)}")
        return Constraints()
    for key in node:
        if key not in _CONSTRAINTS:
            error(f"tune.constraints.{key}", f"one of {sorted(_CONSTRAINTS)}")
    for key in ("faithful", "zero_retries"):
        if not isinstance(node.get(key, False), bool):
            error(f"tune.constraints.{key}", f"true or false, got {node[key]!r}")
    peak = node.get("max_peak_gib")
    if peak is not None and not (_number(peak) and peak > 0):
        error("tune.constraints.max_peak_gib", f"a number of GiB > 0, got {peak!r}")
        peak = None
    return Constraints(node.get("faithful") is True, None if peak is None else float(peak),
                       node.get("zero_retries") is True)


def _confirm(node: Any, error) -> Confirm:
    if node is False:
        return Confirm(top=0, repeats=0)
    if not isinstance(node, dict) or set(node) - {"top", "repeats"}:
        error("tune.confirm", "{top, repeats}, or false")
        return Confirm()
    top, repeats = node.get("top", Confirm.top), node.get("repeats", Confirm.repeats)
    if not (_integer(top) and 0 <= top <= 20 and _integer(repeats) and 0 <= repeats <= 20):
        error("tune.confirm", f"integers top and repeats from 0 to 20, got {node!r}")
        return Confirm()
    return Confirm(top, repeats)


def _in_space(values: IntRange | tuple[Any, ...], value: Any) -> bool:
    if isinstance(values, IntRange):
        return _integer(value) and value in values.values()
    return any(type(value) is type(v) and value == v for v in values)


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
