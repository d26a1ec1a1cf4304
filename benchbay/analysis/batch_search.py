"""The largest feasible value of a knob (the micro-batch size) in a bounded number of probes.

``largest_feasible`` assumes feasibility is monotone (a batch that fits means every smaller one
fits). Its preferred probes are doubling from ``lo`` (``lo, 2lo, 4lo, ...``) until one fails,
then bisection between the last pass and the first fail: small batches first, never far past the
boundary. Plain doubling-then-bisection can take about twice ``log2(hi / lo)`` probes, though (16
for a boundary of 128 in 1..256), so every probe is also kept within a budget, ``max_probes``
(default ``ceil(log2(hi / lo)) + 2``): a probe moves up just enough that the probes left can still
pin the answer whatever they find. With the default budget the search is a bisection that starts
at ``lo``; with a generous one it is plain doubling then bisection. The runner makes each probe
a point of its own and judges its record with :func:`feasible`; :func:`search_edges` are the
probes either side of the boundary.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from benchbay.record import ALLOC_RETRIES, DEVICE_MEM_TOTAL_GIB, PEAK_MEM_RESERVED_GIB, Record, Status


def largest_feasible(probe: Callable[[int], bool], lo: int, hi: int,
                     max_probes: int | None = None) -> tuple[int | None, list[int]]:
    """``(largest passing value in [lo, hi] or None, the values probed in order)``.

    ``max_probes`` is raised to ``ceil(log2(hi - lo + 2))`` when smaller: no search can tell the
    ``hi - lo + 2`` possible answers (none, lo ... hi) apart in fewer.
    """
    if not 1 <= lo <= hi:
        raise ValueError(f"need 1 <= lo <= hi, got lo={lo}, hi={hi}")
    default = math.ceil(math.log2(hi / lo)) + 2
    budget = max(math.ceil(math.log2(hi - lo + 2)), default if max_probes is None else max_probes)
    good, bad = lo - 1, hi + 1  # the answer is in [good, bad - 1]; good == lo - 1 stands for none
    probed: list[int] = []
    while bad - good > 1:
        # after this probe each outcome must leave at most 2^(probes left) possible answers
        half = 2 ** (budget - len(probed) - 1)
        preferred = lo if good < lo else 2 * good if bad > hi else (good + bad) // 2
        value = min(max(preferred, bad - half), good + half, bad - 1)
        probed.append(value)
        if probe(value):
            good = value
        else:
            bad = value
    return (good if good >= lo else None), probed


def infeasibility(status: str, metrics: Mapping[str, Any], headroom_gib: float | None = None,
                  zero_retries: bool = False) -> str | None:
    """Why a probe does not count as fitting, or None when it does: its status when not ok;
    "allocator retries" when ``zero_retries`` and the allocator had to free its cache and retry (a
    sign of fragmentation, slow steps and a near-OOM); "under N GiB headroom" when its peak reserved
    memory is above the device's memory less ``headroom_gib``."""
    if status != Status.OK:
        return str(status)
    if zero_retries and (_number(metrics, ALLOC_RETRIES) or 0) > 0:
        return "allocator retries"
    total, reserved = _number(metrics, DEVICE_MEM_TOTAL_GIB), _number(metrics, PEAK_MEM_RESERVED_GIB)
    if headroom_gib is not None and total and reserved is not None and reserved > total - headroom_gib:
        return f"under {headroom_gib:g} GiB headroom"
    return None


def feasible(record: Record, headroom_gib: float | None = None, zero_retries: bool = False) -> bool:
    """The probe counts as fitting (see :func:`infeasibility`)."""
    return infeasibility(record.status, record.metrics, headroom_gib, zero_retries) is None


def _number(metrics: Mapping[str, Any], key: str) -> float | None:
    """A figure, or None where it was not recorded (missing, None or NaN in a summary frame)."""
    value = metrics.get(key)
    return None if value is None or value != value else float(value)


def search_edges(records: list[Record], knob: str, headroom_gib: float | None = None,
                 zero_retries: bool = False) -> list[tuple[str, Record]]:
    """The largest feasible probe and the smallest OOM probe of one configuration's search, as
    ``(role, record)``; either may be missing."""
    fits = [r for r in records if feasible(r, headroom_gib, zero_retries)]
    ooms = [r for r in records if r.status == Status.OOM]
    edges = []
    if fits:
        edges.append(("largest_ok", max(fits, key=lambda r: r.knobs[knob])))
    if ooms:
        edges.append(("smallest_oom", min(ooms, key=lambda r: r.knobs[knob])))
    return edges
