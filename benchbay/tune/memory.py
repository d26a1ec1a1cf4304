"""The pre-flight memory estimate of a tune: for a fixed rest of the knobs, peak memory grows about
linearly with the batch (weights, gradients and optimizer state once; activations per sample), so a
line through the trials so far says whether a batch fits before a process is spent on it; a
configuration with one batch measured borrows the slope of its nearest neighbour's line, of the same
recompute (``ACTIVATIONS``); with no neighbour's line, the slope is what the batch added over the
memory that does not grow with it (``static_gib``: weights, gradients, optimizer state and frozen
weights, from the record's parameter counts). An out-of-memory trial bounds its configuration from
above: no larger batch of it fits either.
Replayed over the H200 wallx-tune trials, the borrowed slope predicted 116.2 GiB for a trial that
measured 119.6, and would have refused the two 52- and 64-sample trials that then ran out of memory.
On the H100 wallx-tune, a slope borrowed across recompute (selective's 1.44 GiB a sample for
attention's 0.2) predicted 73.8 GiB for a trial that measured 54.5, and refused a batch that fit."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from benchbay.knobs.optimizer import CHOICES as OPTIMIZERS

#: the knob that decides what a sample's activations hold: no slope is borrowed across its values
ACTIVATIONS = "recompute"


#: weight and gradient bytes of a trained parameter under each precision (the optimizer's state is its own)
WEIGHT_GRAD_BYTES = {"bf16_mixed": 8, "fp32": 8, "bf16": 4}
FROZEN_BYTES = 2  # frozen weights are held in bf16
GIB = 2 ** 30


def static_gib(knobs: Mapping[str, Any], extra: Mapping[str, Any]) -> float | None:
    """GiB a process holds whatever its batch: trained parameters' weights, gradients and optimizer
    state, and the frozen weights; None where a record does not say its parameters, or where sharding
    or offloading moves them elsewhere."""
    trained, frozen = extra.get("trainable_params"), extra.get("frozen_params", 0)
    precision, optimizer = knobs.get("precision", "bf16_mixed"), OPTIMIZERS.get(knobs.get("optimizer", "adamw"))
    per_param = WEIGHT_GRAD_BYTES.get(precision)
    if (not isinstance(trained, int) or not isinstance(frozen, int) or optimizer is None or per_param is None
            or knobs.get("sharding", "none") != "none" or knobs.get("offload", "none") != "none"
            or optimizer.state_bytes == 0):
        return None
    return (trained * (per_param + optimizer.state_bytes_under(precision)) + frozen * FROZEN_BYTES) / GIB


@dataclass
class Line:
    intercept: float  # GiB at batch 0: weights, gradients, optimizer state, workspace
    slope: float  # GiB per sample

    def at(self, batch: float) -> float:
        return self.intercept + self.slope * batch


def fit(points: list[tuple[int, float]]) -> Line | None:
    """The least-squares line through (batch, peak GiB), or None under two distinct batches."""
    xs = {b for b, _ in points}
    if len(xs) < 2:
        return None
    n = len(points)
    mx = sum(b for b, _ in points) / n
    my = sum(p for _, p in points) / n
    sxx = sum((b - mx) ** 2 for b, _ in points)
    slope = sum((b - mx) * (p - my) for b, p in points) / sxx
    return Line(my - slope * mx, slope)


@dataclass
class MemoryModel:
    """What the trials so far say of each configuration's memory: ``rest`` is the configuration
    without its batch knob."""

    capacity_gib: float | None = None  # the card's memory, or the tune's max_peak_gib where smaller
    peaks: dict[Hashable, list[tuple[int, float]]] = field(default_factory=dict)
    oom_at: dict[Hashable, int] = field(default_factory=dict)  # the smallest batch that ran out of memory
    static: dict[Hashable, float] = field(default_factory=dict)  # static_gib of each configuration

    def observe(self, rest: Hashable, batch: int, peak_gib: float | None, oom: bool,
                static: float | None = None) -> None:
        if oom:
            self.oom_at[rest] = min(batch, self.oom_at.get(rest, batch))
        elif peak_gib is not None:
            self.peaks.setdefault(rest, []).append((batch, peak_gib))
        if static is not None:
            self.static[rest] = static

    def predict(self, rest: Hashable, batch: int) -> float | None:
        """Peak GiB at ``batch``: on the configuration's own line; with one batch of it measured, from
        that batch along the slope of the nearest configuration of the same recompute that has a
        line (the fewest knobs apart: the activations a sample costs change with few knobs), else
        along what that batch added over its static memory; else None."""
        own = self.peaks.get(rest, [])
        line = fit(own)
        if line is not None:
            return line.at(batch)
        if not own:
            return None
        near_batch, near_peak = min(own, key=lambda p: abs(p[0] - batch))
        slope, static = self._nearest_slope(rest), self.static.get(rest)
        if slope is None and static is not None and near_peak > static:
            slope = (near_peak - static) / near_batch
        return None if slope is None else near_peak + slope * (batch - near_batch)

    def _nearest_slope(self, rest: Hashable) -> float | None:
        lines = [(_apart(rest, other), fit(points).slope) for other, points in self.peaks.items()
                 if other != rest and _same_activations(rest, other) and fit(points) is not None]
        return min(lines, key=lambda x: x[0])[1] if lines else None

    def refuses(self, rest: Hashable, batch: int) -> str | None:
        """Why the batch cannot fit, from what was measured; None when it may."""
        if rest in self.oom_at and batch >= self.oom_at[rest]:
            return f"batch {self.oom_at[rest]} of this configuration ran out of memory"
        ran = [b for b, _ in self.peaks.get(rest, [])]
        if self.capacity_gib is None or ran and batch <= max(ran):  # what ran, and smaller, fits
            return None
        predicted = self.predict(rest, batch)
        # over the card, not near it: Wall-X at mbs 44 ran with 137.2 GiB of an H200's 139.8 reserved
        if predicted is not None and predicted > self.capacity_gib:
            return f"the memory line predicts {predicted:.1f} GiB, over the card's {self.capacity_gib:.1f} GiB"
        return None

    def largest_fitting(self, rest: Hashable, batches: Iterable[int]) -> int | None:
        """The largest batch of ``batches`` not refused, or None."""
        fitting = [b for b in batches if self.refuses(rest, b) is None]
        return max(fitting) if fitting else None


def _apart(a: Hashable, b: Hashable) -> int:
    """How many knobs two configurations (tuples of (knob, value)) differ in."""
    if not (isinstance(a, tuple) and isinstance(b, tuple)):
        return 0 if a == b else 1
    return len(set(a) ^ set(b)) // 2


def _same_activations(a: Hashable, b: Hashable) -> bool:
    """Whether two configurations recompute alike (True where either does not say)."""
    if not (isinstance(a, tuple) and isinstance(b, tuple)):
        return True
    mine, theirs = dict(a).get(ACTIVATIONS), dict(b).get(ACTIVATIONS)
    return mine is None or theirs is None or mine == theirs
