"""The comparison as text: its cells (a figure, a ratio with its interval, a note), which the gate's
table shares, and the Markdown table ``benchbay compare`` prints."""

from __future__ import annotations

from typing import Any

import pandas as pd

from benchbay.analysis.frame import is_missing
from benchbay.analysis.metrics import UNCHANGED
from benchbay.markdown import markdown_table


def format_note(*texts: Any) -> str:
    """The non-empty texts (a reason, a caution) joined."""
    return "; ".join(str(t) for t in texts if not is_missing(t) and str(t))


def format_value(value: Any) -> str:
    return "-" if is_missing(value) else f"{value:.4g}"


def format_ratio(row: pd.Series | dict) -> str:
    """``1.103 [1.095, 1.111]``, or ``-`` when there is no ratio."""
    if is_missing(row["ratio"]):
        return "-"
    if is_missing(row["ci_low"]) or row["ci_low"] == row["ci_high"]:  # no interval, or one collapsed to the ratio
        return f"{row['ratio']:.3f}"
    return f"{row['ratio']:.3f} [{row['ci_low']:.3f}, {row['ci_high']:.3f}]"


def format_compare(table: pd.DataFrame, *, only_changes: bool = False) -> str:
    """The comparison as a Markdown table (readable in a terminal too), reasons in the last column."""
    if table.empty:
        return "No points to compare."
    if only_changes:
        table = table[~table["verdict"].isin(UNCHANGED)]
        if table.empty:
            return "No changes."
    rows = [
        (r["point"], f"{r['metric']} ({r['statistic']})", format_value(r["baseline"]), format_value(r["candidate"]),
         format_ratio(r), format_value(r["p_value"]), r["verdict"], format_note(r["reason"], r.get("caution")))
        for _, r in table.iterrows()
    ]
    headers = ("point", "metric", "baseline", "candidate", "ratio [CI]", "p", "verdict", "note")
    return markdown_table(headers, rows) + caution_line(table)


def caution_line(table: pd.DataFrame) -> str:
    """A closing line when points ran noisy or on a busy machine, else ""."""
    doubtful = table.loc[table["caution"].astype(bool), "point"].nunique() if "caution" in table else 0
    if not doubtful:
        return ""
    return (f"\n\nCaution: {doubtful} of {table['point'].nunique()} points ran noisy or on a machine that was not "
            "quiet (see the notes): a verdict there may be noise; measure again on a quiet machine.")
