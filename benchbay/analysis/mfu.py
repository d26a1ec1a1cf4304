"""Model FLOPs utilisation: achieved training FLOP/s over the device's peak, labelled with which peak.

MFU = flops_per_sample (fwd+bwd of the trained parts) x samples/s/GPU / peak FLOP/s. The measured
MFU's peak (:func:`denominator`) is one figure per GPU model, not per run: a probe of each run's
machine moves with its clocks and power cap (the same H200 point read 44.3% MFU over one run's
probe and 53.6% over another's), so a point's MFU would move with it. First found: the
``peak_flops`` argument (FLOP/s, e.g. for fp32 points; the command line reads it from
``BENCHBAY_PEAK_TFLOPS``), the table's figure for the device's name (``env.gpu``, as
``torch.cuda.get_device_name`` reports it: a stated sustained ceiling, how it was measured beside
it, or else the datasheet's), else, for a device the table lacks, the GEMM probe of the machine
that ran the record (``env.gemm_tflops``, benchbay.collect.gemm_probe), else the record's own
``peak_flops``. The datasheet MFU divides by the vendor's dense bf16 figure instead. Each row's
``mfu_peak`` says which peak its MFU is over; an FP8 point's ``mfu_fp8`` is over the table's FP8
peak (:func:`fp8_mfu_column`). CPUs get None, and :func:`mfu_note` says why a table
shows no MFU (as ``benchbay.analysis.cost`` says it of cost and energy).
"""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass

import pandas as pd

from benchbay.record import FLOPS_PER_SAMPLE, MFU, PEAK_FLOPS, SAMPLES_PER_S_PER_GPU


@dataclass(frozen=True)
class Peak:
    match: str  # whole words of the device name, in order (case-insensitive: "H200" is not "GH200")
    flops: float
    source: str
    datasheet: float | None = None  # the vendor's dense bf16 figure, where ``flops`` was measured
    fp8: float | None = None  # the dense FP8 peak (None: no FP8 tensor cores, or not in the table)
    fp8_source: str = ""

    @property
    def datasheet_flops(self) -> float:
        return self.flops if self.datasheet is None else self.datasheet


#: first match wins, so specific names come before their family
PEAKS: tuple[Peak, ...] = (
    # a Grace Hopper's GPU is H100-class: its name holds no H100 and its H200-like token is GH200
    # (989: third-party spec tables and torchtitan's, not checked against NVIDIA's GH200 sheet here)
    Peak("GH200", 989e12, "H100-class GPU of the GH200, dense bf16 (1,979 with sparsity)", fp8=1979e12,
         fp8_source="H100-class GPU of the GH200, dense fp8 (3,958 with sparsity)"),
    # 600 W, not the 700 W SXM card the sustained H200 figure was measured on
    Peak("H200 NVL", 835.5e12, "NVIDIA H200 NVL datasheet, dense bf16 (1,671 with sparsity)", fp8=1670.5e12,
         fp8_source="NVIDIA H200 NVL datasheet, dense fp8 (3,341 with sparsity)"),
    Peak("H200", 698e12, "sustained: dense bf16 GEMM 8192^3 (torch 2.11, one H200 at its 700 W cap; 16384^3: "
                         "678), the ceiling a long step meets (datasheet: 989 dense)", 989e12,
         1320e12, "sustained: dense fp8 e4m3 GEMM 8192^3 with per-tensor scales (torch 2.11, torchao 0.18, issue "
                  "51; 16384^3: 1,221; datasheet: 1,979 dense)"),
    Peak("H100 NVL", 835.5e12, "NVIDIA H100 NVL datasheet, dense bf16 (1,671 with sparsity)", fp8=1670.5e12,
         fp8_source="NVIDIA H100 NVL datasheet, dense fp8 (3,341 with sparsity)"),
    Peak("H100 PCIe", 756e12, "NVIDIA H100 datasheet, PCIe, dense bf16", fp8=1513e12,
         fp8_source="NVIDIA H100 datasheet, PCIe, dense fp8"),
    Peak("H100", 989e12, "NVIDIA H100 datasheet, SXM, dense bf16", fp8=1979e12,
         fp8_source="NVIDIA H100 datasheet, SXM, dense fp8"),
    Peak("A100", 312e12, "NVIDIA A100 datasheet, dense bf16"),
    Peak("L40S", 362e12, "NVIDIA L40S datasheet, dense bf16", fp8=733e12,
         fp8_source="NVIDIA L40S datasheet, dense fp8"),
    Peak("RTX PRO 6000 Blackwell", 500e12, "NVIDIA RTX PRO 6000 Blackwell datasheet, dense bf16 (~504)"),
)


def _words(name: str) -> tuple[str, ...]:
    return tuple(re.findall(r"[a-z0-9]+", name.lower()))


def _names(device: str, match: str) -> bool:
    """Whether the device's name holds the entry's words in a row: a substring would read
    "NVIDIA GH200 480GB" as an H200 and "NVIDIA RTX A1000" as an A100."""
    words, wanted = _words(device), _words(match)
    return any(words[i:i + len(wanted)] == wanted for i in range(len(words) - len(wanted) + 1))


def lookup_peak(device: str | None) -> Peak | None:
    """The table entry for a device name (None for CPUs, missing or unlisted devices)."""
    if not isinstance(device, str):
        return None
    return next((p for p in PEAKS if _names(device, p.match)), None)


def peak_flops_for(device: str | None, peak_flops: float | None = None,
                   gemm_tflops: float | None = None) -> float | None:
    """Peak FLOP/s for a device: ``peak_flops`` if given, else the table's figure for its model,
    else (a device the table lacks) its machine's GEMM probe."""
    if peak_flops is not None:
        return float(peak_flops)
    peak = lookup_peak(device)
    if peak is not None:
        return peak.flops
    return float(gemm_tflops) * 1e12 if _finite(gemm_tflops) and gemm_tflops > 0 else None


def _finite(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def denominator(row: pd.Series | dict, peak_flops: float | None = None) -> tuple[float, str] | None:
    """The measured MFU's peak FLOP/s for a record and which peak it is (see the module docstring)."""
    if peak_flops is not None:
        return float(peak_flops), "override"
    table = lookup_peak(row.get("env.gpu"))
    if table is not None:
        return table.flops, "datasheet" if table.datasheet is None else "table, sustained"
    gemm = row.get("env.gemm_tflops")
    if _finite(gemm) and gemm > 0:
        return float(gemm) * 1e12, "GEMM probe"
    recorded = row.get(PEAK_FLOPS)
    return (float(recorded), "as recorded") if _finite(recorded) and recorded > 0 else None


def _achieved(row: pd.Series | dict) -> float | None:
    """FLOP/s a GPU: FLOPs a sample times samples/s/GPU, else (a record without its FLOPs) the
    recorded MFU times the peak it was recorded over."""
    flops, rate = row.get(FLOPS_PER_SAMPLE), row.get(SAMPLES_PER_S_PER_GPU)
    if _finite(flops) and _finite(rate):
        return float(flops) * float(rate)
    mfu, peak = row.get(MFU), row.get(PEAK_FLOPS)
    return float(mfu) * float(peak) if _finite(mfu) and _finite(peak) and peak > 0 else None


def _by_row(df: pd.DataFrame, figure, dtype) -> pd.Series:
    return df.apply(figure, axis=1).astype(dtype) if len(df) else pd.Series(dtype=dtype)


def row_mfu(row: pd.Series | dict, peak_flops: float | None = None) -> float:
    """One record's MFU over :func:`denominator`'s peak; its own figure where it cannot be
    recomputed (no FLOPs, rate or peak). Compare, gate and history judge this figure, as the report
    shows it: records of one GPU hold peaks of their own runs' probes (799, 663, 658 TFLOP/s on one
    H200), and a ratio of MFUs over two of them moves with the probe, not the speed."""
    achieved, peak = _achieved(row), denominator(row, peak_flops)
    if achieved is None or peak is None:
        recorded = row.get(MFU)
        return float(recorded) if peak_flops is None and _finite(recorded) else float("nan")
    return achieved / peak[0]


def mfu_column(df: pd.DataFrame, peak_flops: float | None = None) -> pd.Series:
    """MFU per row (:func:`row_mfu`)."""
    return _by_row(df, lambda row: row_mfu(row, peak_flops), float)


def peak_label_column(df: pd.DataFrame, peak_flops: float | None = None) -> pd.Series:
    """Which peak each row's MFU is over: ``812 TFLOP/s (GEMM probe)`` ("" without an MFU)."""
    def label(row: pd.Series) -> str:
        peak = denominator(row, peak_flops)
        return "" if peak is None or _achieved(row) is None else f"{peak[0] / 1e12:.4g} TFLOP/s ({peak[1]})"

    return _by_row(df, label, object)


def datasheet_mfu_column(df: pd.DataFrame, peak_flops: float | None = None) -> pd.Series:
    """MFU against the datasheet's dense bf16 peak, where the measured MFU is over another (a GEMM
    probe, an H200's sustained 698 TFLOP/s against 989), so that no reader takes one for the other."""
    def row_mfu(row: pd.Series) -> float:
        table, achieved, peak = lookup_peak(row.get("env.gpu")), _achieved(row), denominator(row, peak_flops)
        if table is None or achieved is None or (peak is not None and peak[0] == table.datasheet_flops):
            return float("nan")
        return achieved / table.datasheet_flops

    return _by_row(df, row_mfu, float)


def fp8_mfu_column(df: pd.DataFrame) -> pd.Series:
    """MFU against the device's dense FP8 peak, for the points that train with FP8 (``float8`` not
    off): the ceiling their converted GEMMs run toward, beside the bf16 MFU (their other GEMMs, and
    the comparison with bf16 points). NaN elsewhere, and where the table has no FP8 peak."""
    def row_mfu(row: pd.Series) -> float:
        recipe, table, achieved = row.get("float8"), lookup_peak(row.get("env.gpu")), _achieved(row)
        if not isinstance(recipe, str) or recipe == "off" or table is None or table.fp8 is None or achieved is None:
            return float("nan")
        return achieved / table.fp8

    return _by_row(df, row_mfu, float)


def peak_sources(points: pd.DataFrame) -> dict[str, str]:
    """``{device: "<the peaks of its rows' MFU>"}`` for a footnote under an MFU column, a peak from
    the table with the table's source."""
    out = {}
    if "env.gpu" not in points or "mfu_peak" not in points:
        return out
    for device, rows in points.groupby("env.gpu"):
        table = lookup_peak(device)
        from_table = ("(table, sustained)", "(datasheet)")
        labels = [label + (f": {table.source}" if table and label.endswith(from_table) else "")
                  for label in dict.fromkeys(rows["mfu_peak"]) if isinstance(label, str) and label]
        if labels:
            out[str(device)] = "; ".join(labels)
    return out


def fp8_peak_sources(points: pd.DataFrame) -> dict[str, str]:
    """``{device: "<its FP8 peak and where it comes from>"}`` for the devices whose rows have an FP8
    MFU (``mfu_fp8``), for the footnote that names that column's denominator."""
    if "env.gpu" not in points or "mfu_fp8" not in points:
        return {}
    out = {}
    for device in dict.fromkeys(points.loc[points["mfu_fp8"].notna(), "env.gpu"]):
        table = lookup_peak(device)
        out[str(device)] = f"{table.fp8 / 1e12:,.0f} TFLOP/s ({table.fp8_source})"
    return out


#: how a reader gives every point a peak (the command line reads it)
PEAK_HINT = "BENCHBAY_PEAK_TFLOPS=<TFLOP/s> gives every point one"


def _why_absent(row: pd.Series) -> str:
    if not _finite(row.get(SAMPLES_PER_S_PER_GPU)):
        return "no samples/s"
    gpu = row.get("env.gpu")
    if not isinstance(gpu, str) or not gpu:
        return f"no peak FLOP/s for a CPU: {PEAK_HINT}"
    return f"no peak FLOP/s for {gpu}, which benchbay.analysis.mfu's table lacks: {PEAK_HINT}"


def mfu_note(points: pd.DataFrame) -> str | None:
    """Why the ok points (or records) whose workload gives its FLOPs a sample have no MFU; None
    when each has one (a workload without ``flops_per_sample`` has no MFU to give)."""
    ok = points[points["status"] == "ok"] if "status" in points else points
    due = ok[ok[FLOPS_PER_SAMPLE].map(_finite)] if FLOPS_PER_SAMPLE in ok else ok.iloc[:0]
    lacking = due[~due[MFU].map(_finite)] if MFU in due else due
    if not len(lacking):
        return None
    reasons = "; ".join(dict.fromkeys(_why_absent(row) for _, row in lacking.iterrows()))
    if len(lacking) == len(ok):
        return f"MFU: absent ({reasons})"
    named = ", ".join(map(str, lacking["name"])) if "name" in lacking else f"{len(lacking)} of {len(ok)} points"
    return f"MFU: absent for {named} ({reasons})"
