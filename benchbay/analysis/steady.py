"""Where per-step times stop trending (warm-up length), and what compilation costs before it pays.

Warm-up: the first step index from which the steps stay at the final level. The final level is
the median of the second half of the series; the tolerance is the larger of ``rel_tol`` of that
level and three robust standard deviations of the second half (so noisy hosts do not read as
endless warm-up). A step counts as settled when it is itself within tolerance and every rolling
median of ``window`` steps from it on is too (one later hiccup does not restart the warm-up).

Amortisation: a compiled or graph-captured point pays a long first step to run faster later.
It breaks even with the eager point after
``(first_step_compiled - step_eager) / (step_eager - step_compiled)`` steps. A point whose graphs
came from the compile cache (``compile_cache: run``) did not pay a cold compile: it has no row.

A loader's steady state: its workers make batches ahead, so a loader slower than the step is
hidden until its queue first runs dry (``first_dry_step``); steps measured before that pass for a
loader that keeps up.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from benchbay.record import FIRST_STEP_S, STEP_TIME_S, Status

if TYPE_CHECKING:  # the worker reads the series functions: pandas only where frames are read
    import pandas as pd

#: a step waited for its batch when the wait took this share of it: the loader's queue was empty
#: (one that keeps up leaves 0.05-0.09% of an H200 step waiting)
WAITED = 0.01
#: knobs whose "off" value is the eager baseline of an amortisation comparison
ACCELERATION_KNOBS = ("compile", "cuda_graph")
OFF = "off"


def detect_warmup(step_times: Sequence[float], rel_tol: float = 0.05, window: int = 3) -> int:
    """Number of leading steps before the series settles (0 when it starts settled or is too short)."""
    x = np.asarray(step_times, dtype=float)
    x = x[np.isfinite(x)]
    if x.size <= window:
        return 0
    tail = x[x.size // 2 :]
    level = np.median(tail)
    noise = 1.4826 * np.median(np.abs(tail - level))
    tol = max(rel_tol * abs(level), 3.0 * noise)
    rolling = np.median(np.lib.stride_tricks.sliding_window_view(x, window), axis=1)
    # settled_from[i]: every rolling median from i to the end is within tolerance
    rolling_ok = np.abs(rolling - level) <= tol
    settled_from = np.logical_and.accumulate(rolling_ok[::-1])[::-1]
    point_ok = np.abs(x[: rolling.size] - level) <= tol
    start = np.flatnonzero(point_ok & settled_from)
    return int(start[0]) if start.size else int(rolling.size)


def first_dry_step(waits: Sequence[float], durations: Sequence[float]) -> int | None:
    """The first step after the first (which waits for the workers' start) that waited for its
    batch (``waits`` and ``durations`` per step); None while the loader's queue never ran dry."""
    for i, (wait, duration) in enumerate(zip(waits, durations, strict=True)):
        if i and wait > WAITED * duration:
            return i
    return None


def amortisation_steps(first_step_s: float, step_s: float, eager_step_s: float) -> float:
    """Steps after which a compiled point's slow first step is repaid against the eager point.

    0 when the first step is already no slower than eager; inf when the compiled steady step is
    not faster than eager (it never repays).
    """
    overhead = first_step_s - eager_step_s
    if overhead <= 0:
        return 0.0
    saving = eager_step_s - step_s
    return overhead / saving if saving > 0 else math.inf


def warm(row: pd.Series) -> bool:
    """The point loaded compiled graphs from the cache: its first step is not a compile."""
    from benchbay.analysis.frame import is_missing

    hits = row.get("extra.compile_cache_hits")
    return not is_missing(hits) and hits > 0


def amortisation_table(summary: pd.DataFrame) -> pd.DataFrame:
    """One row per ok compiled/graph point that compiled cold and has an ok eager twin (same knobs
    and params, acceleration knobs off): first step, steady steps, overhead and break-even step count.

    ``summary`` is :func:`benchbay.analysis.tables.point_summary`'s frame.
    """
    import pandas as pd

    from benchbay.analysis.frame import knob_columns, param_columns

    accel = [k for k in ACCELERATION_KNOBS if k in summary.columns]
    columns = ["point", "eager_point", FIRST_STEP_S, STEP_TIME_S, "eager_step_time_s",
               "overhead_s", "break_even_steps"]
    if not accel or summary.empty:
        return pd.DataFrame(columns=columns)
    ok = summary[summary["status"] == Status.OK]
    same = [c for c in knob_columns(summary) + param_columns(summary) + ["suite", "workload"]
            if c in summary.columns and c not in accel]
    def key(row: pd.Series) -> tuple[str, ...]:
        return tuple(str(row[c]) for c in same)

    def is_eager(row: pd.Series) -> bool:
        return all(row[k] == OFF for k in accel)

    eager_by_key = {key(row): row for _, row in ok.iterrows() if is_eager(row)}
    rows = []
    for _, row in ok.iterrows():
        eager = None if is_eager(row) else eager_by_key.get(key(row))
        if eager is None or pd.isna(row[FIRST_STEP_S]) or pd.isna(eager[STEP_TIME_S]) or warm(row):
            continue
        rows.append({
            "point": row["name"],
            "eager_point": eager["name"],
            FIRST_STEP_S: row[FIRST_STEP_S],
            STEP_TIME_S: row[STEP_TIME_S],
            "eager_step_time_s": eager[STEP_TIME_S],
            "overhead_s": row[FIRST_STEP_S] - eager[STEP_TIME_S],
            "break_even_steps": amortisation_steps(row[FIRST_STEP_S], row[STEP_TIME_S], eager[STEP_TIME_S]),
        })
    return pd.DataFrame(rows, columns=columns)
