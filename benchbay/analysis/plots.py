"""The report's figures (matplotlib, no pyplot state: each function builds its own Figure).

Each function draws from a point summary (``tables.point_summary``) or a table built on it,
writes one PNG to ``path`` and returns it, or returns None when there is nothing to draw.
"""

from __future__ import annotations

import inspect
import io
import itertools
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from benchbay.analysis.batch_size import configurations
from benchbay.analysis.frame import is_missing
from benchbay.analysis.metrics import Verdict
from benchbay.analysis.tables import device_word, reference_band, reference_runs, repeat_of
from benchbay.record import (
    CPU_UTIL,
    CPU_UTIL_T,
    DEVICE_MEM_TOTAL_GIB,
    LOSSES,
    PEAK_HOST_RSS_GIB,
    PEAK_MEM_RESERVED_GIB,
    SAMPLES_PER_S_PER_GPU,
    Status,
)
from benchbay.store import write_atomic

DPI = 110
FAILED_STYLE = {Status.OOM: ("x", "tab:red"), "other": ("^", "black")}
#: each decoding library keeps one colour in every figure and report (decoder latency, inflation)
BACKEND_COLORS = {"torchcodec": "tab:green", "decord": "tab:blue", "decord2": "tab:cyan", "pyav": "tab:orange"}
#: the colours of libraries not named above (and of their non-CPU variants), in order of appearance
_OTHER_COLORS = ("tab:purple", "tab:brown", "tab:pink", "tab:olive", "tab:red", "tab:gray")


def backend_colors(names) -> dict[str, str]:
    """A colour per loader name (``torchcodec``, ``torchcodec (cuda)``...): its library's own."""
    others = itertools.cycle(_OTHER_COLORS)
    return {n: BACKEND_COLORS[n] if n in BACKEND_COLORS else next(others) for n in dict.fromkeys(names)}


#: a waterfall bar's colour by its verdict (``benchbay.analysis.breakdown``); anything else is grey
VERDICT_COLORS = {Verdict.FASTER: "tab:green", Verdict.SLOWER: "tab:red"}
NOT_SIGNIFICANT_COLOR = "lightgray"
FIRST_COLOR = "tab:blue"  # the breakdown's first bar: the reference of the others
CUT_AXIS_RATIO = 3  # a waterfall bar this many times the shortest cuts the axis
WHISKER_REACH = 2  # a waterfall whisker this many times the tallest bar shown runs off the axis
_VARIANT_STYLES = ("o-", "s--", "^:", "D-.")  # one library's lines in one panel
MIN_CPU_SAMPLES = 5  # fewer samples (one each 0.2 s) draw no course over time
#: per-view decode latency in seconds (``benchbay.decode.measure.latency_summary`` via ``extra``)
LATENCY_MEDIAN, LATENCY_P90 = "extra.view_latency_ms_median", "extra.view_latency_ms_p90"  # benchbay.decode


def save(fig: Figure, path: Path) -> Path:
    """Lay out (unless the figure lays itself out) and write one PNG: every figure of a report is
    written here, whole or not at all and never through a link (``store.write_atomic``)."""
    if fig.get_layout_engine() is None:  # a constrained figure lays itself out
        fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, dpi=DPI, format="png")
    return write_atomic(path, png.getvalue())


def _has_list(value) -> bool:
    return isinstance(value, (list, tuple, np.ndarray)) and len(value) > 0


def batch_scaling(summary: pd.DataFrame, path: Path, knob: str = "mbs") -> Path | None:
    """Throughput and peak memory against ``knob`` per configuration; failed points marked on the
    axis (throughput) or at the device limit (memory), the limit drawn as a dashed line."""
    configs = configurations(summary, knob)
    if not any((points["status"] == Status.OK).any() for _, points in configs):
        return None
    fig = Figure(figsize=(11, 4.6), layout="constrained")
    ax_rate, ax_mem = fig.subplots(1, 2)
    limit = summary[DEVICE_MEM_TOTAL_GIB].max()
    # on CPU the host's resident memory is the memory figure there is
    on_device = summary[PEAK_MEM_RESERVED_GIB].notna().any()
    memory, memory_label = ((PEAK_MEM_RESERVED_GIB, "peak reserved memory (GiB)") if on_device
                            else (PEAK_HOST_RSS_GIB, "peak host RSS (GiB)"))
    for (name, points), color in zip(configs, _colors(len(configs)), strict=True):
        ok = points[points["status"] == Status.OK]
        ax_rate.plot(ok[knob], ok[SAMPLES_PER_S_PER_GPU], "o-", color=color, label=name)
        ax_mem.plot(ok[knob], ok[memory], "o-", color=color, label=name)
        for _, failed in points[points["status"] != Status.OK].iterrows():
            marker, mcolor = FAILED_STYLE.get(failed["status"], FAILED_STYLE["other"])
            ax_rate.plot(failed[knob], 0, marker, color=mcolor, markersize=10, mew=2)
            ax_mem.plot(failed[knob], limit if np.isfinite(limit) else 0, marker, color=mcolor, markersize=10, mew=2)
            ax_rate.annotate(failed["status"], (failed[knob], 0), textcoords="offset points", xytext=(0, 8),
                             ha="center", fontsize=8, color=mcolor)
    if np.isfinite(limit):
        ax_mem.axhline(limit, ls="--", color="gray", label=f"device memory {limit:.1f} GiB")
    values = sorted({v for _, points in configs for v in points[knob]})
    for ax, ylabel in ((ax_rate, f"samples/s/{device_word(summary)}"), (ax_mem, memory_label)):
        ax.set_xscale("log", base=2)
        ax.set_xticks(values, [str(v) for v in values], fontsize=8)
        ax.minorticks_off()
        ax.set_xlabel(knob)
        ax.set_ylabel(ylabel)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    # below both panels: beside the memory panel a long list covered its points or ran off the canvas
    handles, labels = ax_mem.get_legend_handles_labels()
    longest = max(len(label) for label in labels)
    columns = max(1, min(len(labels), int(fig.get_figwidth() * DPI / (5.5 * longest + 60))))  # ~5.5 px a letter
    fig.legend(handles, labels, fontsize=8, loc="outside lower center", ncol=columns)
    ax_rate.set_title("throughput (x / ^ = failed point)")
    ax_mem.set_title("peak memory" if on_device else "memory")
    return save(fig, path)


def step_time_distributions(summary: pd.DataFrame, path: Path) -> Path | None:
    """Box plot of the steady-state step times of every ok point (repeats pooled), in absolute
    milliseconds so that points compare, the mean (the step the tables show) marked; one row per
    point, a log axis where the points span more than a decade (or a stall stretches one)."""
    points = summary[summary["steady_samples"].map(bool)]
    if points.empty:
        return None
    fig = Figure(figsize=(9, 1.5 + 0.3 * len(points)))
    ax = fig.subplots()
    pooled = [1e3 * np.concatenate(s) for s in points["steady_samples"]]
    y = np.arange(len(points), 0, -1)
    # matplotlib 3.10 renamed vert=False to orientation="horizontal" (the GPU machine may be older)
    horizontal = ({"orientation": "horizontal"} if "orientation" in inspect.signature(ax.boxplot).parameters
                  else {"vert": False})
    ax.boxplot(pooled, positions=y, widths=0.6, **horizontal)
    means = [p.mean() for p in pooled]
    ax.plot(means, y, "D", color="tab:red", markersize=4)
    names = [f"{name} ({mean:,.0f} ms)" if mean >= 100 else f"{name} ({mean:.3g} ms)"
             for name, mean in zip(points["name"], means, strict=True)]
    ax.set_yticks(y, names, fontsize=8)
    low, high = min(p.min() for p in pooled), max(p.max() for p in pooled)
    if low > 0 and high / low > 10:
        ax.set_xscale("log")
    ax.set_xlabel("step time (ms)")
    # the key in the title: a legend above the axes ran into it beside long point names
    ax.set_title("steady-state step times, repeats pooled (red diamond: the mean, the table's step)", fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    return save(fig, path)


def loss_curves(groups: Sequence[pd.DataFrame], path: Path, rtol: float, atol: float) -> Path | None:
    """Per group of points that should train alike: each point's loss per step and, below it, its
    difference from the group's first point relative to that point's loss, inside the band the
    tolerance allows (tables.reference_band: around each of the first point's runs where it was
    measured again): where losses swing by 10x, only the second reads."""
    if not groups:
        return None
    cols, rows = min(len(groups), 3), -(-len(groups) // 3)
    fig = Figure(figsize=(6 * cols, 6.4 * rows))
    axes = fig.subplots(2 * rows, cols, squeeze=False)
    for i in range(rows * cols):
        top, bottom = axes[2 * (i // cols), i % cols], axes[2 * (i // cols) + 1, i % cols]
        if i >= len(groups):
            top.set_visible(False)
            bottom.set_visible(False)
            continue
        group = groups[i]
        reference = np.asarray(group[LOSSES].iloc[0], dtype=float)
        colors: dict[str, str] = {}
        for (_, point), of in zip(group.iterrows(), repeat_of(group), strict=True):
            losses = np.asarray(point[LOSSES], dtype=float)
            n = min(losses.size, reference.size)
            # a point's repeats in its colour, dashed, one legend entry a point
            style = {} if is_missing(of) else {"color": colors[of], "linestyle": "--", "linewidth": 1}
            (line,) = top.plot(np.arange(losses.size), losses, alpha=0.8, **style,
                               label=point["name"] if is_missing(of) else None)
            colors.setdefault(point["name"], line.get_color())
            bottom.plot(np.arange(n), 100 * (losses[:n] - reference[:n]) / np.abs(reference[:n]), alpha=0.8,
                        **{**style, "color": line.get_color()})
        runs = reference_runs(group)
        lower, upper = (100 * (edge - reference) / np.abs(reference) for edge in reference_band(runs, rtol, atol))
        bottom.fill_between(np.arange(reference.size), lower, upper, color="grey", alpha=0.2,
                            label="tolerance" if len(runs) == 1 else f"tolerance around its {len(runs)} runs")
        top.set_ylabel("loss")
        bottom.set_ylabel(f"% from {group['name'].iloc[0]}")
        for ax in (top, bottom):
            ax.set_xlabel("step")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
    return save(fig, path)


def decoder_points(summary: pd.DataFrame) -> pd.DataFrame:
    """Points with an ok repeat (``ok 2/3, oom 1/3`` too) that report per-view decode latency."""
    if LATENCY_MEDIAN not in summary:
        return summary.iloc[:0]
    measured = summary["ok_repeats"] > 0 if "ok_repeats" in summary else summary["status"] == Status.OK
    return summary[measured & summary[LATENCY_MEDIAN].notna()]


def decoder_latency(summary: pd.DataFrame, path: Path) -> Path | None:
    """Per-view decode latency per decoder point: horizontal bars (median, whisker to p90), one
    colour per backend, each labelled with the CPU seconds a sample cost (latency alone misleads:
    a multi-threaded decoder buys latency with cores)."""
    points = decoder_points(summary)
    if points.empty:
        return None
    fig = Figure(figsize=(9, 1.5 + 0.3 * len(points)))
    ax = fig.subplots()
    median = points[LATENCY_MEDIAN].astype(float).to_numpy()
    p90 = points[LATENCY_P90].astype(float).to_numpy() if LATENCY_P90 in points else median
    upper = np.where(np.isfinite(p90), p90 - median, 0)
    backends = points["backend"].astype(str) if "backend" in points else points["name"]
    palette = backend_colors(backends)
    y = np.arange(len(points))[::-1]
    ax.barh(y, median, xerr=[np.zeros_like(upper), upper], capsize=3, color=[palette[b] for b in backends])
    ax.set_yticks(y, list(points["name"]), fontsize=8)
    cpu = points["extra.cpu_s_per_sample"] if "extra.cpu_s_per_sample" in points else pd.Series(np.nan, points.index)
    for yi, end, c in zip(y, median + upper, cpu.astype(float), strict=True):
        if np.isfinite(c):
            ax.annotate(f"  {c * 1e3:.0f} ms CPU/sample", (end, yi), va="center", fontsize=7)
    ax.set_ylim(-0.7, len(points) - 0.3)
    ax.set_xlabel("per-view latency (ms): median, whisker to p90")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return save(fig, path)


def cpu_utilisation(summary: pd.DataFrame, path: Path) -> Path | None:
    """Process CPU utilisation over time for the decoder points (first ok repeat each) of enough
    samples for a course over time: one panel per suite point label (a grid's values, e.g. backend
    and preset, are the lines of a panel). None when no point has them (the table gives the mean)."""
    points = decoder_points(summary)
    # a point of fewer samples is a dot, no course (the table gives its mean)
    points = points[points[CPU_UTIL].map(lambda v: _has_list(v) and len(v) >= MIN_CPU_SAMPLES)
                    & points[CPU_UTIL_T].map(_has_list)]
    if points.empty:
        return None
    names = points["name"].astype(str)
    backends = points["backend"].astype(str) if "backend" in points else names
    palette = backend_colors(backends)  # the colours of the latency plot
    panels = names.str.split(" ", n=1).str[0]
    groups = list(dict.fromkeys(panels))
    cols = min(3, len(groups))
    rows = -(-len(groups) // cols)
    fig = Figure(figsize=(4.5 * cols, 3 * rows))
    axes = np.atleast_1d(fig.subplots(rows, cols, sharey=True, squeeze=False)).ravel()
    for ax, group in zip(axes, groups, strict=False):
        drawn: list[str] = []
        for (_, point), name, backend in zip(points[panels == group].iterrows(), names[panels == group],
                                             backends[panels == group], strict=True):
            # a library keeps its colour; its next line in a panel (another preset or mode) another style.
            # Markers: a short point's few samples stay visible beside the longer lines
            style = _VARIANT_STYLES[drawn.count(backend) % len(_VARIANT_STYLES)]
            drawn.append(backend)
            ax.plot(point[CPU_UTIL_T], point[CPU_UTIL], style, markersize=3, color=palette[backend],
                    label=name.partition(" ")[2] or name)
        ax.set_title(group, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=6)
    for ax in axes[len(groups):]:
        ax.set_visible(False)
    for ax in axes[::cols]:
        ax.set_ylabel("CPU (% of one core)", fontsize=8)
    for ax in axes[:len(groups)][-cols:]:
        ax.set_xlabel("seconds since the measured steps began", fontsize=8)
    return save(fig, path)


def waterfall(table: pd.DataFrame, path: Path, per: str = "GPU") -> Path | None:
    """Time per sample as a waterfall over the breakdown (each bar spans the change from the
    previous ok step, whisker = its confidence interval; per sample, since a step of a larger
    micro-batch is longer and yet faster) and the throughput of each step. A change or speed-up
    whose interval includes no change is grey and marked "n.s.", one without an interval grey and
    marked "no interval": never drawn as a gain or loss. Each label sits above its bar's whisker;
    the legend below says what the colours mean."""
    ok = table[table["status"] == Status.OK]
    if len(ok) < 2:
        return None
    fig = Figure(figsize=(11, 4.8), layout="constrained")
    ax_time, ax_rate = fig.subplots(1, 2)
    x = np.arange(len(ok))
    rates = ok[SAMPLES_PER_S_PER_GPU].to_numpy(float)
    times = 1e3 / rates  # ms per sample per device
    previous = np.concatenate([[0.0], times[:-1]])
    verdicts = list(ok["verdict"])[1:]
    colors = [FIRST_COLOR] + [VERDICT_COLORS.get(v, NOT_SIGNIFICANT_COLOR) for v in verdicts]
    ax_time.bar(x, times - previous, bottom=previous, color=colors)
    # time per sample changes as 1 / (1 + throughput change)
    low = previous / (1 + ok["throughput_change_high"].to_numpy(float))
    high = previous / (1 + ok["throughput_change_low"].to_numpy(float))
    # a bar far above the rest (an official step 10x slower) would leave the later levers slivers on
    # any axis from 0, and a log axis still squeezes a few-% lever: the axis is cut to the other bars
    # (every lever visible at its own scale) and a taller bar runs off its top, its figure written there
    tall = times > CUT_AXIS_RATIO * times.min()
    cut = bool(tall.any() and not tall.all())
    shown = times[~tall] if cut else times
    has_ci = np.isfinite(low) & np.isfinite(high)
    # whiskers within reach set the axis too; a wider one (few, noisy processes: +6000%) runs off its
    # top rather than squeeze every bar to a sliver
    within = has_ci & (high <= WHISKER_REACH * shown.max()) & ~(tall & cut)
    highest = max(shown.max(), high[within].max(initial=0.0))
    lowest = min(shown.min(), low[has_ci & ~tall].min(initial=np.inf)) if cut else 0
    # room above the highest bar and whisker for its two-line label, and below the lowest whisker
    top = highest + 0.3 * (highest - lowest) if cut else highest * 1.25
    ax_time.set_ylim(lowest - 0.1 * (highest - lowest) if cut else 0, top)
    over = times > top
    for xi in x[over]:
        ax_time.annotate(f"{times[xi]:.4g}\n(cut)", (xi, top), textcoords="offset points", xytext=(0, -4), ha="center",
                         va="top", fontsize=8, color="white", fontweight="bold")
    ax_time.errorbar(x[has_ci], times[has_ci], yerr=[times[has_ci] - low[has_ci], high[has_ci] - times[has_ci]],
                     fmt="none", ecolor="black", capsize=4)
    # each label is its bar: the time per sample over the previous bar's, above the bar (which spans
    # from the previous level) and its whisker, never on them: inside the top of a bar cut by the
    # axis, beside a whisker that runs off it
    bar_top = np.maximum(times, previous)
    whisker_top = np.where(has_ci, high, -np.inf)
    for xi, t, before, verdict in zip(x[1:], times[1:], times[:-1], verdicts, strict=True):
        text = f"{t / before - 1:+.1%}{_unresolved(verdict)}"
        if bar_top[xi] > top:  # under the figure written at the top of its cut bar, beside its whisker
            ax_time.annotate(text, (xi, top), textcoords="offset points", xytext=(6 if has_ci[xi] else 0, -30),
                             ha="left" if has_ci[xi] else "center", va="top", fontsize=8,
                             color="black" if colors[xi] == NOT_SIGNIFICANT_COLOR else "white")
        elif whisker_top[xi] > top:
            ax_time.annotate(text, (xi, bar_top[xi]), textcoords="offset points", xytext=(6, 4), ha="left",
                             va="bottom", fontsize=8)
        else:
            ax_time.annotate(text, (xi, max(bar_top[xi], whisker_top[xi])), textcoords="offset points",
                             xytext=(0, 4), ha="center", va="bottom", fontsize=8)
    speedup_low, speedup_high = (ok[c].to_numpy(float) for c in ("speedup_low", "speedup_high"))
    speedup_verdicts = [Verdict.FASTER if lo > 1 else Verdict.SLOWER if hi < 1
                        else Verdict.NOT_SIGNIFICANT if np.isfinite(lo) and np.isfinite(hi) else Verdict.NO_INTERVAL
                        for lo, hi in zip(speedup_low, speedup_high, strict=True)]
    ax_rate.bar(x, rates, color=[FIRST_COLOR] + [VERDICT_COLORS.get(v, NOT_SIGNIFICANT_COLOR)
                                                 for v in speedup_verdicts[1:]])
    for xi, rate, speedup, verdict in zip(x, rates, ok["speedup"], speedup_verdicts, strict=True):
        ax_rate.annotate(f"{speedup:.2f}x" + ("" if xi == 0 else _unresolved(verdict, " ")), (xi, rate),
                         textcoords="offset points", xytext=(0, 4), ha="center", fontsize=8)
    ax_rate.set_ylim(top=rates.max() * 1.15)  # room for the labels above the tallest bar
    for ax, ylabel in ((ax_time, f"ms per sample per {per}" + (" (axis cut)" if over.any() else "")),
                       (ax_rate, f"samples/s/{per}")):
        ax.set_xticks(x, list(ok["label"]), rotation=20, ha="right")
        ax.set_ylabel(ylabel)
        ax.grid(axis="y", alpha=0.3)
    ax_time.set_title("time per sample, change from the previous step", fontsize=10)
    ax_rate.set_title("throughput, speed-up over the first", fontsize=10)
    # below both panels: inside the axes a legend covered bars or labels
    shown_verdicts = {*verdicts, *speedup_verdicts[1:]}
    key = [(FIRST_COLOR, "the first step: the reference")]
    key += [(color, f"{v}: its 95% interval clear of no change") for v, color in VERDICT_COLORS.items()
            if v in shown_verdicts]
    if shown_verdicts - set(VERDICT_COLORS):
        key.append((NOT_SIGNIFICANT_COLOR, "n.s.: its 95% interval includes no change; "
                                           "grey without a whisker: too few processes for an interval"))
    fig.legend([Patch(color=color) for color, _ in key], [text for _, text in key], loc="outside lower center",
               ncol=2, fontsize=8, frameon=False)
    return save(fig, path)


def _unresolved(verdict: str, sep: str = "\n") -> str:
    """The mark of a change that is no gain or loss: "n.s." (interval includes no change); none for a
    resolved one, nor for one with no interval (grey, no whisker: the legend says it once, where a
    mark on every bar of a one-process run overlapped its neighbours')."""
    return sep + "n.s." if verdict == Verdict.NOT_SIGNIFICANT else ""


def phases(summary: pd.DataFrame, path: Path) -> Path | None:
    """Stacked bars of the profiled phases (``extra.phases``: {phase: seconds}) per point, as
    shares of its step."""
    if "extra.phases" not in summary:
        return None
    points = summary[summary["extra.phases"].map(lambda v: isinstance(v, dict) and len(v) > 0)]
    if points.empty:
        return None
    order = list(dict.fromkeys(phase for recorded in points["extra.phases"] for phase in recorded))
    table = pd.DataFrame(list(points["extra.phases"]), index=list(points["name"]), columns=order).fillna(0.0) * 1e3
    totals = table.sum(axis=1)
    # shares, so that a 0.3 s step and a 4 s step read alike; each bar's label gives its total
    shares = table.div(totals.where(totals > 0, 1.0), axis=0) * 100
    labels = [f"{name}\n{total:.0f} ms" for name, total in totals.items()]
    fig = Figure(figsize=(max(6, 1.4 * len(table) + 3), 4.2))
    ax = fig.subplots()
    bottom = np.zeros(len(table))
    for phase, color in zip(shares.columns, _colors(len(shares.columns)), strict=True):
        ax.bar(labels, shares[phase], bottom=bottom, label=phase, color=color)
        bottom += shares[phase].to_numpy()
    ax.set_ylabel("share of the profiled step (%)")
    ax.tick_params(axis="x", rotation=20)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(axis="y", alpha=0.3)
    return save(fig, path)


def _colors(n: int) -> list:
    cmap = colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]
