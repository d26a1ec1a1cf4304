"""A tune's section of the report, from its ``tune.json`` alone: the winner and its ties, the best so
far against the device time spent, the Pareto front of the objective against peak memory, which
knobs mattered, the memory line's error, and every trial."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd
from matplotlib.figure import Figure

from benchbay.analysis.plots import save
from benchbay.document import Block, Heading, Image, Table, Text
from benchbay.record import PEAK_MEM_RESERVED_GIB


def tune_blocks(result: dict[str, Any], stem: str, out_dir: Path) -> list[Block]:
    objective = result.get("objective") or {}
    metric, direction = str(objective.get("metric", "objective")), objective.get("direction", "maximize")
    trials = [t for t in result["trials"] if isinstance(t.get("trial"), int)]
    blocks: list[Block] = [Heading(f"Tune {result.get('run_id', '')}", 3), Text(_summary(result, metric, direction))]
    figure = best_so_far(trials, metric, direction, out_dir / f"{stem}-tune-progress.png")
    if figure is not None:
        blocks.append(Image(figure, f"each trial's {metric} against the device time spent; the line: the best "
                                    "feasible so far"))
    figure = pareto_figure(trials, result["pareto"], metric, out_dir / f"{stem}-tune-pareto.png")
    if figure is not None:
        blocks.append(Image(figure, f"{metric} against peak reserved memory; the Pareto front joined"))
    if result["confirmed"]:
        blocks += [Heading("Confirmed", 4),
                   Text("The best trials measured again, each run a process of its own: the mean over the runs, "
                        "its 95% t-interval, and against the winner the ratio's 95% interval (a t-test over the "
                        "runs); one that holds 1 is a tie (within the noise between processes)."),
                   Table(_confirmed_table(result["confirmed"]))]
    importances = {k: v for k, v in result["importances"].items() if isinstance(v, (int, float))}
    if importances:
        figure = importance_figure(importances, out_dir / f"{stem}-tune-importances.png")
        blocks += [Heading("Which knobs mattered", 4),
                   Text(f"Optuna's fANOVA importances of each knob to {metric} over the measured trials "
                        "(infeasible ones at the worst value): shares of the explained variance, not speed-ups."),
                   Image(figure, "knob importances")]
    blocks += _memory_blocks(result["memory_estimate"])
    blocks += [Heading("Trials", 4), Table(_trials_table(trials, metric))]
    if result["refused"]:
        blocks.append(Text(f"{len(result['refused'])} proposals were not run: " + "; ".join(
            sorted({str(r.get('why')) for r in result["refused"] if isinstance(r, dict)}))[:600] + "."))
    return blocks


def _summary(result: dict[str, Any], metric: str, direction: str) -> str:
    trials = result["trials"]
    ran = [t for t in trials if t.get("status") != "skipped"]
    stopped = sum(1 for t in trials if t.get("stopped_early"))
    budget = result.get("budget") or {}
    parts = [f"{direction.capitalize()} {metric} under {_constraints(result.get('constraints'))}: {len(ran)} trials "
             f"in {result['device_seconds']:.0f} device-seconds on {result.get('gpu') or result.get('device')} "
             f"(budget: {budget.get('trials') or '-'} trials, {budget.get('device_seconds') or '-'} device-s; "
             f"state {result.get('state')})."]
    if stopped:
        parts.append(f"{stopped} trials stopped after their first {result.get('early_steps')} measured steps ran "
                     f"below {result.get('early_stop')} of the best throughput so far.")
    best = result.get("best")
    if isinstance(best, dict):
        knobs = ", ".join(f"{k}={v}" for k, v in best["knobs"].items())
        figures = best.get("metrics") if isinstance(best.get("metrics"), dict) else {}
        peak = figures.get(PEAK_MEM_RESERVED_GIB)
        ties = best.get("ties") or []
        parts.append(f"**Best: trial {best.get('trial')}** ({knobs}): {metric} {_num(best.get('objective'))}"
                     + (f", peak {_num(peak)} GiB reserved" if peak is not None else "")
                     + (f", fidelity {figures.get('fidelity')}" if figures.get("fidelity") else "")
                     + ("; confirmed by repeats" if best.get("confirmed") else "; not confirmed by repeats")
                     + (f"; tied within the noise with trial(s) {', '.join(map(str, ties))}" if ties else "") + ".")
    elif isinstance(result.get("no_feasible"), dict):
        closest = result["no_feasible"].get("closest") or []
        parts.append("**No trial met the constraints.** The closest: " + "; ".join(
            f"trial {c.get('trial')} ({c.get('why')})" for c in closest if isinstance(c, dict)) + ".")
    return " ".join(parts)


def _constraints(constraints: Any) -> str:
    if not isinstance(constraints, dict):
        return "no constraints"
    said = [k if v is True else f"{k} {v}" for k, v in constraints.items() if v not in (None, False)]
    return ", ".join(said) or "no constraints beyond running"


def _num(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, (int, float)) and math.isfinite(value) else "-"


def best_so_far(trials: list[dict[str, Any]], metric: str, direction: str, path: Path) -> Path | None:
    spent, xs, ys, colors, line_x, line_y, best = 0.0, [], [], [], [], [], None
    for t in trials:
        spent += t.get("device_s") or 0.0
        value = t.get("objective")
        if not isinstance(value, (int, float)):
            continue
        xs.append(spent / 60)
        ys.append(value)
        colors.append("tab:green" if t.get("feasible") else "tab:red")
        if t.get("feasible") and (best is None or (value > best if direction == "maximize" else value < best)):
            best = value
        if best is not None:
            line_x.append(spent / 60)
            line_y.append(best)
    if not xs:
        return None
    fig = Figure(figsize=(6.4, 3.6))
    ax = fig.subplots()
    ax.scatter(xs, ys, c=colors, s=18, zorder=3)
    if line_x:
        ax.step(line_x, line_y, where="post", color="black", label="best feasible so far")
    ax.scatter([], [], c="tab:green", s=18, label="feasible trial")
    ax.scatter([], [], c="tab:red", s=18, label="infeasible trial")
    ax.set_xlabel("device time spent (min)")
    ax.set_ylabel(metric)
    ax.legend(loc="best", fontsize=8)
    ax.grid(alpha=0.3)
    return save(fig, path)


def pareto_figure(trials: list[dict[str, Any]], front: list[dict[str, Any]], metric: str, path: Path) -> Path | None:
    points = [(t.get(PEAK_MEM_RESERVED_GIB), t.get("objective"), bool(t.get("feasible"))) for t in trials]
    points = [(m, v, f) for m, v, f in points if isinstance(m, (int, float)) and isinstance(v, (int, float))]
    if not points:
        return None
    fig = Figure(figsize=(6.4, 3.6))
    ax = fig.subplots()
    for feasible, marker, color, label in ((True, "o", "tab:green", "feasible"), (False, "x", "tab:red", "infeasible")):
        chosen = [(m, v) for m, v, f in points if f is feasible]
        if chosen:
            ax.scatter(*zip(*chosen, strict=True), marker=marker, c=color, s=22, label=label, zorder=3)
    line = [(p.get(PEAK_MEM_RESERVED_GIB), p.get("objective")) for p in front]
    line = [(m, v) for m, v in line if isinstance(m, (int, float)) and isinstance(v, (int, float))]
    if line:
        ax.plot(*zip(*line, strict=True), "k-", lw=1, label="Pareto front", zorder=2)
    ax.set_xlabel("peak reserved memory (GiB)")
    ax.set_ylabel(metric)
    ax.legend(loc="best", fontsize=8)
    ax.grid(alpha=0.3)
    return save(fig, path)


def importance_figure(importances: dict[str, float], path: Path) -> Path:
    names = sorted(importances, key=importances.get)
    fig = Figure(figsize=(6.4, 0.5 + 0.35 * len(names)))
    ax = fig.subplots()
    ax.barh(names, [importances[n] for n in names], color="tab:blue")
    ax.set_xlabel("importance (share of explained variance)")
    ax.set_xlim(0, 1)
    return save(fig, path)


def _memory_blocks(estimate: dict[str, Any]) -> list[Block]:
    rows = [r for r in estimate.get("predictions") or [] if isinstance(r, dict)]
    if not rows:
        return [Heading("Memory estimate", 4),
                Text("No trial had a memory line to predict it (a batch of the same configuration measured first, "
                     "with a device memory figure, and a line of it or of a configuration near it, or the record's "
                     "parameter counts for its static memory). These are the predictions made as the trials ran.")]
    mean, worst, rel = (estimate.get(k) for k in ("mean_abs_error_gib", "max_abs_error_gib", "mean_rel_error"))
    table = pd.DataFrame([{"trial": r.get("trial"), "predicted GiB": _num(r.get("predicted_gib")),
                           "measured GiB": _num(r.get("measured_gib")), "status": r.get("status"),
                           "error GiB": _num(r.get("error_gib"))} for r in rows]).astype(str)
    return [Heading("Memory estimate", 4),
            Text(f"Before each trial, the line of peak reserved memory against the batch through the trials of the "
                 f"same configuration (or, with one of its batches measured, along the slope of the nearest "
                 f"configuration's line of the same recompute, else of what that batch added over its static "
                 f"memory) predicted its peak: {len(rows)} predictions, mean "
                 f"absolute error {_num(mean)} GiB ({_num(100 * rel if isinstance(rel, (int, float)) else None)}%), "
                 f"largest {_num(worst)} GiB. A batch the line puts over the card's memory is not run. The figures "
                 "are the predictions made as the trials ran: a study begun under an older version of the line may "
                 "hold predictions and refusals this version would not make, and trials it would refuse (an oom "
                 "row with a prediction over the card)."),
            Table(table)]


def _confirmed_table(rows: list[dict[str, Any]]) -> pd.DataFrame:
    out = []
    for r in rows:
        knobs = r.get("knobs") if isinstance(r.get("knobs"), dict) else {}
        verdict = "winner" if r.get("winner") else "tie" if r.get("tie") else \
            "infeasible in a run" if not r.get("feasible_in_all") else "slower" if "tie" in r else "-"
        ratio = f"{_num(r.get('ratio'))} [{_num(r.get('ratio_low'))}, {_num(r.get('ratio_high'))}]" \
            if r.get("ratio") is not None else ""
        out.append({"trial": r.get("trial"), "knobs": " ".join(f"{k}={v}" for k, v in knobs.items()),
                    "runs": r.get("runs"), "mean": _num(r.get("mean")),
                    "95% interval": f"[{_num(r.get('low'))}, {_num(r.get('high'))}]", "vs winner": ratio,
                    "verdict": verdict, "why": r.get("why") or ""})
    return pd.DataFrame(out).astype(str)


def _trials_table(trials: list[dict[str, Any]], metric: str) -> pd.DataFrame:
    rows = []
    for t in trials:
        knobs = t.get("knobs") if isinstance(t.get("knobs"), dict) else {}
        rows.append({"trial": t.get("trial"), **{k: str(v) for k, v in knobs.items()}, "status": t.get("status"),
                     metric: _num(t.get("objective")), "peak GiB": _num(t.get(PEAK_MEM_RESERVED_GIB)),
                     "predicted GiB": _num(t.get("predicted_peak_gib")), "fidelity": t.get("fidelity") or "",
                     "feasible": "yes" if t.get("feasible") else f"no: {t.get('why') or ''}",
                     "early stop": "yes" if t.get("stopped_early") else "", "device s": _num(t.get("device_s"))})
    return pd.DataFrame(rows).astype(str)
