"""What a sample costs: money at a GPU-hour price, and the energy the worker measured.

The cost per million samples is ``price / 3600 / samples_per_s_per_gpu * 1e6``, from the
samples/s/GPU the table beside it shows (samples per step / step), at the suite's
``price_per_gpu_hour`` or the command line's ``--price-per-gpu-hour`` (which wins), in the
price's currency. The energy figures are the records' own (``energy_j_per_sample``, and
``energy_watts``: the mean power of each process's GPU over the measured steps). A figure a
point lacks is said to be absent, never shown as 0, and the notes under a table say why (MFU's
too).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import TYPE_CHECKING

import pandas as pd

from benchbay.analysis.frame import is_missing
from benchbay.analysis.mfu import mfu_note
from benchbay.record import ENERGY_J_PER_SAMPLE, ENERGY_WATTS, SAMPLES_PER_S_PER_GPU

if TYPE_CHECKING:
    from benchbay.suite.model import SuiteMeta

COST = "cost_per_m_samples"
PRICE_KEY = "price_per_gpu_hour"
#: the per-sample figures shown beside throughput, in display order
FIGURES = (COST, ENERGY_J_PER_SAMPLE, ENERGY_WATTS)
ABSENT = "absent"
NO_PRICE = f"cost per 1M samples: no GPU-hour price (the suite's {PRICE_KEY} or --price-per-gpu-hour)"


def check_price(value: object, where: str = PRICE_KEY) -> float:
    """A GPU-hour price: a finite number > 0 (a stored manifest is read as untrusted as a suite)."""
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{where}: a price per GPU-hour > 0, got {value!r}")
    return float(value)


def prices(metas: Mapping[str, SuiteMeta], override: float | None = None) -> float | dict[str, float]:
    """The price for every suite (``override``, the command line's), else ``{suite: price}`` from
    each suite's key."""
    if override is not None:
        return check_price(override, "--price-per-gpu-hour")
    return {suite: check_price(meta.price_per_gpu_hour, f"suite {suite}: {PRICE_KEY}")
            for suite, meta in metas.items() if meta.price_per_gpu_hour is not None}


def cost_per_million_samples(samples_per_s_per_gpu: float, price_per_gpu_hour: float) -> float:
    """The price of a million samples at ``samples_per_s_per_gpu`` (NaN without a rate)."""
    if is_missing(samples_per_s_per_gpu) or not samples_per_s_per_gpu > 0:
        return math.nan
    return price_per_gpu_hour / 3600 / samples_per_s_per_gpu * 1e6


def price_column(summary: pd.DataFrame, price: float | Mapping[str, float] | None) -> pd.Series:
    """The GPU-hour price of each point, so its table can say what its cost is at: one price for
    every suite, or one per suite name (NaN without one)."""
    if not len(summary):
        return pd.Series(dtype=float)
    chosen = [price.get(suite) if isinstance(price, Mapping) else price for suite in summary["suite"]]
    return pd.Series([math.nan if p is None else p for p in chosen], index=summary.index, dtype=float)


def cost_column(summary: pd.DataFrame) -> pd.Series:
    """Each point's cost per 1M samples at its price (``price_column``) over its samples/s/GPU."""
    if not len(summary):
        return pd.Series(dtype=float)
    costs = [math.nan if is_missing(p) else cost_per_million_samples(rate, p)
             for rate, p in zip(summary[SAMPLES_PER_S_PER_GPU], summary[PRICE_KEY], strict=True)]
    return pd.Series(costs, index=summary.index, dtype=float)


def say_absent(table: pd.DataFrame, ok: pd.Series) -> pd.DataFrame:
    """A table whose shown figures read ``absent`` on the ok rows that lack them (not 0, not blank)."""
    table = table.copy()
    for column in FIGURES:
        if column in table:
            lacking = ok.to_numpy() & table[column].map(is_missing).to_numpy()
            table[column] = table[column].astype(object).where(~lacking, ABSENT)
    return table


def present(frame: pd.DataFrame) -> list[str]:
    """The per-sample figures some row of ``frame`` has."""
    return [c for c in FIGURES if c in frame and frame[c].map(lambda v: not is_missing(v)).any()]


def energy_note(rows: pd.DataFrame) -> str | None:
    """Why none of the rows (points or records) has an energy figure; None when one has."""
    if ENERGY_J_PER_SAMPLE in present(rows):
        return None
    reasons = rows["extra.energy_absent"].dropna().unique() if "extra.energy_absent" in rows else []
    return "energy per sample: " + (f"absent ({'; '.join(map(str, reasons))})" if len(reasons)
                                    else "not recorded (records from before the energy meter)")


def cost_notes(points: pd.DataFrame) -> list[str]:
    """The price the cost column is at, or why it is absent; and why energy is, and MFU
    (``benchbay.analysis.mfu``), where they are: the notes under a table of a sample's figures."""
    shown = points.loc[points[COST].map(lambda v: not is_missing(v)), PRICE_KEY] if COST in present(points) else []
    price = (f"cost per 1M samples at {', '.join(f'{p:g}' for p in sorted(set(shown)))} per GPU-hour "
             "(in the price's currency), over samples/s/GPU") if len(shown) else NO_PRICE
    return [note for note in (price, energy_note(points), mfu_note(points)) if note]
