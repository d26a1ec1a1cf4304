"""The pre-flight memory estimate of a tune: for a fixed rest of the knobs, peak memory grows about
linearly with the batch (weights, gradients and optimizer state once; activations per sample), so a
line through the trials so far says whether a batch fits before a process is spent on it. An
out-of-memory trial bounds its configuration from above: no larger batch of it fits either."""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

#: the share of the card a predicted peak may use: the allocator's fragmentation and the line's error
#: (a batch predicted within 3% of the card is tried, not refused)
FIT_MARGIN = 0.97


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

    def observe(self, rest: Hashable, batch: int, peak_gib: float | None, oom: bool) -> None:
        if oom:
            self.oom_at[rest] = min(batch, self.oom_at.get(rest, batch))
        elif peak_gib is not None:
            self.peaks.setdefault(rest, []).append((batch, peak_gib))

    def predict(self, rest: Hashable, batch: int) -> float | None:
        line = fit(self.peaks.get(rest, []))
        return None if line is None else line.at(batch)

    def refuses(self, rest: Hashable, batch: int) -> str | None:
        """Why the batch cannot fit, from what was measured; None when it may."""
        if rest in self.oom_at and batch >= self.oom_at[rest]:
            return f"batch {self.oom_at[rest]} of this configuration ran out of memory"
        if self.capacity_gib is None:
            return None
        predicted = self.predict(rest, batch)
        if predicted is not None and predicted > FIT_MARGIN * self.capacity_gib:
            return f"the memory line predicts {predicted:.1f} GiB, over {FIT_MARGIN:.0%} of {self.capacity_gib:.1f} GiB"
        return None

    def largest_fitting(self, rest: Hashable, batches: Iterable[int]) -> int | None:
        """The largest batch of ``batches`` not refused, or None."""
        fitting = [b for b in batches if self.refuses(rest, b) is None]
        return max(fitting) if fitting else None
