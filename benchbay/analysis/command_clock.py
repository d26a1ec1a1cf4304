"""A command's step times against the script's own clock. A script that prints its own step time
(``series_regex: {own_step_s: ...}``) gives each record a second clock of the same steps; the report
sets the step times benchbay recorded (the probe's, else its output's) beside it over the measured
steps, so that the figure it shows is checked against the one the script itself would show."""

from __future__ import annotations

import numpy as np
import pandas as pd

from benchbay.analysis.frame import is_missing
from benchbay.document import Block, Heading, Table, Text
from benchbay.record import MEASURED_STEPS, OWN_STEP_S, STEP_TIMES_S


def clock_table(records: pd.DataFrame) -> pd.DataFrame:
    """One row per ok command process with both clocks: ``timed_by`` (the probe's hook or the output),
    ``steps`` compared (the measured ones: the last of each series), the mean of each clock (s), their
    ``difference`` (relative) and the largest difference of one step (``largest_step_ms``)."""
    rows = []
    for _, r in records.iterrows():
        if r.get("workload") != "command" or r.get("status") != "ok" or OWN_STEP_S not in r.index:
            continue
        timed, own, n = r.get(STEP_TIMES_S), r.get(OWN_STEP_S), r.get(MEASURED_STEPS)
        if not isinstance(timed, list) or not isinstance(own, list) or is_missing(n) or not timed or not own:
            continue
        n = min(int(n), len(timed), len(own))  # the series run from the first step: the measured are the last
        timed_s, own_s = np.asarray(timed[len(timed) - n:], float), np.asarray(own[len(own) - n:], float)
        rows.append({"run_id": r.get("run_id"), "point_id": r["point_id"], "repeat": r["repeat"],
                     "timed_by": r.get("extra.probe", ""), "steps": n, "recorded": timed_s.mean(),
                     "own_clock": own_s.mean(), "difference": timed_s.mean() / own_s.mean() - 1,
                     "largest_step_ms": 1e3 * np.abs(timed_s - own_s).max()})
    return pd.DataFrame(rows)


def clock_blocks(points: pd.DataFrame, records: pd.DataFrame) -> list[Block]:
    """The report's section: ``points`` the point summary (its names), ``records`` its processes."""
    table = clock_table(records)
    if table.empty:
        return []
    names = dict(zip(points["point_id"], points["name"], strict=True))
    shown = pd.DataFrame({
        "point": table["point_id"].map(names), "repeat": table["repeat"].map(str),
        "timed by": table["timed_by"].map(str), "steps": table["steps"].map(str),
        "recorded step (s)": table["recorded"].map("{:.4f}".format),
        "script's own clock (s)": table["own_clock"].map("{:.4f}".format),
        "difference": table["difference"].map(lambda v: f"{round(v, 4) + 0.0:+.2%}"),  # never "-0.00%"
        "largest difference of a step (ms)": table["largest_step_ms"].map("{:.2f}".format)})
    text = ("The step times benchbay recorded against the script's own clock (its own_step_s, printed each step), "
            "over the measured steps of each process. The probe's hook times the optimizer step's end on the "
            "device, as a script's CUDA events do; a step timed by the output is the time between two of its "
            "lines, written after the step has ended: the same on average, not step by step.")
    return [Heading("Step times against the script's own clock", 3), Text(text), Table(shown)]
