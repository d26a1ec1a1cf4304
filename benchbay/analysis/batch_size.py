"""Batch size: a suite's configurations, each run at several batch sizes (``mbs``) or searched, and
each one's effective throughput at its own largest feasible batch, against the first configuration
with the interval and verdict of ``benchbay.analysis.breakdown`` (over processes: one repeat a side
has no interval, and a ratio inside the noise is not an effect)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from benchbay import record as rec
from benchbay.analysis.batch_search import infeasibility
from benchbay.analysis.breakdown import point_changes
from benchbay.analysis.frame import group_keys, varying_columns
from benchbay.analysis.tables import describe, suite_varying
from benchbay.record import SEARCH_GROUP


def config_columns(summary: pd.DataFrame, knob: str) -> list[str]:
    """The varying knobs and params other than ``knob``: what tells one configuration from another."""
    return [c for c in suite_varying(summary, summary["suite"].iloc[0]) if c != knob]


def configurations(summary: pd.DataFrame, knob: str = "mbs") -> list[tuple[str, pd.DataFrame]]:
    """``(name, points)`` for each configuration of one suite that was run at several ``knob``
    values or searched (a search whose first probe did not fit ran one), points sorted by ``knob``."""
    if summary.empty or knob not in summary.columns:
        return []
    cols = config_columns(summary, knob)
    groups = summary.groupby(group_keys(summary, cols), sort=False, dropna=False) if cols else [((), summary)]
    searched = [points.sort_values(knob) for _, points in groups
                if points[knob].nunique() > 1 or _searched(points)]
    labels = [_base_label(points, knob) for points in searched]
    if all(labels) and len(set(labels)) == len(labels):  # the suite named them: "baseline", "optimized"
        return list(zip(labels, searched, strict=True))
    # else name each by what differs among the searched configurations only
    names = varying_columns(pd.DataFrame([points.iloc[0] for points in searched]), cols) if searched else []
    return [(describe(points.iloc[0], names), points) for points in searched]


def _searched(points: pd.DataFrame) -> bool:
    return f"extra.{SEARCH_GROUP}" in points and points[f"extra.{SEARCH_GROUP}"].notna().any()


def _base_label(points: pd.DataFrame, knob: str) -> str | None:
    """The suite label all of a configuration's points share: before a grid's or search's values
    ("base mbs=8") and before an ``@`` that names the point's ``knob`` value ("+bf16@52")."""
    def base(label: object, value: object) -> str | None:
        if not isinstance(label, str):
            return None
        label = label.split(" ")[0]
        stem, at, tail = label.rpartition("@")
        return stem if at and stem and tail == str(value) else label

    bases = {base(label, value) for label, value in zip(points["label"], points[knob], strict=True)}
    return bases.pop() if len(bases) == 1 else None


def effective_throughput(summary: pd.DataFrame, knob: str = "mbs", headroom_gib: float | None = None,
                         zero_retries: bool = False, search_max: int | None = None) -> pd.DataFrame:
    """Each configuration at its own largest feasible ``knob`` (every repeat ok and, as the
    suite's search asks, no allocator retries and the memory headroom kept), with the smallest
    value above it that is not and why (or that the search stopped at its ``search_max``), and
    the throughput ratio to the first configuration with its interval and verdict (over processes).
    """
    columns = ["configuration", "largest_ok", rec.SAMPLES_PER_S_PER_GPU, rec.STEP_TIME_S,
               rec.PEAK_MEM_RESERVED_GIB, "first_failing", "ratio", "ratio_low", "ratio_high", "verdict"]
    rows, first = [], None
    for i, (name, points) in enumerate(configurations(summary, knob)):
        why = pd.Series([infeasibility(row["status"], row, headroom_gib, zero_retries) for _, row in points.iterrows()],
                        index=points.index, dtype=object)
        fits = points[why.isna()]
        best = fits.iloc[-1] if len(fits) else None
        above = why if best is None else why[points[knob] > best[knob]]
        failing = above.dropna()
        if len(failing):
            first_failing = f"{points.loc[failing.index[0], knob]} ({failing.iloc[0]})"
        elif best is not None and search_max is not None and best[knob] >= search_max:
            first_failing = f"none up to the search's max ({search_max})"
        else:
            first_failing = None
        row = {
            "configuration": name,
            "largest_ok": best[knob] if best is not None else None,
            rec.SAMPLES_PER_S_PER_GPU: best[rec.SAMPLES_PER_S_PER_GPU] if best is not None else np.nan,
            rec.STEP_TIME_S: best[rec.STEP_TIME_S] if best is not None else np.nan,
            rec.PEAK_MEM_RESERVED_GIB: best[rec.PEAK_MEM_RESERVED_GIB] if best is not None else np.nan,
            "first_failing": first_failing,
        }
        if i == 0:  # the reference the others are a ratio of
            first, row["ratio"] = best, 1.0 if best is not None else np.nan
        elif best is not None and first is not None:
            change = point_changes(first, best)
            row.update(ratio=1 + change["throughput_change"], ratio_low=1 + change["throughput_change_low"],
                       ratio_high=1 + change["throughput_change_high"], verdict=change["verdict"])
        rows.append(row)
    return pd.DataFrame(rows, columns=columns)
