"""Regression thresholds written by hand, in the spirit of pytest-benchmark's ``--benchmark-compare-fail``.

Grammar::

    threshold := [ selector "/" ] metric [ ":" statistic ] ":" number "%"
    selector  := key "=" pattern { "," key "=" pattern }

- ``metric`` is one of :data:`METRICS` (``step_time``, ``samples_per_s``, ``samples_per_s_per_gpu``,
  ``mfu``, ``peak_mem``, ``peak_mem_reserved``).
- ``statistic`` is one of ``median`` (the default), ``mean``, ``min``, ``max``, ``p10``, ``p90``;
  it is taken over the steady-state steps of each repeat (a process), whose values the gate tests.
- ``number%`` is the regression the gate is sized to catch: slower, less throughput, or more
  memory. At the repeats the gate asks for on the machine (alpha 5%, power 95% at 80% of it, from
  the spread between processes) one of this size fails at least 95% of the time; a real one of at least half of it
  (:data:`FAIL_SHARE`) fails (a memory peak, which repeats exactly: at least all of it); a run too
  short to rule out one of this size cannot support a verdict (benchbay.analysis.gate).
  Improvements never fail a gate.
- ``selector`` restricts the threshold to matching points: ``key`` is a column of the results
  frame (``label``, a knob such as ``mbs`` or ``compile``, ``param.preset``, ``suite``...),
  ``pattern`` a value or a shell-style glob (``label=+compile*``). Several ``key=pattern`` pairs,
  comma-separated, must all match. Without a selector the threshold covers every point.

Examples: ``step_time:median:5%``, ``peak_mem:2%``, ``samples_per_s:mean:3%``,
``label=+compile/step_time:median:5%``, ``mbs=32,compile=blocks/peak_mem:1.5%``.
"""

from __future__ import annotations

import fnmatch
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from benchbay.analysis.metrics import METRICS
from benchbay.analysis.stats import STATISTICS

_EXPECTED = (
    "expected '[key=value[,key=value...]/]metric[:statistic]:N%', e.g. 'step_time:median:5%', "
    "'peak_mem:2%' or 'label=+compile/step_time:median:5%'"
)
_PERCENT = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)%$")
#: the share of a threshold that a real regression must reach to fail: at the repeats the gate asks
#: for, the interval clears no change once the estimate passes about half the threshold, so that one
#: of the threshold's size fails 95% of the time; more repeats do not fail a real change much smaller
FAIL_SHARE = 0.5


@dataclass(frozen=True)
class Threshold:
    """One parsed threshold: which points, which metric and statistic, the tolerated regression."""

    metric: str
    statistic: str
    limit: float  # a fraction: 0.05 for "5%"
    selector: tuple[tuple[str, str], ...] = field(default=())
    text: str = ""

    def applies_to(self, point: Mapping[str, Any]) -> bool:
        """True when every ``key=pattern`` of the selector matches ``point`` (a row or dict)."""
        return all(key in point and value_matches(point[key], pattern) for key, pattern in self.selector)

    def __str__(self) -> str:
        return self.text or format_threshold(self)


def value_matches(value: Any, pattern: str) -> bool:
    """True when ``value`` (a frame cell) equals ``pattern`` as text or number, or fits it as a glob."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # a knob column with gaps turns 32 into 32.0
    if fnmatch.fnmatchcase(str(value), pattern):
        return True
    try:
        return math.isclose(float(value), float(pattern))
    except (TypeError, ValueError):
        return False


def _fail(text: str, problem: str) -> ValueError:
    return ValueError(f"invalid threshold {text!r}: {problem}; {_EXPECTED}")


def _parse_selector(text: str, selector: str) -> tuple[tuple[str, str], ...]:
    pairs = []
    for item in selector.split(","):
        key, eq, pattern = item.partition("=")
        key, pattern = key.strip(), pattern.strip()
        if not eq or not key or not pattern:
            raise _fail(text, f"point selector part {item!r} is not key=value")
        pairs.append((key, pattern))
    return tuple(pairs)


def parse_threshold(text: str) -> Threshold:
    """Parse one threshold string; raises ValueError saying what was expected."""
    if not isinstance(text, str) or not text.strip():
        raise _fail(str(text), "it is empty")
    spec = text.strip()
    selector_text, slash, body = spec.rpartition("/")
    if slash and not selector_text:
        raise _fail(text, "nothing before '/': give a point selector such as 'label=+compile' or drop the '/'")
    selector = _parse_selector(text, selector_text) if slash else ()
    parts = body.split(":")
    if len(parts) == 2:
        metric, statistic, amount = parts[0], "median", parts[1]
    elif len(parts) == 3:
        metric, statistic, amount = parts
    else:
        raise _fail(text, f"{body!r} has {len(parts)} ':'-separated parts, expected 2 or 3")
    metric, statistic, amount = metric.strip(), statistic.strip(), amount.strip()
    if metric not in METRICS:
        raise _fail(text, f"unknown metric {metric!r} (known: {', '.join(METRICS)})")
    if statistic not in STATISTICS:
        raise _fail(text, f"unknown statistic {statistic!r} (known: {', '.join(STATISTICS)})")
    match = _PERCENT.match(amount)
    if not match:
        raise _fail(text, f"limit {amount!r} is not a percentage such as '5%'")
    limit = float(match.group(1)) / 100.0
    return Threshold(metric=metric, statistic=statistic, limit=limit, selector=selector, text=spec)


def format_threshold(threshold: Threshold) -> str:
    """The canonical text of a threshold (round-trips through :func:`parse_threshold`)."""
    body = f"{threshold.metric}:{threshold.statistic}:{threshold.limit * 100:g}%"
    if not threshold.selector:
        return body
    return ",".join(f"{k}={v}" for k, v in threshold.selector) + "/" + body
