"""The trials of a study and what they say together: each trial as the study judged it, the Pareto
set of objective against peak memory, the memory line's errors replayed, and which knobs mattered."""

from __future__ import annotations

import statistics
import warnings
from dataclasses import dataclass
from typing import Any

from benchbay.analysis.update_fidelity import verdict
from benchbay.record import (
    ENERGY_J_PER_SAMPLE,
    MFU,
    PEAK_MEM_ALLOCATED_GIB,
    PEAK_MEM_RESERVED_GIB,
    SAMPLES_PER_S_PER_GPU,
    STEP_TIME_CV,
    STEP_TIME_MEAN_S,
    STEP_TIME_S,
    UPDATE_APPLIED_SHARE,
    UPDATE_APPLIED_SHARE_SE,
    Record,
    Status,
)
from benchbay.suite.tune import IntRange, Tune
from benchbay.tune.memory import MemoryModel, static_gib

#: the knob whose memory grows with its value (the memory line's x)
BATCH = "mbs"
#: the knobs that decide whether the optimizer's update survives the weights' precision (offload: the
#: CPU optimizer steps fp32 masters of bf16 weights)
UPDATE_KNOBS = ("precision", "optimizer", "offload")


@dataclass
class Trial:
    """One measured trial as the study judges it."""

    number: int
    params: dict[str, Any]  # the space's knobs
    record: Record
    value: float | None  # the objective, where measured
    feasible: bool
    violation: float  # 0 when feasible; how far from the constraints otherwise (the sampler's ranking)
    why: str = ""  # why infeasible

    @property
    def stopped_early(self) -> bool:
        return "stopped_early" in self.record.extra

    def as_json(self, predicted_gib: float | None = None) -> dict[str, Any]:
        m = self.record.metrics
        return {"trial": self.number, "label": self.record.label, "point_id": self.record.point_id,
                "knobs": self.params, "status": str(self.record.status), "objective": self.value,
                "feasible": self.feasible, "why": self.why or None,
                SAMPLES_PER_S_PER_GPU: m.get(SAMPLES_PER_S_PER_GPU),
                PEAK_MEM_RESERVED_GIB: m.get(PEAK_MEM_RESERVED_GIB),
                "predicted_peak_gib": predicted_gib,
                "fidelity": self.record.extra.get("fidelity"), "stopped_early": self.stopped_early,
                "device_s": self.record.duration_s, "started_at": self.record.started_at}


def distributions(space: dict[str, Any]) -> dict[str, Any]:
    import optuna

    return {k: optuna.distributions.IntDistribution(v.min, v.max, step=v.step) if isinstance(v, IntRange)
            else optuna.distributions.CategoricalDistribution(list(v)) for k, v in space.items()}


def pareto(trials: list[Trial], direction: str) -> list[dict[str, Any]]:
    """The feasible trials no other beats on both the objective and peak reserved memory."""
    sign = 1 if direction == "maximize" else -1
    points = [(t, sign * t.value, t.record.metrics.get(PEAK_MEM_RESERVED_GIB)) for t in trials if t.feasible]
    points = [(t, v, m) for t, v, m in points if m is not None]
    front = [(t, v, m) for t, v, m in points
             if not any(v2 >= v and m2 <= m and (v2 > v or m2 < m) for _, v2, m2 in points)]
    return [{"trial": t.number, "objective": t.value, PEAK_MEM_RESERVED_GIB: m, "knobs": t.params}
            for t, _, m in sorted(front, key=lambda x: x[2])]


def rest_of(params: dict[str, Any]) -> tuple:
    """A configuration without its batch: what the memory line is kept for."""
    return tuple(sorted((k, repr(v)) for k, v in params.items() if k != BATCH))


def memory_errors(trials: list[Trial]) -> dict[str, Any]:
    """What the memory line predicts for each trial from the trials before it (replayed in order: the
    line of this version of benchbay, so a study from an older one is judged by today's line) against
    what the trial then measured: its peak, or an oom."""
    model, rows = MemoryModel(), []
    for t in trials:
        if BATCH not in t.params or t.record.status not in (Status.OK, Status.OOM):
            continue
        predicted = model.predict(rest_of(t.params), t.params[BATCH])
        peak = t.record.metrics.get(PEAK_MEM_RESERVED_GIB)
        if predicted is not None:
            rows.append({"trial": t.number, "predicted_gib": predicted, "measured_gib": peak,
                         "status": str(t.record.status), "error_gib": None if peak is None else predicted - peak})
        model.observe(rest_of(t.params), t.params[BATCH], peak, t.record.status == Status.OOM,
                      static_gib(t.record.knobs, t.record.extra))
    errors = [abs(r["error_gib"]) for r in rows if r["error_gib"] is not None]
    rel = [abs(r["error_gib"]) / r["measured_gib"] for r in rows if r["error_gib"] is not None and r["measured_gib"]]
    return {"predictions": rows, "mean_abs_error_gib": statistics.fmean(errors) if errors else None,
            "max_abs_error_gib": max(errors) if errors else None,
            "mean_rel_error": statistics.fmean(rel) if rel else None}


def importances(trials: list[Trial], tune: Tune) -> dict[str, float]:
    """Which knobs mattered to the objective (Optuna's fANOVA importances over the measured trials,
    infeasible ones at the worst value seen); {} where there are too few to tell."""
    import optuna

    measured = [t for t in trials if t.record.status != Status.SKIPPED]
    if len(measured) < 4:
        return {}
    seen = [t.value for t in measured if t.value is not None]
    worst = (min(seen) if tune.objective.direction == "maximize" else max(seen)) if seen else 0.0
    study = optuna.create_study(direction=tune.objective.direction)
    space = distributions(tune.space)
    for t in measured:
        study.add_trial(optuna.trial.create_trial(params=t.params, distributions=space,
                                                  value=t.value if t.feasible else worst))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return {k: float(v) for k, v in optuna.importance.get_param_importances(study, normalize=True).items()}
    except (RuntimeError, ValueError, ZeroDivisionError):
        return {}


def key_metrics(record: Record) -> dict[str, Any]:
    m = record.metrics
    keys = (SAMPLES_PER_S_PER_GPU, STEP_TIME_MEAN_S, STEP_TIME_S, PEAK_MEM_ALLOCATED_GIB,
            PEAK_MEM_RESERVED_GIB, MFU, ENERGY_J_PER_SAMPLE, UPDATE_APPLIED_SHARE, STEP_TIME_CV)
    return {**{k: m.get(k) for k in keys if m.get(k) is not None}, "fidelity": record.extra.get("fidelity")}


def lost_update(trials: list[Trial], knobs: dict[str, Any]) -> str | None:
    """Why a configuration cannot be faithful: its precision, optimizer and offload already lost the
    update in a trial (the optimizer's arithmetic on the weights' dtype, not the batch's or kernels')."""
    for t in trials:
        m = t.record.metrics
        # the applied share's own verdict: a record lossy for tensors left without gradients (fidelity_untrained)
        # lost them to its recompute or model, not to these knobs
        if verdict(m.get(UPDATE_APPLIED_SHARE), m.get(UPDATE_APPLIED_SHARE_SE)) == "lossy" and all(
                t.record.knobs.get(k) == knobs.get(k) for k in UPDATE_KNOBS):
            *first, last = (f"{k}={knobs.get(k)}" for k in UPDATE_KNOBS)
            return f"{', '.join(first)} and {last} lost the update in trial {t.number} (update fidelity lossy)"
    return None
