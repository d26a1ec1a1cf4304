"""Video inside the training loop: every ``data: video`` point against the same point on synthetic
data (all knobs equal but the video ones), the step's wait for its batches, the loader workers'
CPU and the GPU's idle share; the best loader per workload and batch size, and RLinf's claim that
too many loader workers slow the step by taking CPU from its kernel launches.

Inflation is the change of the mean step from the synthetic point, with the breakdown's interval
(one value per process); a change whose interval includes no change is not significant. The mean,
not the median: workers deliver their batches together, so most steps find one ready and the next
waits for all (H200, DreamZero-5B mbs 24, 4 PyAV workers: median 2.83 s against 2.81 synthetic,
mean 6.43 s).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from benchbay.analysis import plots
from benchbay.analysis.breakdown import point_changes
from benchbay.analysis.frame import is_missing, knob_columns, param_columns
from benchbay.analysis.metrics import Verdict
from benchbay.analysis.steady import WAITED, first_dry_step
from benchbay.analysis.tables import point_summary
from benchbay.knobs.video import VIDEO_KNOBS
from benchbay.record import (
    CHILD_CPU_UTIL_MEAN,
    DATA_WAIT_SHARE,
    DATA_WAITS_S,
    GPU_UTIL_MEAN,
    STEP_TIME_MEAN_S,
    STEP_TIMES_S,
    WARMUP_STEPS,
    Status,
)

#: a loader keeps the step "as fast as synthetic data" within this inflation (the issue's 10%)
WITHIN = 0.10
LOADER = ["video_backend", "video_device", "num_workers", "prefetch_factor"]


def video_points(summary: pd.DataFrame) -> pd.DataFrame:
    if "data" not in summary:
        return summary.iloc[:0]
    return summary[(summary["data"] == "video") & (summary["status"] == Status.OK)]


def _baseline_key(row: pd.Series, columns: list[str]) -> tuple:
    return tuple(str(row[c]) for c in columns)


def inflation_table(records: pd.DataFrame) -> pd.DataFrame:
    """One row per ok video point (records: the flat frame of one or more runs): its loader, step, the
    synthetic step, inflation [CI], verdict, data wait, loader CPU (cores) and GPU idle share. Each
    video point is set against the synthetic point of its own run and GPU: a launch-bound step moves
    between sessions by more than a loader costs (H200, DreamZero-5B mbs 1: 0.557 and 0.733 s/step),
    and a run resumed on another card has no synthetic step to compare with until it is measured there
    (records made before ``env.gpu_uuid_hash`` pair within their run)."""
    if "data" not in records or not (records["data"] == "video").any():
        return pd.DataFrame()  # every suite's report asks: summarise its runs again only for video points
    cards = records.get("env.gpu_uuid_hash", pd.Series(None, index=records.index, dtype=object))
    cards = cards.astype(object).where(cards.notna(), "")  # older records: one card per run
    tables = [_inflation_in_run(point_summary(run)).assign(run_id=run_id)
              for (run_id, _), run in records.groupby(["run_id", cards], sort=False)]
    tables = [t for t in tables if len(t)]
    return _with_remeasures(_with_noise_floor(pd.concat(tables, ignore_index=True))) if tables else pd.DataFrame()


def _with_remeasures(table: pd.DataFrame) -> pd.DataFrame:
    """A loader measured in several runs stands for itself by its latest run (run ids sort by their
    start): ``measured again in`` names it on the earlier rows, which stay in the table but out of
    the best loader, the claim and the plot (a lower bound measured again over a longer warm-up)."""
    keys = ["workload", "mbs", *LOADER]
    latest = table.groupby(keys, dropna=False)["run_id"].transform("max")
    return table.assign(**{"measured again in": latest.where(latest != table["run_id"], "")})


def current(table: pd.DataFrame) -> pd.DataFrame:
    """The rows that stand for their loader: none measured again in a later run."""
    return table[table["measured again in"] == ""] if "measured again in" in table else table


def _with_noise_floor(table: pd.DataFrame) -> pd.DataFrame:
    """A loader cannot make the step faster, so the largest speed-up a video point shows for a
    workload and batch is noise between processes: each point is a process of its own, and its
    interval is over the steps of that one process (seen on an H200, DreamZero-5B mbs 1: -16%).
    ``noise_floor_change`` holds it, every speed-up counted (significant or not, it is a process
    reading faster than the synthetic one); a point is slower only when its whole interval lies
    above it. Where no point reads faster, nothing bounds the noise: the cell is blank, not a
    "+0.0%" that reads as none measured, and the points' own intervals decide."""
    table = table.copy()
    speedups = table["inflation_change"].where(table["inflation_change"] < 0)
    floor = (-speedups).groupby([table["workload"], table["mbs"]], dropna=False).transform("max")
    table["noise_floor_change"] = floor
    resolved = (table["verdict"] == Verdict.SLOWER) & (table["inflation_change_low"] > floor.fillna(0.0))
    unresolved = table["verdict"].isin([Verdict.SLOWER, Verdict.FASTER]) & ~resolved
    table.loc[unresolved, "verdict"] = Verdict.NOT_SIGNIFICANT
    return table


def _inflation_in_run(summary: pd.DataFrame) -> pd.DataFrame:
    video = video_points(summary)
    if video.empty:
        return pd.DataFrame()
    same = [c for c in knob_columns(summary) + param_columns(summary) + ["workload"] if c not in VIDEO_KNOBS]
    synthetic = summary[(summary["data"] == "synthetic") & (summary["status"] == Status.OK)]
    baselines = {_baseline_key(row, same): row for _, row in synthetic.iterrows()}
    rows = []
    for _, point in video.iterrows():
        base = baselines.get(_baseline_key(point, same))
        change = point_changes(base, point, statistic="mean") if base is not None else {}
        rows.append({
            "workload": point["workload"], "mbs": point.get("mbs"), **{k: point.get(k) for k in LOADER},
            "mean step (s)": point[STEP_TIME_MEAN_S],
            "synthetic mean step (s)": None if base is None else base[STEP_TIME_MEAN_S],
            "inflation_change": change.get("step_change"), "inflation_change_low": change.get("step_change_low"),
            "inflation_change_high": change.get("step_change_high"),
            "verdict": _inflation_verdict(change) if change else Verdict.NOT_COMPARABLE,
            # per step: the share of the mean step (older records kept the median wait)
            "data wait (ms)": _scaled(point.get(DATA_WAIT_SHARE), 1e3 * point[STEP_TIME_MEAN_S]),
            "wait share": point.get(DATA_WAIT_SHARE),
            "loader CPU (cores)": _loader_cores(point.get(CHILD_CPU_UTIL_MEAN)),
            "GPU idle share": None if is_missing(point.get(GPU_UTIL_MEAN)) else 1 - point[GPU_UTIL_MEAN] / 100,
            "lower bound": _lower_bound(point),
        })
    return pd.DataFrame(rows)


def _lower_bound(point: pd.Series) -> str:
    """Why a slow-down may be larger than shown: the loader's queue first ran dry inside the
    measured steps, so the first of them found batches made ahead (records made before the
    warm-up drained a loader behind the step, ``launch.worker``). A loader that keeps up is not
    affected: its steps wait for next to nothing, nor is decoding in the step's process (no queue)."""
    waits, times = point.get(DATA_WAITS_S), point.get(STEP_TIMES_S)
    ran_dry = not is_missing(point.get(DATA_WAIT_SHARE)) and point[DATA_WAIT_SHARE] >= WAITED
    if not point["num_workers"] or not ran_dry or not isinstance(waits, (list, tuple)) or len(waits) != len(times):
        return ""
    first = first_dry_step(waits, times)
    measured_from = int(point[WARMUP_STEPS])
    return (f"yes: its queue first ran dry at step {first}, in the measured steps (from {measured_from})"
            if first is not None and first >= measured_from else "")


def _loader_cores(child_cpu_percent):
    """The workers' CPU in cores; none where it reads negative: records made before
    collect.system.ChildrenCpu dropped the time of children that exited (compile workers)."""
    return None if is_missing(child_cpu_percent) or child_cpu_percent < 0 else child_cpu_percent / 100


def _scaled(value, scale: float):
    return None if is_missing(value) else value * scale


def _inflation_verdict(change: dict) -> Verdict:
    """slower / not significant / faster than the synthetic step (a loader never makes it faster:
    that reads as noise)."""
    low, high = change.get("step_change_low"), change.get("step_change_high")
    if is_missing(low) or is_missing(high):
        return Verdict.NO_INTERVAL
    return Verdict.SLOWER if low > 0 else Verdict.FASTER if high < 0 else Verdict.NOT_SIGNIFICANT


def best_loaders(table: pd.DataFrame) -> pd.DataFrame:
    """Per workload and mbs: the loader with the least inflation, and whether it keeps the step within
    WITHIN of synthetic data (what bounds it otherwise: the wait or the workers' CPU)."""
    if table.empty:
        return table
    rows = []
    for (workload, mbs), group in current(table).groupby(["workload", "mbs"], dropna=False):
        best = group.sort_values("inflation_change").iloc[0]
        within = not is_missing(best["inflation_change"]) and best["inflation_change"] <= WITHIN
        rows.append({"workload": workload, "mbs": mbs, **{k: best[k] for k in LOADER},
                     "inflation_change": best["inflation_change"], "verdict": best["verdict"],
                     "noise_floor_change": best["noise_floor_change"],
                     f"within {WITHIN:.0%} of synthetic": "yes" if within else "no",
                     "bound by": "" if within else _bound(best)})
    return pd.DataFrame(rows)


def _bound(row: pd.Series) -> str:
    share = row["wait share"]
    if not is_missing(share) and share > WITHIN / 2:
        return f"the wait for batches ({share:.0%} of the step): decoding slower than the step"
    return "the step itself on the host (little wait): the loader's CPU competes with kernel launches"


def workers_claim(table: pd.DataFrame) -> pd.DataFrame:
    """RLinf's claim per workload, mbs and backend: the most workers against the best worker count.
    Reproduced when the most workers are slower than synthetic data beyond the noise between
    processes (their verdict) and significantly slower than the best count."""
    rows = []
    if table.empty:
        return pd.DataFrame(rows)
    keys = ["workload", "mbs", "video_backend", "video_device", "prefetch_factor"]
    for key, group in current(table).groupby(keys, dropna=False):
        if group["num_workers"].nunique() < 2:
            continue
        best = group.sort_values("inflation_change").iloc[0]
        most = group.sort_values("num_workers").iloc[-1]
        slower = (1 + most["inflation_change"]) / (1 + best["inflation_change"]) - 1
        # each interval is against its own run's synthetic step: disjoint, and apart by more than
        # the noise between processes, means a real difference
        separated = (most["verdict"] == Verdict.SLOWER
                     and not is_missing(most["inflation_change_low"]) and not is_missing(best["inflation_change_high"])
                     and most["inflation_change_low"] > best["inflation_change_high"]
                     and most["inflation_change"] - best["inflation_change"] > _known(most["noise_floor_change"]))
        verdict = ("reproduced" if separated else "the best count" if most["num_workers"] == best["num_workers"]
                   else "not reproduced (not significant)")
        rows.append({**dict(zip(keys, key, strict=True)), "best workers": best["num_workers"],
                     "most workers": most["num_workers"], "most vs best_change": slower, "claim": verdict})
    return pd.DataFrame(rows)


def _known(floor) -> float:
    """A noise floor where one bounds it; 0 where none does (the intervals alone decide)."""
    return 0.0 if is_missing(floor) else float(floor)


def _loader_name(backend: str, device: str) -> str:
    return backend if device == "cpu" else f"{backend} ({device})"


def plot_inflation(table: pd.DataFrame, path: Path) -> Path | None:
    """Inflation against num_workers, one line per backend, one panel per workload and mbs."""
    table = current(table)
    if table.empty or table["inflation_change"].isna().all():
        return None
    panels = list(table.groupby(["workload", "mbs"], dropna=False))
    # one colour per loader across the panels, and the same as in the decoder reports
    colours = plots.backend_colors(sorted(map(_loader_name, table["video_backend"], table["video_device"])))
    fig = Figure(figsize=(5 * len(panels), 3.6))
    axes = fig.subplots(1, len(panels), squeeze=False)
    for ax, ((workload, mbs), group) in zip(axes[0], panels, strict=True):
        for (backend, device), line in group.groupby(["video_backend", "video_device"], dropna=False):
            line = line.sort_values("num_workers")
            value = line["inflation_change"].astype(float)
            err = [100 * (value - line["inflation_change_low"].astype(float)).fillna(0),
                   100 * (line["inflation_change_high"].astype(float) - value).fillna(0)]
            ax.errorbar(line["num_workers"], 100 * value, yerr=err, marker="o", capsize=3,
                        color=colours[_loader_name(backend, device)], label=_loader_name(backend, device))
        ax.axhline(0, color="grey", linewidth=0.8)
        ax.axhline(100 * WITHIN, color="grey", linewidth=0.8, linestyle="--")
        ax.set(title=f"{workload}, mbs {mbs}", xlabel="DataLoader workers", ylabel="mean step vs synthetic (%)")
        ax.legend(fontsize=8)
    return plots.save(fig, path)
