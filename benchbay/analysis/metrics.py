"""The figures a comparison and the threshold grammar know by name, and the verdicts a comparison
gives (:mod:`benchbay.analysis.compare` says when each is given). Apart from the comparison, so that
a suite's thresholds are checked without pandas: a point's process checks its suite too."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from benchbay.record import (
    ENERGY_J_PER_SAMPLE,
    ENERGY_WATTS,
    MFU,
    PEAK_MEM_ALLOCATED_GIB,
    PEAK_MEM_RESERVED_GIB,
    SAMPLES_PER_S,
    SAMPLES_PER_S_PER_GPU,
    STEP_TIME_S,
)


class Verdict(StrEnum):
    """What a comparison says of a change (the module docstring says when each is given)."""

    FASTER = "faster"
    SLOWER = "slower"
    LESS_MEMORY = "less memory"
    MORE_MEMORY = "more memory"
    LESS_ENERGY = "less energy"
    MORE_ENERGY = "more energy"
    LESS_POWER = "less power"
    MORE_POWER = "more power"
    CHEAPER = "cheaper"
    COSTLIER = "costlier"
    NO_CHANGE = "no change"
    NOT_SIGNIFICANT = "not significant"
    FAILED = "failed"
    NOT_COMPARABLE = "not comparable"
    UNSUPPORTED = "cannot support a verdict"  # too few processes, and no earlier run to say their spread
    NO_INTERVAL = "no interval"  # the breakdown, where a side has no steps or neither more than one process


@dataclass(frozen=True)
class Metric:
    """A figure the comparison and the threshold grammar know by ``name``."""

    name: str
    column: str  # the flattened record column
    higher_is_better: bool
    per_step: bool  # samples derive from the steady per-step times
    better: Verdict
    worse: Verdict
    exact: bool = False  # repeats exactly from process to process (a memory peak): no spread to measure


_TIME, _MEMORY = (Verdict.FASTER, Verdict.SLOWER), (Verdict.LESS_MEMORY, Verdict.MORE_MEMORY)
METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("step_time", STEP_TIME_S, False, True, *_TIME),
        Metric("samples_per_s", SAMPLES_PER_S, True, True, *_TIME),
        Metric("samples_per_s_per_gpu", SAMPLES_PER_S_PER_GPU, True, True, *_TIME),
        Metric("mfu", MFU, True, True, *_TIME),
        Metric("peak_mem", PEAK_MEM_ALLOCATED_GIB, False, False, *_MEMORY, exact=True),
        Metric("peak_mem_reserved", PEAK_MEM_RESERVED_GIB, False, False, *_MEMORY, exact=True),
        Metric("energy_per_sample", ENERGY_J_PER_SAMPLE, False, False, Verdict.LESS_ENERGY, Verdict.MORE_ENERGY),
        Metric("power", ENERGY_WATTS, False, False, Verdict.LESS_POWER, Verdict.MORE_POWER),
    )
}
DEFAULT_METRICS = ("step_time", "samples_per_s_per_gpu", "peak_mem", "mfu", "energy_per_sample", "power")
#: verdicts that say nothing changed (or nothing can be said)
UNCHANGED = (Verdict.NO_CHANGE, Verdict.NOT_SIGNIFICANT, Verdict.UNSUPPORTED)
