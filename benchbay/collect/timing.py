"""Per-step wall time without host syncs inside the measured steps.

On CUDA each step is bracketed by events on the current stream and read once at the end;
on CPU the step is synchronous and a perf counter suffices."""

from __future__ import annotations

import math
import statistics
import time

import torch

from benchbay.analysis.stats import coefficient_of_variation
from benchbay.record import STEP_TIME_CV, STEP_TIME_MEAN_S, STEP_TIME_P10_S, STEP_TIME_P90_S, STEP_TIME_S


class StepTimer:
    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self._marks: list[tuple[object, object]] = []

    def start(self) -> None:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self._marks.append((event, None))
        else:
            self._marks.append((time.perf_counter(), None))

    def stop(self) -> None:
        begin, _ = self._marks[-1]
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self._marks[-1] = (begin, event)
        else:
            self._marks[-1] = (begin, time.perf_counter())

    def times(self) -> list[float]:
        """Seconds per completed step (synchronises once on CUDA)."""
        done = [(b, e) for b, e in self._marks if e is not None]
        if self.cuda:
            torch.cuda.synchronize()
            return [b.elapsed_time(e) / 1e3 for b, e in done]
        return [e - b for b, e in done]


def summarize(times: list[float]) -> dict[str, float | None]:
    """Median, mean, p10, p90 and coefficient of variation of step times (seconds); a CV needs
    two steps."""
    if not times:
        return {STEP_TIME_S: None, STEP_TIME_MEAN_S: None, STEP_TIME_P10_S: None,
                STEP_TIME_P90_S: None, STEP_TIME_CV: None}
    ordered = sorted(times)
    cv = coefficient_of_variation(ordered)
    return {
        STEP_TIME_S: statistics.median(ordered),
        STEP_TIME_MEAN_S: statistics.fmean(times),
        STEP_TIME_P10_S: _quantile(ordered, 0.10),
        STEP_TIME_P90_S: _quantile(ordered, 0.90),
        STEP_TIME_CV: None if math.isnan(cv) else cv,
    }


def _quantile(ordered: list[float], q: float) -> float:
    pos = q * (len(ordered) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)
