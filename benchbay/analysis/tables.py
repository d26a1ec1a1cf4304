"""Per-point summaries of a results frame, and the tables built on them.

A *point* is one configuration of a suite (one ``point_id``); its rows are its repeats. Its figure
is one run's: that of its newest ok record (else its newest run); the records of its other runs
are its ``history`` (an old failure is no reason of today's figure, nor pooled into it). The
summary keeps one row per point: the knobs and params, the combined status of the repeats, the
step time as the mean of the pooled steady-state steps of the ok repeats (``stats.STEP_STATISTIC``,
the statistic ``benchbay.analysis.compare``, the breakdown, history and plots use), its p10 and p90
and coefficient of variation over the same steps, throughput and MFU over that step (samples/s/GPU
= samples per step / step) and the cost of a sample over it (``benchbay.analysis.cost``), medians of the other rates,
maxima of the memory peaks, the health warnings of its repeats with ``notes`` for a reader (see
``benchbay.analysis.quality``), and the first ok repeat's series and extras for plots.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from benchbay import record as rec
from benchbay.analysis.compare import steady_step_times
from benchbay.analysis.cost import COST, FIGURES, PRICE_KEY, cost_column, price_column, say_absent
from benchbay.analysis.frame import group_keys, is_missing, knob_columns, param_columns, rows_to_frame, varying_columns
from benchbay.analysis.gate import LOSS_ATOL, LOSS_RTOL, compare_losses
from benchbay.analysis.mfu import datasheet_mfu_column, fp8_mfu_column, mfu_column, peak_label_column
from benchbay.analysis.quality import cards_note, graph_break_note, notes, skipped_note, warnings_of
from benchbay.analysis.stats import STATISTICS, STEP_STATISTIC, coefficient_of_variation
from benchbay.analysis.steady import detect_warmup
from benchbay.analysis.update_fidelity import verdict, with_compute
from benchbay.record import DELIVERED_RATE, Status

#: figures summarised by their median over the ok repeats
MEDIAN_METRICS = (rec.STEP_TIME_P10_S, rec.STEP_TIME_P90_S, rec.FIRST_STEP_S, rec.SAMPLES_PER_STEP, rec.SAMPLES_PER_S,
                  rec.SAMPLES_PER_S_PER_GPU, rec.FLOPS_PER_SAMPLE, rec.MFU, "mfu_datasheet", "mfu_fp8",
                  rec.CPU_UTIL_MEAN, rec.GPU_UTIL_MEAN, rec.COMPILE_TIME_S, rec.WARMUP_STEPS, rec.DATA_WAIT_S,
                  rec.DATA_WAIT_SHARE, rec.CHILD_CPU_UTIL_MEAN, rec.LOADER_S, rec.UPDATE_APPLIED_SHARE,
                  rec.UPDATE_APPLIED_SHARE_SE, rec.UPDATE_LOST_SHARE, rec.COMPUTE_GRADIENT_COSINE,
                  rec.ENERGY_J_PER_SAMPLE, rec.ENERGY_WATTS)
#: figures summarised by their maximum over the ok repeats (the worst case is what limits a batch)
MAX_METRICS = (rec.PEAK_MEM_ALLOCATED_GIB, rec.PEAK_MEM_RESERVED_GIB, rec.DEVICE_MEM_TOTAL_GIB, rec.ALLOC_RETRIES,
               rec.NVML_MEM_USED_GIB, rec.PEAK_HOST_RSS_GIB)
#: per-record lists kept from the first ok repeat
SERIES = (rec.STEP_TIMES_S, rec.LOSSES, rec.CPU_UTIL, rec.CPU_UTIL_T, rec.DATA_WAITS_S)
IDENTITY = ("suite", "run_id", "workload", "point_id", "world_size", "device", "env.gpu", "knob_names")


def combined_status(statuses: Sequence[str]) -> str:
    """``ok`` when every repeat agrees, else counts such as ``ok 2/3, oom 1/3``."""
    counts = pd.Series(list(statuses), dtype=object).value_counts(sort=False)
    if len(counts) == 1:
        return str(counts.index[0])
    total = int(counts.sum())
    return ", ".join(f"{status} {n}/{total}" for status, n in counts.items())


def describe(row: pd.Series | dict, columns: Sequence[str]) -> str:
    """``knob=value, ...`` for the given columns (``param.`` dropped from names)."""
    return ", ".join(f"{c.removeprefix('param.')}={row[c]}" for c in columns) or "all"


def _first_valid(values: pd.Series) -> Any:
    return next((v for v in values if not is_missing(v)), None)


def _carried(rows: pd.DataFrame, ok: pd.DataFrame, column: str) -> Any:
    """A point's value of a column its records carry: the first record's, but a numeric extra (a
    decoder's latency, a phase's time) is the median over the ok repeats, as the metrics are: a row
    that says 2 repeats shows no figure of one of them only."""
    if column.startswith("extra.") and len(ok) > 1:
        present = [v for v in ok[column] if not is_missing(v)]
        if present and all(isinstance(v, (int, float, np.number)) and not isinstance(v, (bool, np.bool_))
                           for v in present):
            return float(np.median(present))
    return _first_valid(rows[column])


def _runs_of(rows: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A point's rows split by run: the figure's (the run of its newest ok record, else its newest
    run) and the others, each marked ``later`` when that run measured the point after the figure's."""
    if "run_id" not in rows or rows["run_id"].nunique() < 2:
        return rows, rows.iloc[:0].assign(later=False)
    # ISO times sort as text (a record without one as the oldest); without the field, in row order
    started = (rows["started_at"].fillna("").astype(str) if "started_at" in rows
               else pd.Series(np.arange(len(rows)), index=rows.index))
    first = started.groupby(rows["run_id"]).transform("min")
    ok = (rows["status"] == Status.OK).to_numpy()
    candidates = np.flatnonzero(ok) if ok.any() else np.arange(len(rows))
    newest = candidates[np.argsort(first.to_numpy()[candidates], kind="stable")[-1]]
    figure = rows["run_id"] == rows["run_id"].iloc[newest]
    return rows[figure], rows[~figure].assign(later=first[~figure] > first.iloc[newest])


def _other_runs(others: pd.DataFrame) -> str:
    """The records of a point's other runs (:func:`_runs_of`) in one line: ``earlier: error 3 in 3
    runs`` (before its figure's run), ``later: oom 1 in 1 run (the newest reason)`` (failed since)."""
    parts = []
    for when, rows in (("earlier", others[~others["later"]]), ("later", others[others["later"]])):
        if rows.empty:
            continue
        runs = rows["run_id"].nunique()
        counts = ", ".join(f"{status} {n}" for status, n in rows["status"].astype(str).value_counts(sort=False).items())
        reasons = rows.loc[rows["status"] != Status.OK, "reason"][::-1] if "reason" in rows else []
        why = f" ({_first_valid(reasons)})" if when == "later" and _first_valid(reasons) else ""
        parts.append(f"{when}: {counts} in {runs} run{'s' if runs > 1 else ''}{why}")
    return "; ".join(parts)


def _summarise_point(rows: pd.DataFrame, carried: Sequence[str]) -> dict[str, Any]:
    rows, others = _runs_of(rows)
    ok = rows[rows["status"] == Status.OK]
    figures = ok if len(ok) else rows
    out = {c: _carried(rows, ok, c) for c in carried}
    out["label"] = _first_valid(rows["label"]) if "label" in rows else None
    out["repeats"] = len(rows)
    out["ok_repeats"] = len(ok)
    out["history"] = _other_runs(others)
    out["status"] = combined_status(rows["status"].astype(str))
    out["reason"] = _first_valid(rows.loc[rows["status"] != Status.OK, "reason"]) if "reason" in rows else None
    samples = [s for s in (steady_step_times(r) for _, r in ok.iterrows()) if s.size]
    out["steady_samples"] = samples
    for m in MEDIAN_METRICS:
        out[m] = ok[m].median() if m in ok else np.nan
    if samples:
        pooled = np.concatenate(samples)
        out[rec.STEP_TIME_S] = float(STATISTICS[STEP_STATISTIC](pooled))
        # the spread of the same steps as the step: a median of each repeat's p90 can lie below a
        # pooled mean that a slow repeat raised
        out[rec.STEP_TIME_P10_S], out[rec.STEP_TIME_P90_S] = (float(STATISTICS[q](pooled)) for q in ("p10", "p90"))
        out[rec.STEP_TIME_CV] = coefficient_of_variation(pooled)
        _rates_over_step(out, ok)
    else:
        for m in (rec.STEP_TIME_S, rec.STEP_TIME_CV):
            out[m] = ok[m].median() if m in ok else np.nan
    out[rec.STEP_TIME_MEAN_S] = out[rec.STEP_TIME_S]  # the name the loader tables read
    out["mfu_peak"] = _first_valid(ok["mfu_peak"]) if "mfu_peak" in ok else None
    _one_peak(out, ok)
    for m in MAX_METRICS:
        out[m] = figures[m].max() if m in figures else np.nan
    warmups = [detect_warmup(r[rec.STEP_TIMES_S]) for _, r in ok.iterrows()
               if isinstance(r.get(rec.STEP_TIMES_S), (list, tuple, np.ndarray))]
    out["warmup_detected"] = float(np.median(warmups)) if warmups else np.nan
    for s in SERIES:
        out[s] = _first_valid(ok[s]) if s in ok else None
    out["loss_repeats"] = _loss_repeats(ok)
    out["health_warnings"] = warnings_of(rows)
    # a decoder's step is the wait for its next sample, which a queue filled ahead answers at once:
    # its spread says nothing of the decoding, whose figures are its latency and CPU
    out["notes"] = notes(None if decodes(ok) else out[rec.STEP_TIME_CV], [*out["health_warnings"], graph_break_note(ok),
                                                                           cards_note(ok), skipped_note(ok)])
    command = "workload" in ok and bool((ok["workload"] == "command").any())
    out["fidelity"] = with_compute(fidelity_label(out[rec.UPDATE_APPLIED_SHARE], out[rec.UPDATE_APPLIED_SHARE_SE],
                                                  trains=_has_losses(out.get(rec.LOSSES)), command=command),
                                   out.get("extra.compute_fidelity"), out[rec.COMPUTE_GRADIENT_COSINE],
                                   skipped=isinstance(out.get("extra.compute_fidelity_skipped"), str))
    return out


def _one_peak(out: dict[str, Any], ok: pd.DataFrame) -> None:
    """Repeats from hosts whose GEMM probes differ (658 and 673 TFLOP/s on two H200s) pooled into one
    measured-peak MFU would be over no peak at all: state it over the peak the point names (its
    first record's), from the datasheet MFU, whose peak all of them share."""
    if "mfu_peak" not in ok or ok["mfu_peak"].dropna().nunique() < 2:
        return
    first = ok[ok["mfu_peak"] == out["mfu_peak"]].iloc[0]
    if is_missing(out.get("mfu_datasheet")) or is_missing(first["mfu_datasheet"]) or not first["mfu_datasheet"] > 0:
        return
    out[rec.MFU] = out["mfu_datasheet"] * first[rec.MFU] / first["mfu_datasheet"]


def _rates_over_step(out: dict[str, Any], ok: pd.DataFrame) -> None:
    """Throughput and MFU over the point's shown step, so that samples/s/GPU = samples per step /
    step (s) in every table and plot; a loader's rate is what it delivered and stays as recorded."""
    if f"extra.{DELIVERED_RATE}" in ok and ok[f"extra.{DELIVERED_RATE}"].notna().any():
        return
    if is_missing(out[rec.SAMPLES_PER_STEP]) or not out[rec.STEP_TIME_S] > 0:
        return
    recorded = out[rec.SAMPLES_PER_S_PER_GPU]
    out[rec.SAMPLES_PER_S_PER_GPU] = out[rec.SAMPLES_PER_STEP] / out[rec.STEP_TIME_S]
    world = out.get("world_size")
    out[rec.SAMPLES_PER_S] = out[rec.SAMPLES_PER_S_PER_GPU] * (1 if is_missing(world) else world)
    for mfu in (rec.MFU, "mfu_datasheet", "mfu_fp8"):
        if not is_missing(out.get(mfu)) and not is_missing(recorded) and recorded > 0:
            out[mfu] *= out[rec.SAMPLES_PER_S_PER_GPU] / recorded


def _loss_repeats(ok: pd.DataFrame) -> list[list[float]]:
    """The loss curves measured in the run of the point's first curve (the one its tables show), that
    one first: the same code and data measured again (another run's may be other code)."""
    if rec.LOSSES not in ok or "run_id" not in ok:
        return []
    trained = ok[ok[rec.LOSSES].map(_has_losses)]
    if trained.empty:
        return []
    same_run = trained[trained["run_id"] == trained["run_id"].iloc[0]]
    return [list(losses) for losses in same_run[rec.LOSSES]]


def _has_losses(series: Any) -> bool:
    return isinstance(series, (list, tuple, np.ndarray)) and len(series) > 0


#: a training point whose records hold no fidelity sample (they predate it): its numerics are unknown,
#: not faithful, and a blank cell would read as nothing to say
NOT_RECORDED = "not recorded"
#: a command's optimizer steps in the command's own processes, out of the update fidelity's reach
OWN_OPTIMIZER = "not measured (the command's own optimizer)"


def fidelity_label(share: float, se: float, trains: bool = False, command: bool = False) -> str:
    """``faithful (1.00)``: the verdict of collect.fidelity and the applied share of the fp32
    reference update it rests on; without one, what a command's optimizer is, ``not recorded`` for
    another training point, "" for a point that does not train (a decoder)."""
    if is_missing(share):
        return OWN_OPTIMIZER if command and trains else NOT_RECORDED if trains else ""
    return f"{verdict(share, None if is_missing(se) else se)} ({share:.2f})"


def point_summary(df: pd.DataFrame, peak_flops: float | None = None,
                  price_per_gpu_hour: float | Mapping[str, float] | None = None) -> pd.DataFrame:
    """One row per (suite, point_id), in first-seen order; see the module docstring.

    Adds ``name`` (see :func:`_names`) and ``steady_samples`` (each ok repeat's steady steps: one
    value per process for the breakdown's test, the steps for the plots). ``mfu`` is the recorded
    figure, recomputed where missing (or for every row when ``peak_flops`` is forced).
    ``cost_per_m_samples`` is at ``price_per_gpu_hour`` (one price, or one per suite; NaN without
    one), over the point's samples/s/GPU.
    """
    if df.empty:
        return pd.DataFrame()
    df = df.assign(mfu=mfu_column(df, peak_flops), mfu_peak=peak_label_column(df, peak_flops),
                   mfu_datasheet=datasheet_mfu_column(df, peak_flops), mfu_fp8=fp8_mfu_column(df))
    knobs, params = knob_columns(df), param_columns(df)
    extras = [c for c in df.columns if c.startswith("extra.")]
    carried = [c for c in (*IDENTITY, *params, *knobs, *extras) if c in df.columns]
    rows = [_summarise_point(g, carried) for _, g in df.groupby(["suite", "point_id"], sort=False)]
    summary = rows_to_frame(rows)
    summary[PRICE_KEY] = price_column(summary, price_per_gpu_hour)
    summary[COST] = cost_column(summary)
    summary["name"] = pd.concat([_names(points, suite_varying(summary, suite))
                                 for suite, points in summary.groupby("suite", sort=False)])
    return summary


def _names(points: pd.DataFrame, varying: Sequence[str]) -> pd.Series:
    """Each point's label; an unlabelled point is named after the labelled point it differs
    from least plus those differences (``baseline, mbs=8``), else by its varying knobs. Points that
    share a label (one measured under an older version of the suite) are told apart by what differs
    (``+full_recompute@32 (trim_prompts=False)``): two rows of one name would read as a contradiction;
    by the knobs alone where they tell every twin apart (a command's argv is long)."""
    labelled = [row for _, row in points.iterrows() if isinstance(row["label"], str)]

    def name(row: pd.Series) -> str:
        if isinstance(row["label"], str):
            twins = [other for other in labelled if other["label"] == row["label"] and other.name != row.name]
            differ = [c for c in varying if any(str(row[c]) != str(other[c]) for other in twins)]
            knobs = [c for c in differ if not c.startswith("param.")]
            if knobs and all(any(str(row[c]) != str(other[c]) for c in knobs) for other in twins):
                differ = knobs
            return f"{row['label']} ({describe(row, differ)})" if differ else row["label"]
        if not labelled:
            return describe(row, varying)
        diffs = [[c for c in varying if str(row[c]) != str(ref[c])] for ref in labelled]
        nearest = min(range(len(labelled)), key=lambda i: len(diffs[i]))
        return f"{labelled[nearest]['label']}, {describe(row, diffs[nearest])}"

    return points.apply(name, axis=1)


def suite_varying(summary: pd.DataFrame, suite: str) -> list[str]:
    """Knob and param columns that vary among one suite's points."""
    points = summary[summary["suite"] == suite]
    return varying_columns(points, knob_columns(points) + param_columns(points))


#: the sweep table's columns, in display order (the knobs and params that vary follow them)
SWEEP_COLUMNS = ("name", "status", "repeats", rec.STEP_TIME_S, rec.STEP_TIME_P10_S, rec.STEP_TIME_P90_S,
                 rec.STEP_TIME_CV, rec.SAMPLES_PER_S_PER_GPU, *FIGURES, rec.PEAK_MEM_ALLOCATED_GIB,
                 rec.PEAK_MEM_RESERVED_GIB, rec.PEAK_HOST_RSS_GIB, rec.MFU, "mfu_peak", "mfu_datasheet", "mfu_fp8",
                 "fidelity",
                 "warmup_detected", "notes", "reason", "history")
#: a decoder point's sweep row: its figures are its latency and CPU (the report's Decoders section)
DECODE_SWEEP_COLUMNS = ("name", "status", "repeats", rec.PEAK_HOST_RSS_GIB, "notes", "reason", "history")
#: a decoder's key figures, for a terminal: its latency, CPU and delivered rate, no step
DECODE_KEY_COLUMNS = ("name", "status", "extra.view_latency_ms_median", "extra.cpu_s_per_sample",
                      f"extra.{DELIVERED_RATE}", "notes", "reason", "history")
#: the key figures, for a terminal
KEY_COLUMNS = ("name", "status", rec.STEP_TIME_S, rec.SAMPLES_PER_S_PER_GPU, *FIGURES, rec.PEAK_MEM_ALLOCATED_GIB,
               rec.PEAK_HOST_RSS_GIB, rec.MFU, "mfu_peak", "mfu_datasheet", "mfu_fp8", "fidelity", "notes", "reason",
               "history")


def decodes(points: pd.DataFrame) -> bool:
    """Whether these are decoder points (per-view latency recorded): their figures are decode figures."""
    return "extra.view_latency_ms_median" in points and points["extra.view_latency_ms_median"].notna().any()


def sweep_table(points: pd.DataFrame, columns: Sequence[str] = SWEEP_COLUMNS) -> pd.DataFrame:
    """Points of one workload: name, status and the figures recorded first, then the knobs and
    params that vary among them. Host RSS stands in for the peak memory of points run on CPU; an
    ok point without a per-sample figure others have reads ``absent`` (benchbay.analysis.cost)."""
    if points.empty:
        return pd.DataFrame()
    varying = varying_columns(points, knob_columns(points) + param_columns(points))
    device_memory = rec.PEAK_MEM_ALLOCATED_GIB in points and points[rec.PEAK_MEM_ALLOCATED_GIB].notna().any()
    shown = [c for c in columns if c in points and points[c].map(lambda v: not is_missing(v) and v != "").any()
             and not (c == rec.PEAK_HOST_RSS_GIB and device_memory)]
    table = points[shown + [c for c in varying if c not in shown]].reset_index(drop=True)
    return say_absent(table, table["status"] == Status.OK)


def device_word(points: pd.DataFrame) -> str:
    """What a rate is per: "GPU" for points run on GPUs, else "device" (a process on CPU)."""
    if "device" in points and points["device"].notna().any():
        return "GPU" if (points["device"] == "cuda").any() else "device"
    on_device = rec.PEAK_MEM_ALLOCATED_GIB in points and points[rec.PEAK_MEM_ALLOCATED_GIB].notna().any()
    return "GPU" if on_device else "device"


#: knobs a point may change without changing the maths (its losses should match)
NUMERICALLY_NEUTRAL = ("compile", "cuda_graph")


def in_label_order(points: pd.DataFrame, labels: Sequence[str]) -> pd.DataFrame:
    """``points`` in the order of ``labels`` (a suite's), those it does not name last in their own order."""
    order = {label: i for i, label in enumerate(labels)}
    return points.sort_values("label", key=lambda c: c.map(lambda label: order.get(label, len(order))),
                              kind="stable")


def equivalent_groups(summary: pd.DataFrame, label_groups: Sequence[Sequence[str]] | None = None) -> list[pd.DataFrame]:
    """Groups of ok points with losses that should train alike: the suite's label groups if given,
    else points equal in every knob and param except compile and CUDA graphs."""
    ok = summary[(summary["status"] == Status.OK) & summary[rec.LOSSES].map(_has_losses)]
    if label_groups:
        # in the suite's order: the first label named is the reference the others follow
        groups = [in_label_order(ok[ok["label"].isin(labels)], labels) for labels in label_groups]
    else:
        same = [c for c in ["suite", "workload", *param_columns(ok), *knob_columns(ok)]
                if c in ok.columns and c not in NUMERICALLY_NEUTRAL]
        groups = [g for _, g in ok.groupby(group_keys(ok, same), sort=False, dropna=False)] if same and len(ok) else []
    return [g for g in groups if len(g) > 1]


def with_repeats(group: pd.DataFrame) -> pd.DataFrame:
    """The group with each point's other repeats of the same run as rows of their own, just after it
    (``name (repeat 2)``, ``repeat_of`` naming the point): how far one configuration's losses part
    from run to run, the spread a difference between points must exceed to mean anything."""
    rows = []
    for _, point in group.iterrows():
        rows.append(point.to_dict())
        repeats = point.get("loss_repeats")
        if isinstance(repeats, list) and len(repeats) > 1:
            rows += [{**point.to_dict(), "name": f"{point['name']} (repeat {j})", rec.LOSSES: losses,
                      "repeat_of": point["name"]} for j, losses in enumerate(repeats[1:], 2)]
    return pd.DataFrame(rows) if len(rows) > len(group) else group


def trailing_mean(group: pd.DataFrame, window: int) -> pd.DataFrame:
    """The group with each loss curve replaced by its mean over the last ``window`` steps (fewer at
    the start): over hundreds of steps, runs that part follow each other's trend, not each step's."""
    if window <= 1:
        return group
    means = [pd.Series(np.asarray(losses, dtype=float)).rolling(window, min_periods=1).mean().to_numpy()
             for losses in group[rec.LOSSES]]
    out = group.copy()
    out[rec.LOSSES] = pd.Series(means, index=group.index, dtype=object)
    return out


def repeat_of(group: pd.DataFrame) -> pd.Series:
    """Per row, the point it is a repeat of (:func:`with_repeats`), missing for a point's own row."""
    return group["repeat_of"] if "repeat_of" in group else pd.Series([None] * len(group), index=group.index)


def runs_of(group: pd.DataFrame, name: str) -> np.ndarray:
    """The loss curves of the group's point ``name``, one row a run: its own and, where it was measured
    again (:func:`with_repeats`), its repeats' (only its own where their lengths differ)."""
    own = group["name"] == name
    mine = np.asarray(group.loc[own, rec.LOSSES].iloc[0], dtype=float)
    runs = [np.asarray(x, dtype=float) for x in group.loc[(repeat_of(group) == name).to_numpy(), rec.LOSSES]]
    return np.vstack([mine, *runs]) if all(r.size == mine.size for r in runs) else mine[None]


def reference_runs(group: pd.DataFrame) -> np.ndarray:
    """The loss curves of the group's first point (:func:`runs_of`): the reference the others follow."""
    return runs_of(group, str(group["name"].iloc[0]))


def reference_band(runs: np.ndarray, rtol: float, atol: float) -> tuple[np.ndarray, np.ndarray]:
    """The lowest and highest loss at each step that agrees with ``runs`` (:func:`reference_runs`):
    within ``atol + rtol * |loss|`` of the band its runs span at that step (one run: of that run)."""
    low, high = runs.min(axis=0), runs.max(axis=0)
    return low - (atol + rtol * np.abs(low)), high + atol + rtol * np.abs(high)


def loss_agreement(group: pd.DataFrame, rtol: float = LOSS_RTOL, atol: float = LOSS_ATOL) -> pd.DataFrame:
    """Each member's final loss, its largest differences from the group's first member and whether
    every step stays within ``atol + rtol * |first|`` (gate.compare_losses). Where a point was
    measured again (:func:`with_repeats`), each of its runs is as good as another: a member agrees
    when at every step the span of its runs meets :func:`reference_band` of the first point's runs
    (the two cannot be told apart beyond the tolerance). A repeat's own row says where that run lies: the
    first point's from the first run, a member's against the band."""
    reference = np.asarray(group[rec.LOSSES].iloc[0], dtype=float)
    first = str(group["name"].iloc[0])
    runs = reference_runs(group)
    rows = []
    for (_, row), of in zip(group.iterrows(), repeat_of(group), strict=True):
        losses = np.asarray(row[rec.LOSSES], dtype=float)
        check = compare_losses(reference, losses, first, str(row["name"]), rtol=rtol, atol=atol)
        within = "yes" if check.passed else f"no ({check.message})"
        if row["name"] != first and of != first:
            mine = runs_of(group, str(row["name"])) if is_missing(of) else losses[None]
            if len(runs) > 1 or len(mine) > 1:
                within = _within_band(runs, mine, first, rtol, atol)
        fidelity = str(row.get("fidelity", "") or "")
        if fidelity and not fidelity.startswith(("faithful", NOT_RECORDED, OWN_OPTIMIZER)):
            # losses of a few steps cannot see lost updates: a point that is not faithful fails
            within = f"no (update fidelity: {fidelity})"
        elif "compute lossy" in fidelity:  # nor gradients that are wrong (tune's faithful refuses them too)
            within = f"no (compute fidelity: {fidelity})"
        rows.append({"point": row["name"], "steps": losses.size, "final_loss": losses[-1],
                     "max_abs_diff": check.max_abs_diff, "max_rel_diff": check.max_rel_diff,
                     "within_tolerance": within})
    return pd.DataFrame(rows)


def _within_band(runs: np.ndarray, mine: np.ndarray, first: str, rtol: float, atol: float) -> str:
    """``yes ...`` when at every step the span of the runs ``mine`` meets :func:`reference_band` of
    ``runs``, else ``no`` naming the first step where it does not and the span of the first point's runs."""
    if mine.shape[1] != runs.shape[1]:
        return f"no ({mine.shape[1]} steps vs {runs.shape[1]} of {first}'s)"
    lower, upper = reference_band(runs, rtol, atol)
    inside = (mine.max(axis=0) >= lower) & (mine.min(axis=0) <= upper)
    theirs = f"{first}'s {len(runs)} runs" if len(runs) > 1 else f"{first}'s run"
    if inside.all():
        return (f"yes (within the band of {theirs})" if len(mine) == 1
                else f"yes (its {len(mine)} runs' span meets the band of {theirs} at every step)")
    step = int(np.flatnonzero(~inside)[0])
    low, high = runs[:, step].min(), runs[:, step].max()
    span = f"{first}'s runs' {low:.6g} to {high:.6g}" if len(runs) > 1 else f"{first}'s run's {low:.6g}"
    ours = (f"{mine[0, step]:.6g}" if len(mine) == 1
            else f"its {len(mine)} runs' {mine[:, step].min():.6g} to {mine[:, step].max():.6g}")
    return f"no (step {step}: {ours} outside {span})"
