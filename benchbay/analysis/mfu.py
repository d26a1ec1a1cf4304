"""Model FLOPs utilisation: achieved training FLOP/s over the device's peak.

MFU = flops_per_sample (fwd+bwd of the trained parts) x samples/s/GPU / peak FLOP/s. The peak is
the dense bf16 tensor-core figure of the device, looked up by its name (``env.gpu``, as
``torch.cuda.get_device_name`` reports it). The ``peak_flops`` argument (FLOP/s) forces another,
e.g. for fp32 points or an unlisted device (the command line reads it from ``BENCHBAY_PEAK_TFLOPS``).
CPUs get None.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import pandas as pd


@dataclass(frozen=True)
class Peak:
    match: str  # case-insensitive substring of the device name
    flops: float
    source: str
    datasheet: float | None = None  # the vendor's dense bf16 figure, where ``flops`` was measured


#: first match wins, so specific names come before their family
PEAKS: tuple[Peak, ...] = (
    Peak("H200", 799e12, "measured: bf16 matmul 8192^3 on our H200 (datasheet: 989 dense)", 989e12),
    Peak("H100 PCIe", 756e12, "NVIDIA H100 datasheet, PCIe, dense bf16"),
    Peak("H100", 989e12, "NVIDIA H100 datasheet, SXM, dense bf16"),
    Peak("A100", 312e12, "NVIDIA A100 datasheet, dense bf16"),
    Peak("L40S", 362e12, "NVIDIA L40S datasheet, dense bf16"),
    Peak("RTX PRO 6000 Blackwell", 500e12, "NVIDIA RTX PRO 6000 Blackwell datasheet, dense bf16 (~504)"),
)


def lookup_peak(device: str | None) -> Peak | None:
    """The table entry for a device name (None for CPUs, missing or unlisted devices)."""
    if not isinstance(device, str):
        return None
    name = device.lower()
    return next((p for p in PEAKS if p.match.lower() in name), None)


def peak_flops_for(device: str | None, peak_flops: float | None = None) -> float | None:
    """Peak FLOP/s for a device: ``peak_flops`` if given, else the table's figure."""
    if peak_flops is not None:
        return float(peak_flops)
    peak = lookup_peak(device)
    return peak.flops if peak else None


def _finite(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def mfu_column(df: pd.DataFrame, peak_flops: float | None = None) -> pd.Series:
    """MFU per row: the record's own value, recomputed where it is missing or a peak is forced.

    The recomputation needs ``flops_per_sample``, ``samples_per_s_per_gpu`` and a peak (the
    argument, the record's ``peak_flops``, or the table entry for ``env.gpu``).
    """
    forced = None if peak_flops is None else float(peak_flops)

    def row_mfu(row: pd.Series) -> float:
        recorded = row.get("mfu")
        if forced is None and _finite(recorded):
            return float(recorded)
        flops, rate = row.get("flops_per_sample"), row.get("samples_per_s_per_gpu")
        peak = forced
        if peak is None:
            peak = row.get("peak_flops") if _finite(row.get("peak_flops")) else peak_flops_for(row.get("env.gpu"))
        if not (_finite(flops) and _finite(rate) and _finite(peak)) or peak <= 0:
            return float("nan")
        return float(flops) * float(rate) / float(peak)

    if df.empty:
        return pd.Series(dtype=float)
    return df.apply(row_mfu, axis=1).astype(float)


def datasheet_mfu_column(df: pd.DataFrame) -> pd.Series:
    """MFU against the datasheet's dense bf16 peak, where the table's peak is a measured ceiling
    (an H200: 989 TFLOP/s against 799 measured), so that no reader takes one for the other."""
    def row_mfu(row: pd.Series) -> float:
        peak = lookup_peak(row.get("env.gpu"))
        flops, rate = row.get("flops_per_sample"), row.get("samples_per_s_per_gpu")
        if peak is None or peak.datasheet is None or not (_finite(flops) and _finite(rate)):
            return float("nan")
        return float(flops) * float(rate) / peak.datasheet

    if df.empty:
        return pd.Series(dtype=float)
    return df.apply(row_mfu, axis=1).astype(float)


def peak_sources(devices, peak_flops: float | None = None) -> dict[str, str]:
    """``{device: "<TFLOP/s> (<source>)"}`` for a footnote under an MFU column."""
    out = {}
    for device in sorted({d for d in devices if isinstance(d, str)}):
        if peak_flops is not None:
            out[device] = f"{peak_flops / 1e12:g} TFLOP/s (override)"
        elif (peak := lookup_peak(device)) is not None:
            out[device] = f"{peak.flops / 1e12:g} TFLOP/s ({peak.source})"
    return out
