"""Repeats of a point that failed (oom, error, crash, timeout...), and whether a candidate's share of
them says the point failed though some of its repeats ran: its ok repeats alone would pass a point
that mostly runs out of memory."""

from __future__ import annotations

import pandas as pd

from benchbay.analysis.frame import is_missing
from benchbay.record import FAILED, Status

#: the repeats a reason names one by one; more are counted
_NAMED_REPEATS = 4


def _failed(rows: pd.DataFrame) -> pd.Series:
    """Which rows failed (oom, error, crash, timeout...): a batch search's oom probe is a result."""
    if "status" not in rows:
        return pd.Series(False, index=rows.index)
    failed = rows["status"].isin(FAILED)
    if "extra.search_group" in rows:
        failed &= ~((rows["status"] == Status.OOM) & rows["extra.search_group"].notna())
    return failed


def _share(rows: pd.DataFrame) -> tuple[int, int]:
    """The repeats of ``rows`` that failed, and those that ran (ok or failed; skipped ones did not)."""
    failed = int(_failed(rows).sum())
    return failed, failed + (int((rows["status"] == Status.OK).sum()) if "status" in rows else len(rows))


def failed_repeats(baseline: pd.DataFrame, candidate: pd.DataFrame) -> str | None:
    """Why a point failed where the candidate's repeats failed in a larger share than the
    baseline's: ``2 of 3 candidate repeats failed (repeats 1, 2: oom, CUDA out of memory) against 0
    of 3 in the baseline``; None where they did not."""
    (base_failed, base_ran), (cand_failed, cand_ran) = _share(baseline), _share(candidate)
    if not cand_failed or (base_ran and cand_failed / cand_ran <= base_failed / base_ran):
        return None
    rows = candidate[_failed(candidate)]
    several_runs = "run_id" in rows and rows["run_id"].nunique() > 1
    groups: dict[str, list[str]] = {}  # the repeats of each status and first line of its reason
    for _, row in rows.iterrows():
        reason = row.get("reason")
        first = "" if is_missing(reason) else (str(reason).strip().splitlines() or [""])[0][:80]
        repeat = row.get("repeat")
        groups.setdefault(f"{row['status']}, {first}" if first else str(row["status"]), []).append(
            ("?" if is_missing(repeat) else str(int(repeat))) + (f" of {row['run_id']}" if several_runs else ""))
    said = "; ".join(f"repeat{'s' if len(named) > 1 else ''} {', '.join(named[:_NAMED_REPEATS])}"
                     f"{f' and {len(named) - _NAMED_REPEATS} more' if len(named) > _NAMED_REPEATS else ''}: {why}"
                     for why, named in groups.items())
    return (f"{cand_failed} of {cand_ran} candidate repeats failed ({said}) against {base_failed} of {base_ran} in "
            "the baseline")
