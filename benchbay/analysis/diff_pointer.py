"""The ``benchbay diff`` that explains a regressed point, where both sides have its profile.

A side's profile of a point is an ok record with the point's label and a profile's phases: in
the side's run itself, else in the newest run of ``<suite>-profile`` under the results root
measured on the same machine at the same commit (``env.machine_key``, ``env.git_commit``): the
profile of that code on that machine. ``gate`` and ``compare`` print the command for each
regressed point whose sides both have one, and say which side lacks one otherwise.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pandas as pd

from benchbay.store import read_records


def _profiled(record: dict, label: str) -> bool:
    return record.get("status") == "ok" and record.get("label") == label and "phases" in (record.get("extra") or {})


def find_profile(run: Path, label: str, results_root: str | Path) -> Path | None:
    """The run holding a profile of ``run``'s point ``label`` (see the module docstring), or None."""
    records = [r for r in read_records(run) if r.get("label") == label]
    if any(_profiled(r, label) for r in records):
        return Path(run)
    measured = {(r.get("suite"), (r.get("env") or {}).get("machine_key"), (r.get("env") or {}).get("git_commit"))
                for r in records}
    for suite in sorted({suite for suite, _, _ in measured if suite}):
        for candidate in sorted((Path(results_root) / f"{suite}-profile").glob("*/"), reverse=True):  # newest first
            if any(_profiled(r, label) and (suite, (r.get("env") or {}).get("machine_key"),
                                            (r.get("env") or {}).get("git_commit")) in measured
                   for r in read_records(candidate)):
                return candidate
    return None


def regressed_labels(checks: pd.DataFrame) -> list[str]:
    """The labels of the regressed points of a gate's or compare's table, in its order."""
    if checks.empty or "regression" not in checks:
        return []
    return [str(label) for label in dict.fromkeys(checks.loc[checks["regression"].astype(bool), "label"])
            if isinstance(label, str)]


def diff_pointers(checks: pd.DataFrame, baseline: Path, candidate: Path, results_root: str | Path) -> list[str]:
    """One line per regressed point: the exact ``benchbay diff`` of its two profiles, or which side
    has none and the command that profiles it."""
    lines = []
    for label in regressed_labels(checks):
        sides = {side: find_profile(run, label, results_root) for side, run in
                 (("baseline", baseline), ("candidate", candidate))}
        if all(sides.values()):
            quoted = shlex.quote(label)
            lines.append(f"- {label}: `benchbay diff {shlex.quote(str(sides['baseline']))} "
                         f"{shlex.quote(str(sides['candidate']))} --label-a {quoted} --label-b {quoted}`")
        else:
            missing = " and ".join(side for side, found in sides.items() if found is None)
            lines.append(f"- {label}: no profile of the {missing} (at its commit: `benchbay profile SUITE --point "
                         f"{shlex.quote(label)}`; `benchbay profile SUITE --from-gate RUN` profiles every "
                         "regressed point)")
    return lines


def format_pointers(lines: list[str]) -> str:
    """The section gate and compare end with ("" without a regression)."""
    return "\n\n#### Where the time went\n\n" + "\n".join(lines) if lines else ""
