"""The verdict on an optimizer's update fidelity (benchbay.collect.fidelity measures the applied share
of an fp32 AdamW's update): a rule on two numbers, which the tables read without torch."""

from __future__ import annotations

import math

#: faithful when the applied share of the reference update is within this of 1
TOLERANCE = 0.10
#: lossy only when the share is this many standard errors outside the faithful band: stochastic
#: rounding is noisy per element but unbiased, and noise alone must not make a point lossy
Z = 3.0


def verdict(share: float | None, se: float | None) -> str | None:
    """faithful | lossy | uncertain (the sample cannot tell), None where nothing was measured."""
    if share is None or not math.isfinite(share):
        return None
    if abs(share - 1.0) <= TOLERANCE:
        return "faithful"
    margin = Z * (se or 0.0)
    if share + margin < 1.0 - TOLERANCE or share - margin > 1.0 + TOLERANCE:
        return "lossy"
    return "uncertain"
