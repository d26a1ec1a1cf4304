"""What a command point cost, process by process: the point's process from launch to exit against
the command's own time, its start-up with its first step (from its start to that step's end) and its
later steps up to the last one the suite measured. The rest is the harness's: starting the point's
process (its torch import runs beside the command's start-up: benchbay.launch.entry), stopping the
command (SIGINT, then waiting for it to exit), the collectors. A command point should cost little
more than the script's start-up plus its steps."""

from __future__ import annotations

import pandas as pd

from benchbay.analysis.frame import is_missing
from benchbay.document import Block, Heading, Table, Text
from benchbay.record import COMMAND_STOP_S, PROBE_HOST_S, STEP_TIME_S, STEP_TIMES_S


def cost_table(records: pd.DataFrame) -> pd.DataFrame:
    """One row per ok command process (seconds): ``process``, the command's (its start-up and first
    step, then its later steps), ``harness``, the process less the command, and ``stop``, the part of
    it that stopping the command took (records before it was measured have none)."""
    rows = []
    for _, r in records.iterrows():
        times, duration = r.get(STEP_TIMES_S), r.get("duration_s")
        if r.get("workload") != "command" or r.get("status") != "ok" or is_missing(duration) \
                or not isinstance(times, list) or not times:
            continue
        command = float(sum(times))
        rows.append({"run_id": r.get("run_id"), "point_id": r["point_id"], "repeat": r["repeat"],
                     "process": float(duration),
                     "start_up_and_first_step": float(times[0]), "later_steps": command - float(times[0]),
                     "steps": len(times), "harness": float(duration) - command,
                     "stop": r.get(COMMAND_STOP_S), "probe": r.get(PROBE_HOST_S), "step": r.get(STEP_TIME_S)})
    table = pd.DataFrame(rows)
    return table.assign(**{c: pd.to_numeric(table[c]) for c in ("stop", "probe", "step")}) if rows else table


def cost_blocks(points: pd.DataFrame, records: pd.DataFrame) -> list[Block]:
    """The report's section: ``points`` the point summary (its names), ``records`` its processes."""
    table = cost_table(records)
    if table.empty:
        return []
    names = dict(zip(points["point_id"], points["name"], strict=True))
    shown = pd.DataFrame({
        "point": table["point_id"].map(names), "repeat": table["repeat"].map(str),
        "process (s)": table["process"].map("{:.1f}".format),
        "command's start-up and first step (s)": table["start_up_and_first_step"].map("{:.1f}".format),
        "its later steps (s)": table["later_steps"].map("{:.1f}".format), "steps": table["steps"].map(str),
        "harness (s)": table["harness"].map("{:.1f}".format),
        "harness share": (table["harness"] / table["process"]).map("{:.0%}".format)})
    stopped = table["stop"].notna().any()  # records before the stop was timed have none
    if stopped:
        stop = table["stop"].map(_shown("{:.1f}"))
        shown.insert(shown.columns.get_loc("harness share"), "of which its stop (s)", stop)
    runs = table.groupby("run_id", sort=False, dropna=False)["harness"]
    if runs.ngroups > 1:  # a report over several runs (before and after a change): which row is which
        shown.insert(0, "run", table["run_id"].map(str))
    added = "; ".join(f"{h.min():.1f} to {h.max():.1f} s" + (f" in run {run}" if runs.ngroups > 1 else "")
                      for run, h in runs)
    text = ("A command point's process from launch to exit, against the command's own time: from its start to its "
            "first step's end (its start-up), then its steps up to the last the suite measured. The rest is the "
            "harness's: starting the point's process, stopping the command (SIGINT, then its exit; a data loader's "
            "workers exit with it) and the collectors; in records made before the command was started ahead of "
            f"the worker's imports, torch's import there too. Here the harness added, a process: {added}.")
    if stopped:
        text += (" Of that, the command's stop (from SIGINT to its process group gone: the script's own exit, "
                 f"for a script that exits on SIGINT) took {table['stop'].min():.1f} to {table['stop'].max():.1f} s.")
    if table["probe"].notna().any():  # records before the probe measured itself have none
        shown["probe's hook, host (ms a step)"] = (table["probe"] * 1e3).map(_shown("{:.3f}"))
        shown["of the step"] = (table["probe"] / table["step"]).map(_shown("{:.2%}"))
        text += (" The probe's hook says its own host time a step: what the probe adds to a step on the host, "
                 "hidden where the device is behind it.")
    return [Heading("What each process cost", 3), Text(text), Table(shown)]


def _shown(form: str):
    return lambda v: "" if is_missing(v) else form.format(v)
