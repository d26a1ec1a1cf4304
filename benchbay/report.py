"""The benchmark report: Markdown and one self-contained HTML page (plots embedded as base64).

``build_report`` summarises a results frame per suite (sweep table, batch scaling, effective
throughput, step-time distributions, compile amortisation, optimisation breakdown, loss curves,
decoders, profiles), writes the PNGs, ``report.md`` (linking them) and ``report.html``
(embedding them), both rendered from one list of blocks (benchbay.document), so they say the same.

``suite_meta`` is what the report reads of the suite (``benchbay.suite.model.SuiteMeta``: its
description, breakdown, batch search, equivalent losses), or ``{suite name: SuiteMeta}`` for several.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from benchbay import document
from benchbay import record as rec
from benchbay.analysis import data_loading, plots
from benchbay.analysis.batch_size import effective_throughput
from benchbay.analysis.breakdown import leave_one_out, waterfall
from benchbay.analysis.command_clock import clock_blocks
from benchbay.analysis.command_cost import cost_blocks
from benchbay.analysis.cost import cost_notes, prices
from benchbay.analysis.frame import is_missing
from benchbay.analysis.gate import LOSS_ATOL, LOSS_RTOL
from benchbay.analysis.mfu import fp8_peak_sources, peak_sources
from benchbay.analysis.quality import MACHINE_WARNINGS, NOISY_CV, POINT_WARNINGS, warnings_of
from benchbay.analysis.scaling import plot_scaling, scaling_table
from benchbay.analysis.steady import amortisation_table
from benchbay.analysis.tables import (
    DECODE_SWEEP_COLUMNS,
    SWEEP_COLUMNS,
    decodes,
    device_word,
    equivalent_groups,
    in_label_order,
    loss_agreement,
    point_summary,
    repeat_of,
    sweep_table,
    trailing_mean,
    with_repeats,
)
from benchbay.document import Block, Heading, Image, Table, Text
from benchbay.record import DELIVERED_RATE
from benchbay.store import refuse_links, write_atomic
from benchbay.suite.model import SuiteMeta
from benchbay.tune.figures import tune_blocks

# gpu_uuid_hash: the cards a run's points ran on (one machine key, several cards when resumed elsewhere)
ENV_COLUMNS = ("run_state", "env.machine_key", "env.gpu", "env.gpu_count", "env.gpu_uuid_hash", "env.driver",
               "env.cuda", "env.torch", "env.git_commit")
TOP_OPS = 10
MAX_CELL = 160  # characters; longer texts (failure reasons) are cut
#: the decoder table: (column, heading, scale)
DECODER_COLUMNS = (
    ("extra.view_latency_ms_median", "per-view median (ms)", 1.0),
    ("extra.view_latency_ms_p90", "per-view p90 (ms)", 1.0),
    ("extra.view_latency_ms_p99", "per-view p99 (ms)", 1.0),
    ("extra.view_cpu_ms_median", "per-view CPU median (ms)", 1.0),
    ("extra.sample_latency_ms_median", "per-sample median (ms)", 1.0),
    ("extra.open_ms_median", "open median (ms)", 1.0),
    ("extra.frames_per_s", "frames/s", 1.0),
    ("extra.frames_per_cpu_s", "frames/s per core", 1.0),
    ("extra.view_latency_ms_opened_median", "per-view, file opened (ms)", 1.0),
    ("extra.view_latency_ms_reused_median", "per-view, decoder reused (ms)", 1.0),
    ("extra.cpu_util_mean", "CPU util (% of a core)", 1.0),
    ("extra.cpu_util_cv", "CPU CV (stability)", 1.0),
    ("extra.cpu_s_per_sample", "CPU s/sample", 1.0),
    ("extra.loader_overhead_cpu_ms_per_sample", "loader overhead CPU (ms/sample)", 1.0),
    (f"extra.{DELIVERED_RATE}", "loader samples/s", 1.0),
    ("extra.foreground_inflation", "foreground slow-down", 1.0),
    ("extra.kb_per_frame", "kB/frame", 1.0),
    ("extra.bits_per_pixel", "bits/pixel", 1.0),
)


# --- number formatting ---------------------------------------------------------------------------
def _formatter(column: str) -> Callable[[Any], str]:
    if column in (rec.MFU, "mfu_datasheet", "mfu_fp8"):
        return "{:.1%}".format
    if column == rec.STEP_TIME_CV:
        return "{:.2f}".format
    if "change" in column:
        return "{:+.1%}".format
    if column in ("ratio", "speedup"):
        return "{:.2f}x".format
    if column.endswith("_gib"):
        return "{:.1f}".format
    return lambda v: f"{v:.4g}" if isinstance(v, (float, np.floating)) else str(v)


DISPLAY_NAMES = {
    rec.STEP_TIME_S: "step (s)", rec.STEP_TIME_P10_S: "p10 (s)", rec.STEP_TIME_P90_S: "p90 (s)",
    rec.SAMPLES_PER_S_PER_GPU: "samples/s/GPU", rec.PEAK_MEM_ALLOCATED_GIB: "peak alloc (GiB)",
    rec.PEAK_MEM_RESERVED_GIB: "peak reserved (GiB)", rec.MFU: "MFU (trained)",
    "mfu_datasheet": "MFU (trained, datasheet peak)", "mfu_fp8": "MFU (trained, FP8 peak)",
    "warmup_detected": "warm-up steps (detected)",
    rec.FIRST_STEP_S: "first step (s)", "eager_step_time_s": "eager step (s)", "overhead_s": "overhead (s)",
    "break_even_steps": "break-even (steps)", "step_change": "time/sample change [CI]",
    "throughput_change": "throughput change [CI]", "speedup": "speed-up", "first_failing": "first failing",
    "largest_ok": "largest ok", "eager_point": "eager point", "final_loss": "final loss",
    "max_abs_diff": "max abs diff from first", "max_rel_diff": "max rel diff", "within_tolerance": "within tolerance",
    rec.STEP_TIME_CV: "CV", rec.PEAK_HOST_RSS_GIB: "peak host RSS (GiB)",
    "inflation_change": "inflation vs synthetic [CI]", "most vs best_change": "most vs best workers",
    "noise_floor_change": "noise between processes", "cost_per_m_samples": "cost / 1M samples",
    rec.ENERGY_J_PER_SAMPLE: "J/sample", "mfu_peak": "MFU's peak", "history": "other runs",
}


def _with_intervals(table: pd.DataFrame) -> pd.DataFrame:
    """Fold ``x``, ``x_low``, ``x_high`` columns into one ``+12.3% [+10.1%, +14.0%]`` column."""
    table = table.copy()
    for column in [c for c in table.columns if f"{c}_low" in table.columns]:
        fmt = _formatter(column)

        def cell(row: pd.Series) -> str:
            value, low, high = row[column], row[f"{column}_low"], row[f"{column}_high"]
            if is_missing(value):
                return ""
            bounds = "" if is_missing(low) or is_missing(high) else f" [{fmt(low)}, {fmt(high)}]"
            return fmt(value) + bounds

        table[column] = table.apply(cell, axis=1) if len(table) else []
        table = table.drop(columns=[f"{column}_low", f"{column}_high"])
    return table


def display(table: pd.DataFrame, per: str = "GPU") -> pd.DataFrame:
    """A table as display strings: intervals folded, numbers formatted, index as columns, names;
    ``per``: what a rate is per ("GPU", or "device" for points run on CPU)."""
    table = _with_intervals(table.reset_index() if table.index.name or table.index.nlevels > 1 else table)
    names = {**DISPLAY_NAMES, **{column: heading for column, heading, _ in DECODER_COLUMNS},
             rec.SAMPLES_PER_S_PER_GPU: f"samples/s/{per}", rec.ENERGY_WATTS: f"W/{per}"}
    out = pd.DataFrame(index=range(len(table)))
    for column in table.columns:
        fmt = _formatter(column)
        cells = ["" if is_missing(v) else (v if isinstance(v, str) else fmt(v)) for v in table[column]]
        out[names.get(column, column)] = [c if len(c) <= MAX_CELL else c[: MAX_CELL - 3] + "..." for c in cells]
    return out


# --- the sections ----------------------------------------------------------------------------------
def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "suite"


def _suite_metas(suite_meta: SuiteMeta | Mapping[str, SuiteMeta] | None) -> dict[str, SuiteMeta]:
    if isinstance(suite_meta, SuiteMeta):
        return {suite_meta.name: suite_meta}
    return dict(suite_meta or {})


def _overview(df: pd.DataFrame, title: str) -> list[Block]:
    counts = df.groupby(["suite", "run_id"], sort=False)["status"].agg(
        lambda s: ", ".join(f"{k} {v}" for k, v in s.value_counts().items())).rename("records")
    # a resumed run may span commits (or drivers): each value it saw, in order
    env = df.groupby(["suite", "run_id"], sort=False)[[c for c in ENV_COLUMNS if c in df.columns]].agg(
        lambda s: ", ".join(dict.fromkeys(str(v) for v in s.dropna())))
    env = env.loc[:, (env != "").any()]  # a field no record has (records older than it, or no GPU)
    runs = pd.concat([counts, env], axis=1).reset_index()
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    blocks: list[Block] = [Heading(title, 1), Text(f"Generated {stamp} from {len(df)} records."),
                           Table(display(runs.rename(columns=lambda c: c.removeprefix("env."))),
                                 "runs and environments")]
    states = runs.get("run_state", pd.Series("", index=runs.index))
    unfinished = runs[states.isin(["interrupted", "running"])]
    if len(unfinished):
        blocks.append(Text(f"Unfinished: {', '.join(unfinished['suite'] + ' ' + unfinished['run_id'])} (interrupted "
                           "or still running): a point, a batch search or a tune's trials may be missing; "
                           "`benchbay run SUITE --resume RUN_ID` (a tune: `benchbay tune`) continues it."))
    return blocks + _health_blocks(df)


def _health_blocks(df: pd.DataFrame) -> list[Block]:
    """The machine checks of the runs: its settings, and how many records ran while it was busy."""
    blocks: list[Block] = [Text(f"Machine: {w}.") for w in warnings_of(df, MACHINE_WARNINGS)]
    busy = df[POINT_WARNINGS].map(lambda v: isinstance(v, list) and len(v) > 0).sum() if POINT_WARNINGS in df else 0
    if busy:
        blocks.append(Text(f"The machine was not quiet during {busy} of {len(df)} records (other processes on the "
                           "CPUs or GPUs, or slowed clocks): their points say so in the notes column, and their "
                           "figures may hold that noise."))
    return blocks


def _sweep_blocks(points: pd.DataFrame) -> list[Block]:
    blocks: list[Block] = [Heading("Sweep", 3)]
    # a suite whose points name different workloads gets one table each: their knobs differ
    for workload, group in points.groupby("workload", sort=False):
        caption = f"workload {workload}" if points["workload"].nunique() > 1 else ""
        # a decoder's figures are its latency and CPU (the Decoders section), not a training step's
        decoders = decodes(group)
        columns = DECODE_SWEEP_COLUMNS if decoders else SWEEP_COLUMNS
        blocks.append(Table(display(sweep_table(group, columns), per=device_word(group)), caption))
        if not decoders:
            blocks += [Text(note + ".") for note in cost_notes(group)]
    if "history" in points and (points["history"] != "").any():
        blocks.append(Text("other runs: a point's records in the suite's other runs (earlier ones, and failures "
                           "since); its figures are those of its newest run with an ok record, never pooled "
                           "with another run's."))
    if points["notes"].str.contains("noisy", regex=False).any():
        blocks.append(Text(f"noisy: the steady steps vary by more than {NOISY_CV:.0%} (CV, standard deviation over "
                           "mean); a difference between such points needs its interval to mean anything."))
    sources = peak_sources(points)
    if points[rec.MFU].notna().any() and sources:
        blocks.append(Text("MFU = FLOPs of the trained parts a sample (forward + backward: DreamZero's transformer "
                           "only, its frozen encoders not counted; Wall-X's whole model) x samples/s/GPU / peak; "
                           "the MFU's peak of each point is its column (one figure per GPU model: the table's, "
                           "else a GEMM probe of the machine where measured): "
                           + "; ".join(f"{d}: {s}" for d, s in sources.items())
                           + "; the datasheet column divides by the vendor's dense bf16 figure instead."))
    if fp8 := fp8_peak_sources(points):
        blocks.append(Text("MFU (trained, FP8 peak): the same FLOPs over the card's dense FP8 figure, for the points "
                           "that train with float8 (the ceiling their converted GEMMs run toward): "
                           + "; ".join(f"{d}: {s}" for d, s in fp8.items()) + "."))
    return blocks


def _batch_blocks(points: pd.DataFrame, meta: SuiteMeta, stem: str, out_dir: Path) -> list[Block]:
    knob = meta.batch_knob
    figure = plots.batch_scaling(points, out_dir / f"{stem}-batch_scaling.png", knob)
    if figure is None:
        return []
    search = meta.search  # a sweep without a search: no bound, no rule of fitting
    headroom, zero_retries = (search.headroom_gib, search.zero_retries) if search else (None, False)
    table = effective_throughput(points, knob, headroom, zero_retries, search.max if search else None)
    rule = ([f"at least {headroom:g} GiB left"] if headroom is not None else []) + \
        (["no allocator retries"] if zero_retries else [])
    per = device_word(points)
    return [Heading("Batch size", 3),
            Image(figure, f"throughput and peak memory against {knob}"),
            Text(f"Effective throughput: each configuration at its own largest feasible {knob}"
                 + (f" (ok, {', '.join(rule)})" if rule else "")
                 + f"; ratio = samples/s/{per} relative to the first configuration, with its 95% interval over "
                 "processes and verdict (a configuration of one process against another of one has none)."),
            Table(display(table, per=per))]


def _step_time_blocks(points: pd.DataFrame, stem: str, out_dir: Path) -> list[Block]:
    blocks: list[Block] = []
    decoders = plots.decoder_points(points)
    figure = plots.step_time_distributions(points.drop(index=decoders.index), out_dir / f"{stem}-step_times.png")
    if figure is not None:
        blocks += [Heading("Step times", 3), Image(figure, "steady-state step times per point")]
    amortisation = amortisation_table(points)
    if len(amortisation):
        blocks += [Heading("Compile and capture amortisation", 3),
                   Text("Steps to repay the first (compiling / capturing) step against the eager point: "
                        "(first step - eager step) / (eager step - step)."),
                   Table(display(amortisation))]
    return blocks


def _breakdown_blocks(points: pd.DataFrame, meta: SuiteMeta, stem: str, out_dir: Path) -> list[Block]:
    labels = meta.breakdown  # an order of optimisations is the suite author's to declare
    if len(labels) < 2:
        return []
    table = waterfall(points, labels)
    per = device_word(points)
    blocks: list[Block] = [Heading("Optimisation breakdown", 3),
                           Text("Each step against the previous ok step; 95% intervals over processes (each "
                                "repeat's mean step: a point of one process against another of one has none); "
                                "step = mean steady step, time/sample = step / samples "
                                "per step (the step's own change where the batch is the same), throughput change "
                                "its reciprocal; speed-up = throughput over the first step. A change whose "
                                "interval includes no change is not significant: it may be noise.")]
    figure = plots.waterfall(table, out_dir / f"{stem}-waterfall.png", per=per)
    if figure is not None:
        blocks.append(Image(figure, "optimisation waterfall"))
    blocks.append(Table(display(table, per=per)))
    missing = table.loc[table["status"] == "missing", "label"]
    if len(missing):
        blocks.append(Text(f"missing: no record of {', '.join(missing)} in the runs reported (not measured on this "
                           "machine, or under another label)."))
    best = "best" if "best" in set(points["label"].dropna()) else labels[-1]
    loo = leave_one_out(points, best, meta.batch_knob)
    if len(loo):
        blocks += [Heading(f"Leave one out (from {best})", 4),
                   Text("Change when one optimisation is removed from the best configuration: "
                        "a slower step means the optimisation was paying off."),
                   Table(display(loo, per=per))]
    return blocks


def _loss_blocks(points: pd.DataFrame, records: pd.DataFrame, meta: SuiteMeta, stem: str,
                 out_dir: Path) -> list[Block]:
    tolerance = {"rtol": LOSS_RTOL, "atol": LOSS_ATOL, "window": 1, **meta.equivalent_tolerance}
    window = int(tolerance.pop("window"))
    groups = [trailing_mean(with_repeats(g), window) for g in equivalent_groups(points, meta.equivalent)]
    figure = plots.loss_curves(groups, out_dir / f"{stem}-losses.png", **tolerance)
    if figure is None:
        return []
    blocks: list[Block] = [Heading("Loss curves of equivalent points", 3),
                           Image(figure, "losses of points that should train alike, and their difference "
                                         "from the first")]
    each = "step's loss" if window == 1 else f"step's mean loss over its last {window} steps (the curves drawn; " \
        "the final loss is the last such mean)"
    blocks.append(Text(f"Within tolerance: every {each} within {tolerance['atol']:g} + "
                       f"{tolerance['rtol']:.1%} of the group's first point's (same seed, same data)."))
    if any("repeat_of" in g for g in groups):
        blocks.append(Text("A `(repeat N)` row is a point measured again in its run (dashed in the figure): how far "
                           "one configuration's losses part from run to run. Each of a point's runs is as good as "
                           "another, so a point is within tolerance when at every step the span of its runs meets "
                           "the tolerance of the band the first point's runs span there: the two cannot be told "
                           "apart beyond the tolerance. A repeat's own row says where that run lies (the first "
                           "point's against its first run, another point's against the band)."))
    for i, group in enumerate(groups):
        table = loss_agreement(group, **tolerance)
        blocks += [Table(display(table), f"group {i + 1}"), *_first_loss_note(table, group, records)]
    return blocks


def _first_loss_note(table: pd.DataFrame, group: pd.DataFrame, records: pd.DataFrame) -> list[Block]:
    """Why a point that differs at step 0 proves nothing: that loss comes before any update."""
    own = repeat_of(group).map(is_missing).to_numpy()  # the table's rows are the group's: points, not repeats
    differ = table.loc[own & table["within_tolerance"].str.startswith("no (step 0:").to_numpy(), "point"]
    if differ.empty:
        return []
    ids = dict(zip(group["name"], group["point_id"], strict=True))

    def runs(names) -> str:
        return ", ".join(sorted(records.loc[records["point_id"].isin([ids[n] for n in names]), "run_id"].unique()))

    first = str(group["name"].iloc[0])
    return [Text(f"{', '.join(differ)} differ from {first} at step 0, the loss before any update: they did not start "
                 f"from the same weights and batch (runs {runs(differ)} against {runs([first])}: code or data that "
                 "changed between runs), so their later steps say nothing of the optimisation. "
                 "Points measured in one run compare.")]


def decoded_on(device: Any, fallback: Any) -> str:
    """Where a decoder point's frames were decoded: a cuda point whose backend fell back to the CPU
    (torchcodec's own word, per camera) reads as the CPU, with the backend's reason."""
    if device != "cuda":
        return "cpu"
    reasons = {str(v).split("Falling back due to:")[-1].strip() for v in (fallback or {}).values()
               if v and "Falling back" in str(v)} if isinstance(fallback, Mapping) else set()
    return f"cpu (cuda fell back: {', '.join(sorted(reasons))})" if reasons else "cuda (NVDEC)"


def _decoder_blocks(points: pd.DataFrame, stem: str, out_dir: Path) -> list[Block]:
    decoders = plots.decoder_points(points)
    if decoders.empty:
        return []
    blocks: list[Block] = [Heading("Decoders", 3)]
    latency = plots.decoder_latency(points, out_dir / f"{stem}-decode_latency.png")
    blocks.append(Image(latency, "per-view decode latency"))
    missing = pd.Series([None] * len(decoders), index=decoders.index)
    devices, fallbacks = decoders.get("device", missing), decoders.get("extra.cuda_fallback", missing)
    table = pd.DataFrame({"decoder": decoders["name"],
                          "decoded on": [decoded_on(d, f) for d, f in zip(devices, fallbacks, strict=True)]})
    for column, name, scale in DECODER_COLUMNS:
        if column in decoders:
            table[name] = decoders[column].astype(float) * scale
    blocks.append(Table(display(table)))
    cpu = plots.cpu_utilisation(points, out_dir / f"{stem}-cpu_util.png")
    if cpu is not None:
        blocks.append(Image(cpu, "process CPU utilisation during decoding"))
    else:
        blocks.append(Text(f"No CPU plot: no point measured {plots.MIN_CPU_SAMPLES} CPU samples (one each 0.2 s) "
                           "or more, too few for a course over time; the table gives each point's mean."))
    return blocks


def _video_blocks(records: pd.DataFrame, stem: str, out_dir: Path) -> list[Block]:
    table = data_loading.inflation_table(records)
    if table.empty:
        return []
    blocks: list[Block] = [
        Heading("Video in the training loop", 3),
        Text("Each data=video point against the same point on synthetic data in its own run: the inflation of "
             "the mean step (workers deliver batches together: most steps find one ready and the next waits for "
             "all, so the median step hides the wait) with its 95% interval, the wait per step and its share, the "
             "loader workers' CPU (cores) and the GPU's idle share (NVML). A loader cannot make the step faster: the "
             "largest speed-up shown at a batch size is the noise between processes there, and a point is "
             "slower only when its whole interval lies above that noise."),
    ]
    figure = data_loading.plot_inflation(table, out_dir / f"{stem}-video_inflation.png")
    if figure is not None:
        blocks.append(Image(figure, "step-time inflation against DataLoader workers"))
    blocks.append(Table(display(table)))
    blocks += [Heading("Best loader", 4), Table(display(data_loading.best_loaders(table)))]
    claim = data_loading.workers_claim(table)
    if len(claim):
        blocks += [Heading("Do more loader workers slow the step? (RLinf's claim)", 4),
                   Text("The most workers against the best worker count of the same backend: reproduced "
                        "when the most workers are slower than synthetic data beyond the noise between processes "
                        "and their interval lies above the best count's."),
                   Table(display(claim))]
    return blocks


def _top_ops(ops: Iterable[Mapping]) -> pd.DataFrame:
    rows = []
    for op in list(ops)[:TOP_OPS]:
        seconds = op.get("time_s")  # per step: device time on CUDA, self host time on CPU
        rows.append({"op": op.get("name"), "time per step (ms)": None if seconds is None else seconds * 1e3,
                     "share": op.get("share")})
    return pd.DataFrame(rows).assign(share=lambda t: t["share"].map(lambda s: "" if is_missing(s) else f"{s:.1%}"))


def _profile_blocks(points: pd.DataFrame, stem: str, out_dir: Path) -> list[Block]:
    blocks: list[Block] = []
    figure = plots.phases(points, out_dir / f"{stem}-phases.png")
    if figure is not None:
        blocks.append(Image(figure, "phases of the profiled step"))
    if "extra.profile_top_ops" in points:
        profiled = points[points["extra.profile_top_ops"].map(lambda v: isinstance(v, list) and len(v) > 0)]
        for _, point in profiled.iterrows():
            blocks.append(Table(display(_top_ops(point["extra.profile_top_ops"])), f"top ops: {point['name']}"))
    return [Heading("Profiles", 3), *blocks] if blocks else []


def _scaling_blocks(records: pd.DataFrame, stem: str, out_dir: Path) -> list[Block]:
    table = scaling_table(records)
    if table.empty or table["world_size"].nunique() < 2:
        return []
    figure = plot_scaling(table, out_dir / f"{stem}-scaling.png")
    blocks: list[Block] = [Heading("Scaling", 3),
                           Text("Samples/s at each world size; efficiency = throughput / (GPUs x throughput "
                                "at the smallest world size of the same configuration).")]
    if figure is not None:
        blocks.append(Image(figure, "throughput and scaling efficiency against GPUs"))
    return [*blocks, Table(display(table))]


def _suite_blocks(points: pd.DataFrame, records: pd.DataFrame, meta: SuiteMeta, out_dir: Path) -> list[Block]:
    """One suite's sections: ``points`` its point summary, ``records`` its rows of the flat frame."""
    suite = str(points["suite"].iloc[0])
    stem = _slug(suite)
    blocks: list[Block] = [Heading(f"Suite {suite}")]
    if meta.description:
        blocks.append(Text(str(meta.description)))  # a suite file's is not checked: YAML may make it a number
    for section in (
        _sweep_blocks(points),
        _batch_blocks(points, meta, stem, out_dir),
        _step_time_blocks(points, stem, out_dir),
        _breakdown_blocks(points, meta, stem, out_dir),
        _loss_blocks(points, records, meta, stem, out_dir),
        cost_blocks(points, records),
        clock_blocks(points, records),
        _decoder_blocks(points, stem, out_dir),
        _video_blocks(records, stem, out_dir),
        _profile_blocks(points, stem, out_dir),
    ):
        blocks += section
    return blocks


def one_machine_per_suite(df: pd.DataFrame) -> tuple[pd.DataFrame, list[Block]]:
    """Each suite's records of the machine its newest run ran on, and a line naming the runs left
    out: a point's repeats pooled across machines (a 2-core laptop and a 16-core GPU host, two
    hosts of one GPU) would give figures no machine measured."""
    if "env.machine_key" not in df:
        return df, []
    machines = df["env.machine_key"].fillna("")
    newest = df.assign(machine=machines).sort_values("run_id").groupby("suite", sort=False)["machine"].last()
    keep = machines == df["suite"].map(newest)
    dropped = df[~keep].groupby(["suite", "run_id"], sort=False)["env.machine_key"].first()
    blocks = [Text(f"Suite {suite}: the runs of {newest[suite]} (its newest run's machine) only; left out, from "
                   f"other machines: " + ", ".join(f"{run} ({key})" for (_, run), key in runs.items()) + ".")
              for suite, runs in dropped.groupby(level=0, sort=False)]
    return df[keep], blocks


def build_report(df: pd.DataFrame, out_dir: str | Path, title: str = "benchbay report",
                 suite_meta: SuiteMeta | Mapping[str, SuiteMeta] | None = None, peak_flops: float | None = None,
                 price_per_gpu_hour: float | None = None, tunes: Mapping[str, dict[str, Any]] | None = None) -> Path:
    """Write ``report.md``, ``report.html`` and the PNGs into ``out_dir``; return the HTML's path.

    ``df`` is the flattened results frame (``benchbay.analysis.frame.records_to_frame``).
    ``peak_flops`` (FLOP/s) forces the MFU denominator for every point; ``price_per_gpu_hour``
    the price of the cost per 1M samples (else each suite's ``price_per_gpu_hour``).
    """
    out_dir = refuse_links(out_dir, Path(out_dir).parent)  # reports/<suite> a link: its files would land there
    out_dir.mkdir(parents=True, exist_ok=True)
    if df.empty:
        raise ValueError("no records to report")
    df, left_out = one_machine_per_suite(df)
    metas = _suite_metas(suite_meta)
    summary = point_summary(df, peak_flops, prices(metas, price_per_gpu_hour))
    blocks = _overview(df, title) + left_out
    for suite, points in summary.groupby("suite", sort=False):
        meta = metas.get(suite) or SuiteMeta(name=suite)
        # the suite's order, not the records' (a resumed --point run appends its points last)
        points = in_label_order(points, meta.point_labels)
        blocks += _suite_blocks(points.reset_index(drop=True), df[df["suite"] == suite], meta, out_dir)
        for run_id in sorted(set(df.loc[df["suite"] == suite, "run_id"]) & set(tunes or {})):
            blocks += tune_blocks(tunes[run_id], f"{_slug(suite)}-{run_id}", out_dir)
    blocks += _scaling_blocks(df, "scaling", out_dir)  # across suites: one configuration at several sizes
    # each whole or not at all: a full disk never cuts the report already there
    write_atomic(out_dir / "report.md", document.markdown(blocks).encode())
    return write_atomic(out_dir / "report.html", document.html(blocks, title).encode())
