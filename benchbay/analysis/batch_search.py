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
from collections.abc import Callable

from benchbay.record import Record, Status


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


def feasible(record: Record, headroom_gib: float | None = None, zero_retries: bool = False) -> bool:
    """The probe finished its steps (ok), with no allocator retries when ``zero_retries`` (a sign of
    fragmentation, slow steps and a near-OOM) and, with ``headroom_gib``, a peak reserved memory at
    most the device's memory less that headroom."""
    if record.status != Status.OK:
        return False
    m = record.metrics
    if zero_retries and (m.get("alloc_retries") or 0) > 0:
        return False
    if headroom_gib is not None and m.get("device_mem_total_gib") and m.get("peak_mem_reserved_gib") is not None:
        return m["peak_mem_reserved_gib"] <= m["device_mem_total_gib"] - headroom_gib
    return True


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
