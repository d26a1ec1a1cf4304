"""The tune's last stage: the best few feasible trials measured again (``tune.confirm``), then each
over all its processes, with its interval and whether it ties with the winner.

Both are over processes, a handful of values: the mean's is a t-interval and the tie is
:func:`benchbay.analysis.stats.ratio_test` (a t-test of the log values), not a bootstrap, whose
interval over 3 values is their range and called identical configurations apart one time in five."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

from benchbay.analysis.stats import mean_interval, ratio_test
from benchbay.progress import describe
from benchbay.record import Record
from benchbay.tune.trials import Trial

if TYPE_CHECKING:
    from benchbay.tune.study import TuneSummary

#: the key of a record's ``extra`` naming the trial it measured, and the trial a confirmation repeats
TRIAL, CONFIRMS = "tune_trial", "tune_confirms"


class ConfirmStage:
    """The confirmation of :class:`benchbay.tune.study.Tuner`, which mixes it in: on the tuner's
    trials, budgets, runner and ``confirm_records`` (the confirmations so far)."""

    def candidates(self) -> list[Trial]:
        """The best distinct feasible trials that ran every step, best first."""
        sign = 1 if self.tune.objective.direction == "maximize" else -1
        whole = sorted((t for t in self.trials if t.feasible and not t.stopped_early), key=lambda t: -sign * t.value)
        return whole[: self.tune.confirm.top]

    def _confirm(self, stored: list[Record], summary: TuneSummary) -> None:
        have = {(r.point_id, r.repeat) for r in [*stored, *self.confirm_records]}
        for trial in self.candidates():
            for repeat in range(1, self.tune.confirm.repeats + 1):
                if (trial.record.point_id, repeat) in have:
                    continue
                need = trial.record.duration_s or 0.0
                over = self.tune.device_seconds is not None and self.device_seconds() + need > self.tune.device_seconds
                if over:
                    self._say(f"the device budget has no room to confirm trial {trial.number} again: it stays "
                              "unconfirmed")
                    return
                if self._out_of_time(need):
                    summary.out_of_time = True
                    self._say(f"this call's time budget has no room to confirm trial {trial.number}; continue with "
                              f"--resume {self.run.name}")
                    return
                point = self.point(trial.params, trial.number)
                record = self.runner.measure(point, repeat, extra={TRIAL: trial.number, CONFIRMS: trial.number})
                self.confirm_records.append(record)
                self._say(f"confirm trial {trial.number} ({repeat}/{self.tune.confirm.repeats}): {describe(record)}")

    def confirmed(self) -> list[dict[str, Any]]:
        """Each candidate over all its processes (the trial and its repeats): every value, their mean
        and its t-interval, whether every run met the constraints, and whether it is tied with the
        winner (the interval of its ratio of means, :func:`ratio_test` over the processes, holds 1)."""
        rows = []
        for trial in self.candidates():
            runs = [trial.record, *(r for r in self.confirm_records if r.extra.get(CONFIRMS) == trial.number)]
            judged = [self.judge(r) for r in runs]
            values = [v for v, violation, _ in judged if v is not None]
            low, high = mean_interval(values) if len(values) > 1 else (None, None)
            rows.append({"trial": trial.number, "knobs": trial.params, "runs": len(runs), "values": values,
                         "mean": statistics.fmean(values) if values else None, "low": low, "high": high,
                         "feasible_in_all": all(v is not None and violation == 0 for v, violation, _ in judged),
                         "why": "; ".join(w for _, _, w in judged if w) or None})
        good = [r for r in rows if r["feasible_in_all"] and r["mean"] is not None]
        if not good:
            return rows
        sign = 1 if self.tune.objective.direction == "maximize" else -1
        winner = max(good, key=lambda r: sign * r["mean"])
        for row in rows:
            row["winner"] = row is winner
            if row is not winner and row in good and len(row["values"]) > 1 and len(winner["values"]) > 1 \
                    and min(*row["values"], *winner["values"]) > 0:  # a ratio of logs: positive values only
                test = ratio_test(winner["values"], row["values"], ratio=row["mean"] / winner["mean"])
                row["ratio"], row["ratio_low"], row["ratio_high"] = test.ratio, test.low, test.high
                row["tie"] = not test.excludes_one
        return rows
