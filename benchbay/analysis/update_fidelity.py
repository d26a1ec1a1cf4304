"""The verdict on an optimizer's update fidelity (benchbay.collect.fidelity measures the applied share
of an fp32 AdamW's update): a rule on two numbers, which the tables read without torch; and the
fidelity cell that shows compute fidelity's verdict beside it (benchbay.collect.compute_fidelity)."""

from __future__ import annotations

import math

#: faithful when the applied share of the reference update is within this of 1
TOLERANCE = 0.10
#: lossy only when the share is this many standard errors outside the faithful band: stochastic
#: rounding is noisy per element but unbiased, and noise alone must not make a point lossy; faithful
#: only when this many standard errors fit in the band, so noise alone cannot land a share in it
Z = 3.0


def verdict(share: float | None, se: float | None) -> str | None:
    """faithful | lossy | uncertain (the sample cannot tell), None where nothing was measured. ``se``
    None counts as no noise (a share given alone); a NaN one can tell nothing: uncertain."""
    if share is None or not math.isfinite(share):
        return None
    noise = 0.0 if se is None else se
    if abs(share - 1.0) <= TOLERANCE and noise <= TOLERANCE / Z:
        return "faithful"
    margin = Z * noise
    if share + margin < 1.0 - TOLERANCE or share - margin > 1.0 + TOLERANCE:
        return "lossy"
    return "uncertain"


def with_compute(label: str, compute: str | None, cosine: float | None, skipped: bool = False) -> str:
    """The fidelity cell: the update's label, then compute fidelity's verdict and the gradients' cosine
    to the reference (``faithful (1.00); compute lossy (0.9712)``) where it was measured, ``compute not
    measured`` where the record says it could not be (a reference that did not fit), so that the
    update's verdict alone does not read as both."""
    if not isinstance(compute, str) or not compute:
        if not skipped:
            return label
        compute, cosine = "not measured", None
    figure = f" ({cosine:.4f})" if isinstance(cosine, float) and math.isfinite(cosine) else ""
    return f"{label}; compute {compute}{figure}" if label else f"compute {compute}{figure}"
