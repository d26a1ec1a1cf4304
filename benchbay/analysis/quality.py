"""How far a point's figures can be trusted: a noisy steady window (a high coefficient of
variation of its step times), or a machine that was not quiet while it ran (the runner's health
check, the ``health.*`` columns: see :mod:`benchbay.collect.health`).

Neither changes a figure or a verdict; both are said beside it, so that a reader does not take
noise for an effect.
"""

from __future__ import annotations

from collections.abc import Iterable

import pandas as pd

from benchbay.analysis.frame import is_missing
from benchbay.record import SKIPPED_STEPS

#: above this coefficient of variation of the steady steps, a median of a few steps moves by
#: several percent from one run to the next (a quiet GPU step is below 0.02)
NOISY_CV = 0.10
POINT_WARNINGS, MACHINE_WARNINGS = "health.warnings", "health.machine_warnings"


def is_noisy(cv: float | None) -> bool:
    return not is_missing(cv) and cv > NOISY_CV


def noise_note(cv: float | None) -> str | None:
    return f"noisy: CV {cv:.2f}" if is_noisy(cv) else None


def warnings_of(rows: pd.DataFrame, column: str = POINT_WARNINGS) -> list[str]:
    """The distinct health warnings of these records (a point's repeats, a run), first seen first."""
    if column not in rows:
        return []
    return list(dict.fromkeys(w for listed in rows[column] if isinstance(listed, list) for w in listed))


def graph_break_note(rows: pd.DataFrame) -> str | None:
    """``compiled in part: 6 graph breaks (Failed to trace builtin operator (x3))``: a compiled point
    whose regions broke runs those parts eagerly, so its compile knob acted only in part (a
    regression once hid that: recomputed blocks breaking out of compile, every one of them)."""
    counts = [c for c in rows.get("extra.graph_breaks", ()) if not is_missing(c) and c > 0]
    if not counts:
        return None
    reasons = next((r for r in rows.get("extra.graph_break_reasons", ()) if isinstance(r, list) and r), None)
    return f"compiled in part: {int(max(counts))} graph breaks" + (f" ({reasons[0]})" if reasons else "")


def skipped_note(rows: pd.DataFrame) -> str | None:
    """``2 steps skipped by its GradScaler``: a command's steps whose gradients held an inf or a NaN,
    so its optimizer did not step (fp16's scale search); timed as steps, said beside them."""
    counts = [c for c in rows.get(SKIPPED_STEPS, ()) if not is_missing(c) and c > 0]
    return f"{int(max(counts))} steps skipped by its GradScaler (inf or NaN gradients)" if counts else None


def cards_note(rows: pd.DataFrame) -> str | None:
    """``repeats on 2 cards``: a point's repeats measured on different GPUs (a run resumed on another
    host keeps its machine key), whose pooled figures mix two cards' speeds."""
    cards = {c for c in rows.get("env.gpu_uuid_hash", ()) if not is_missing(c)}
    return f"repeats on {len(cards)} cards" if len(cards) > 1 else None


def notes(cv: float | None, warnings: Iterable[str]) -> str:
    """``noisy: CV 0.41; busy CPU: ...``, or "" for a point measured quietly."""
    return "; ".join(n for n in (noise_note(cv), *warnings) if n)
