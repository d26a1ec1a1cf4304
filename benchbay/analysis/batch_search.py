"""The largest feasible value of a knob (the micro-batch size) in a bounded number of probes.

``largest_feasible`` assumes feasibility is monotone (a batch that fits means every smaller one
fits). Its preferred probes are doubling from ``lo`` (``lo, 2lo, 4lo, ...``) until one fails,
then bisection between the last pass and the first fail: small batches first, never far past the
boundary. Plain doubling-then-bisection can take about twice ``log2(hi / lo)`` probes, though (16
for a boundary of 128 in 1..256), so every probe is also kept within a budget, ``max_probes``
(default ``ceil(log2(hi / lo)) + 2``): a probe moves up just enough that the probes left can still
pin the answer whatever they find. With the default budget the search is a bisection that starts
at ``lo``; with a generous one it is plain doubling then bisection. The runner makes each probe
run a fresh process and judges its record with :func:`ran_ok` or :func:`fits_with_headroom`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any


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


def _metrics(record: Mapping[str, Any]) -> Mapping[str, Any]:
    """A nested record's metrics, or a flattened row itself."""
    return record.get("metrics") or record


def ran_ok(record: Mapping[str, Any]) -> bool:
    """The plain criterion: the probe finished its steps."""
    return record.get("status") == "ok"


def fits_with_headroom(headroom_gib: float, limit_gib: float | None = None) -> Callable[[Mapping[str, Any]], bool]:
    """A stricter criterion: ok, no allocator retries (a sign of fragmentation, slow steps and a
    near-OOM) and peak reserved memory (allocated if reserved is missing) at most ``limit_gib -
    headroom_gib``; ``limit_gib`` defaults to the record's ``device_mem_total_gib``."""

    def criterion(record: Mapping[str, Any]) -> bool:
        metrics = _metrics(record)
        limit = limit_gib if limit_gib is not None else metrics.get("device_mem_total_gib")
        peak = metrics.get("peak_mem_reserved_gib")
        peak = peak if peak is not None else metrics.get("peak_mem_allocated_gib")
        if not ran_ok(record) or limit is None or peak is None:
            return False
        return (metrics.get("alloc_retries") or 0) == 0 and peak <= limit - headroom_gib

    return criterion
