"""Scaling across GPUs and nodes: each configuration's throughput at every world size it ran at,
its speed-up and its scaling efficiency against its smallest world size N0:

    efficiency(N) = samples_per_s(N) / (N / N0 x samples_per_s(N0))

N0 = 1 when the configuration ran on one GPU (the usual throughput(N) / (N x throughput(1))), else
its smallest run, e.g. one node of 8 GPUs as in Wall-X's published 2 x 8 result:
438.2 / (2 x 242.1) = 90.5%.

A configuration is the workload, its params and every knob, on one kind of GPU: its ok records
from any suites and runs (e.g. one suite file run at several ``devices.nproc``) are pooled per
world size: the step is the mean of their pooled steady steps, and samples/s (per GPU) is samples
per step over it, as the sweep table and ``show`` give them
(:func:`benchbay.analysis.compare.pooled_figure`): a median step beside a rate of the mean step
would not divide into it; the rank spread and communication as medians, memory as the maximum.
Communication per step comes from profiled points, its share of the step over that mean step
(``benchbay.collect.profile``): the ``communication`` phase where the step marks one (the time the
step spent in it), else the collectives among the top ops (NCCL kernels on CUDA; c10d/gloo
operators and waits on CPU): their whole time, whether compute overlapped it or not.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.figure import Figure

from benchbay.analysis import plots
from benchbay.analysis.compare import pooled_figure
from benchbay.analysis.frame import is_missing, knob_columns, param_columns, varying_columns
from benchbay.analysis.metrics import METRICS
from benchbay.analysis.tables import describe
from benchbay.record import (
    PEAK_MEM_RESERVED_GIB,
    SAMPLES_PER_S,
    SAMPLES_PER_S_PER_GPU,
    STEP_TIME_RANK_SPREAD,
    STEP_TIME_S,
    Status,
)

COLUMNS = ("configuration", "gpu", "world_size", "nnodes", "repeats", SAMPLES_PER_S, SAMPLES_PER_S_PER_GPU,
           STEP_TIME_S, "speedup", "ideal_speedup", "efficiency", STEP_TIME_RANK_SPREAD,
           PEAK_MEM_RESERVED_GIB, "comm_s", "comm_share", "comm_source")
#: the columns pooled as show gives them, by their compare metric (the mean step, rates over it)
_POOLED = {SAMPLES_PER_S: "samples_per_s", SAMPLES_PER_S_PER_GPU: "samples_per_s_per_gpu", STEP_TIME_S: "step_time"}
#: names of collective kernels (CUDA) and operators (CPU) in ``extra.profile_top_ops``
COLLECTIVE = re.compile(r"nccl|c10d|gloo|record_param_comms|wait_tensor", re.IGNORECASE)


def communication(row: pd.Series) -> tuple[float | None, str | None]:
    """Seconds per step spent in communication, and where the figure comes from."""
    phases = row.get("extra.phases")
    if isinstance(phases, dict) and phases.get("communication") is not None:
        return float(phases["communication"]), "phase"
    ops = row.get("extra.profile_top_ops")
    if isinstance(ops, list):
        times = [op["time_s"] for op in ops if COLLECTIVE.search(str(op.get("name", "")))]
        if times:
            return float(sum(times)), "collectives"
    return None, None


def _names(firsts: pd.DataFrame, identity: list[str]) -> list[str]:
    """A name per configuration (one row each): its label, plus what tells it from others of the
    same label; without a label, what tells it from every other."""
    labels = [v if isinstance(v, str) else None for v in firsts.get("label", pd.Series([None] * len(firsts)))]
    names = []
    for i, label in enumerate(labels):
        peers = firsts[[other == label for other in labels]] if label else firsts
        differs = describe(firsts.iloc[i], varying_columns(peers, identity)) if len(peers) > 1 else ""
        names.append(f"{label} ({differs})" if label and differs else label or differs or "all")
    return names


def scaling_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per configuration and world size (see the module docstring), ordered by
    configuration then world size. ``nnodes`` is 1 for records that do not say."""
    if df.empty or SAMPLES_PER_S not in df:
        return pd.DataFrame(columns=COLUMNS)
    ok = df[(df["status"] == Status.OK) & df[SAMPLES_PER_S].notna()]
    if ok.empty:
        return pd.DataFrame(columns=COLUMNS)
    comm = ok.apply(communication, axis=1, result_type="expand")
    ok = ok.assign(gpu=ok["env.gpu"] if "env.gpu" in ok else None,
                   nnodes=ok["nnodes"].fillna(1).astype(int) if "nnodes" in ok else 1,
                   comm_s=pd.to_numeric(comm[0]), comm_source=comm[1])
    for column in (STEP_TIME_RANK_SPREAD, PEAK_MEM_RESERVED_GIB):
        if column not in ok:
            ok[column] = np.nan
    identity = [c for c in ("workload", *param_columns(ok), *knob_columns(ok)) if c in ok]
    keys = ok[[*identity, "gpu"]].map(str)  # one spelling per value, None included
    configs = [config for _, config in ok.groupby([keys[c] for c in keys], sort=False)]
    names = _names(pd.DataFrame([config.iloc[0] for config in configs]), identity + ["gpu"])
    rows = []
    for name, config in zip(names, configs, strict=True):
        gpu = config["gpu"].iloc[0]
        sizes = []
        for (world, nodes), runs in config.groupby(["world_size", "nnodes"], sort=True):
            sizes.append({
                "configuration": name, "gpu": None if is_missing(gpu) else gpu,
                "world_size": int(world), "nnodes": int(nodes), "repeats": len(runs),
                **{column: pooled_figure(runs, METRICS[name]) for column, name in _POOLED.items()},
                **{m: runs[m].median() for m in (STEP_TIME_RANK_SPREAD, "comm_s")},
                PEAK_MEM_RESERVED_GIB: runs[PEAK_MEM_RESERVED_GIB].max(),
                "comm_source": next((s for s in runs["comm_source"] if isinstance(s, str)), None),
            })
        base = sizes[0]
        for size in sizes:
            size["speedup"] = size[SAMPLES_PER_S] / base[SAMPLES_PER_S]
            size["ideal_speedup"] = size["world_size"] / base["world_size"]
            size["efficiency"] = size["speedup"] / size["ideal_speedup"]
            size["comm_share"] = size["comm_s"] / size[STEP_TIME_S] if size[STEP_TIME_S] else np.nan
        rows.extend(sizes)
    return pd.DataFrame(rows, columns=COLUMNS)


def _tick(world: int, nodes: int) -> str:
    return f"{world}\n({nodes} nodes)" if nodes > 1 else str(world)


def plot_scaling(table: pd.DataFrame, path: str | Path) -> Path | None:
    """Throughput (with each configuration's linear ideal, dashed) and efficiency against the
    number of GPUs, one line per configuration; one PNG at ``path``, or None with nothing to draw."""
    configs = [(name, rows) for name, rows in table.groupby(["configuration", "gpu"], sort=False, dropna=False)
               if len(rows) > 1]
    if not configs:
        return None
    fig = Figure(figsize=(11, 4.2))
    ax_rate, ax_eff = fig.subplots(1, 2)
    colors = colormaps["tab10"](np.linspace(0, 1, 10))
    for i, ((name, gpu), rows) in enumerate(configs):
        color = colors[i % len(colors)]
        label = name if is_missing(gpu) or table["gpu"].nunique() < 2 else f"{name} ({gpu})"
        ax_rate.plot(rows["world_size"], rows[SAMPLES_PER_S], "o-", color=color, label=label)
        base = rows.iloc[0]
        ax_rate.plot(rows["world_size"], base[SAMPLES_PER_S] * rows["ideal_speedup"], "--", color=color, alpha=0.5)
        ax_eff.plot(rows["world_size"], 100 * rows["efficiency"], "o-", color=color, label=label)
        for _, row in rows.iloc[1:].iterrows():
            ax_eff.annotate(f"{100 * row['efficiency']:.1f}%", (row["world_size"], 100 * row["efficiency"]),
                            textcoords="offset points", xytext=(0, 6), ha="center", fontsize=8)
    ax_eff.axhline(100, ls="--", color="gray")
    ticks = table.drop_duplicates("world_size").sort_values("world_size")
    names = [_tick(w, n) for w, n in zip(ticks["world_size"], ticks["nnodes"], strict=True)]
    for ax, ylabel in ((ax_rate, "samples/s (dashed: linear scaling)"), (ax_eff, "scaling efficiency (%)")):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks["world_size"], names, fontsize=8)
        ax.set_xlabel("GPUs (processes)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    ax_rate.set_yscale("log")  # a linear speed-up is then a straight line at every scale
    ax_eff.set_ylim(0, max(110.0, 100 * table["efficiency"].max() + 10))
    ax_rate.legend(fontsize=8)
    return plots.save(fig, Path(path))
