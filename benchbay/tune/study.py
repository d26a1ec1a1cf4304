"""``benchbay tune``: an Optuna study over a suite's ``tune.space``, each trial a point as ``run``
measures it (its own process, its record in the store naming its trial), then the best few
measured again (``benchbay.tune.confirm``) before a winner is named.

The study lives in the run's records: a resumed tune replays them into a fresh study (in order,
as enqueued trials told their stored results), so a tune continues across short GPU calls and
after a kill without re-running a finished trial. What Optuna's TPE sampler (with a constraints
function) does not know, the tuner adds:

- memory: a batch the trials so far say cannot fit (an OOM at a smaller batch of the same
  configuration, or the line of peak memory against the batch, ``benchbay.tune.memory``) is not
  run; the sampler is told it is infeasible and the largest batch that may fit is tried instead;
- early stop: where the objective rewards more samples/s (``Tune.stops_early``), a trial whose
  first ``EARLY_STEPS`` measured steps run below ``early_stop`` of the best samples/s so far stops
  there (its figures are of those steps);
- one compile cache for all trials of a call, so later trials compile faster;
- a configuration already measured is not measured again (the sampler is told its result), and
  the next trial is then one knob of one of the best trials changed (a hand walk's move).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import random
import statistics
import time
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.console import Console

from benchbay import store
from benchbay.analysis.cost import cost_per_million_samples
from benchbay.collect.env import fingerprint
from benchbay.interrupts import signals_interrupt
from benchbay.launch.worker import EARLY_STEPS
from benchbay.progress import describe
from benchbay.record import (
    ALLOC_RETRIES,
    DEVICE_MEM_TOTAL_GIB,
    PEAK_MEM_RESERVED_GIB,
    SAMPLES_PER_S_PER_GPU,
    Record,
    Status,
)
from benchbay.runner import SuiteRunner, Unwritable, cannot_run
from benchbay.suite.model import Point, Suite, excluded_by
from benchbay.suite.tune import IntRange, Tune
from benchbay.tune.confirm import CONFIRMS, TRIAL, ConfirmStage
from benchbay.tune.memory import MemoryModel, static_gib
from benchbay.tune.result import RESULT
from benchbay.tune.resume import STOPPED, latest_tune, same_study, stopped_trials, too_long
from benchbay.tune.trials import (
    BATCH,
    Trial,
    distributions,
    importances,
    key_metrics,
    lost_update,
    memory_errors,
    pareto,
    rest_of,
)

#: the trial statuses ``--retry-failed`` measures again: failures of the code, not results of the
#: configuration (an oom bounds the batch, a non-finite loss is the configuration's)
RETRIED = frozenset({Status.ERROR, Status.CRASH, Status.TIMEOUT})
#: knobs that change the arithmetic of the gradients beyond bf16's, which only compute fidelity
#: measures (compile's fusions stay at bf16's noise floor, and its reference often cannot run: a
#: compiled point's random draws differ from eager's, a large batch's reference does not fit)
ARITHMETIC_KNOBS = ("float8", "encoders_float8")
#: proposals in a row that run nothing (already measured, or refused) before the search says the
#: sampler has nothing new to try
MAX_IDLE = 60


@dataclass
class TuneSummary:
    run: Path
    result: dict[str, Any]
    interrupted: bool = False
    out_of_time: bool = False  # this call's --time-budget ended it (resumable)
    unwritable: str | None = None
    notes: list[str] = field(default_factory=list)


class Tuner(ConfirmStage):
    """``trials`` and ``device_seconds`` override the suite's budgets; ``time_budget_s`` is this
    call's (a GPU call's limit): no trial starts that would not end within it."""

    def __init__(self, suite: Suite, results_root: str | Path = "results", console: Console | None = None,
                 resume: str | bool = False, launcher=None, trials: int | None = None,
                 device_seconds: float | None = None, time_budget_s: float | None = None,
                 peak_flops: float | None = None, retry_failed: bool = False):
        if suite.tune is None:
            raise ValueError(f"{suite.path}: no tune: block (a sweep runs with `benchbay run`)")
        for name, value in (("--trials", trials), ("--device-seconds", device_seconds),
                            ("--time-budget", time_budget_s)):
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name}: a number > 0, got {value!r}")
        self.tune: Tune = replace(suite.tune, trials=trials or suite.tune.trials,
                                  device_seconds=device_seconds or suite.tune.device_seconds)
        if self.tune.trials is None and self.tune.device_seconds is None:
            raise ValueError(f"{suite.path}: tune: a budget (trials or device_seconds)")
        self.suite = replace(suite, compile_cache="run", points=[], grid={}, zip={}, search=None)
        self.root = Path(results_root)
        self.console = console or Console(stderr=True)
        if resume is True:  # the latest tune of this suite on this machine
            resume = latest_tune(self.root, self.suite.name, fingerprint()["machine_key"])
        self.runner = SuiteRunner(self.suite, results_root, self.console, resume=resume, launcher=launcher,
                                  peak_flops=peak_flops)
        self.run = self.runner.run
        manifest = store.read_manifest(self.run) if resume else {}
        self.stopped = stopped_trials(manifest)  # the trials earlier calls stopped before they ended (too_long)
        if resume:
            same_study(manifest, self.run, self.suite, self.tune, self.runner.env["machine_key"])
        elif retry_failed:
            raise ValueError("--retry-failed: with --resume (it measures again the failed trials of a tune)")
        self.retry_failed = retry_failed
        self.retry: list[dict[str, Any]] = []  # failed trials to measure again, first
        self.time_budget_s = time_budget_s
        # params given per card memory class: this card's, as `benchbay run` expands them
        self.base = self.suite.expand(self.runner.device, self.runner.memory_gb)[0]
        self.trials: list[Trial] = []
        self.memory = MemoryModel(capacity_gib=self.tune.constraints.max_peak_gib)
        self.refused: list[dict[str, Any]] = []  # proposals not run, and why
        self.confirm_records: list[Record] = []
        self.started = time.perf_counter()

    # ---- one trial -----------------------------------------------------------------------------
    def point(self, params: dict[str, Any], number: int) -> Point:
        knobs = {**self.base.knobs, **params}
        return Point(number, f"trial {number}", self.base.workload, self.base.params, knobs,
                     store.point_id(self.base.workload, self.base.params, knobs, self.suite.world_size),
                     excluded_by(self.suite.exclude, knobs))

    def objective_of(self, record: Record) -> float | None:
        m, metric = record.metrics, self.tune.objective.metric
        if metric == "cost_per_m_samples":
            rate = m.get(SAMPLES_PER_S_PER_GPU)
            value = cost_per_million_samples(rate, self.suite.price_per_gpu_hour) if rate else None
        else:
            value = m.get(metric)
        return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None

    def judge(self, record: Record) -> tuple[float | None, float, str]:
        """The objective, the violation (0: feasible) and why it is not feasible."""
        if record.status != Status.OK:
            return None, 1.0, f"{record.status}: {(record.reason or '').splitlines()[0][:120] if record.reason else ''}"
        value = self.objective_of(record)
        if value is None:
            return None, 1.0, f"no {self.tune.objective.metric} measured"
        c, m = self.tune.constraints, record.metrics
        violation, why = 0.0, []
        if c.faithful and (fidelity := record.extra.get("fidelity")) != "faithful":
            violation += 1.0 if fidelity == "lossy" else 0.5
            why.append(f"fidelity {fidelity or 'not measured'} (applied share "
                       f"{_fmt(m.get('update_applied_share'))})")
        if c.faithful and record.extra.get("compute_fidelity") == "lossy":  # fast gradients that are wrong
            violation += 1.0
            why.append(f"compute fidelity lossy (gradient cosine {_fmt(m.get('compute_gradient_cosine'))})")
        elif c.faithful and "compute_fidelity_skipped" in record.extra and (
                changed := [f"{k}={record.knobs[k]}" for k in ARITHMETIC_KNOBS if record.knobs.get(k, "off") != "off"]):
            # gradients of other arithmetic that nothing measured: unknown, as an uncertain update is
            violation += 0.5
            why.append(f"compute fidelity not measured with {' and '.join(changed)}")
        peak = m.get(PEAK_MEM_RESERVED_GIB)
        if c.max_peak_gib is not None and peak is not None and peak > c.max_peak_gib:
            violation += (peak - c.max_peak_gib) / c.max_peak_gib
            why.append(f"peak {peak:.1f} GiB over {c.max_peak_gib:g}")
        if c.zero_retries and m.get(ALLOC_RETRIES):
            violation += 0.5
            why.append(f"{m['alloc_retries']} allocator retries")
        return value, violation, "; ".join(why)

    def _trial(self, number: int, params: dict[str, Any], record: Record) -> Trial:
        value, violation, why = self.judge(record)
        trial = Trial(number, params, record, value, violation == 0.0 and value is not None, violation, why)
        if BATCH in params:
            total = record.metrics.get(DEVICE_MEM_TOTAL_GIB)
            if isinstance(total, (int, float)) and total > 0:  # the card's memory bounds a larger max_peak_gib
                limit = self.tune.constraints.max_peak_gib
                self.memory.capacity_gib = min(total, limit) if limit else total
            self.memory.observe(self._rest(params), params[BATCH], record.metrics.get(PEAK_MEM_RESERVED_GIB),
                                record.status == Status.OOM, static_gib(record.knobs, record.extra))
        return trial

    @staticmethod
    def _rest(params: dict[str, Any]) -> tuple:
        return rest_of(params)

    def best(self, excluding: frozenset[int] = frozenset()) -> Trial | None:
        """The best feasible trial, of those not numbered in ``excluding``."""
        feasible = [t for t in self.trials if t.feasible and t.number not in excluding]
        if not feasible:
            return None
        sign = 1 if self.tune.objective.direction == "maximize" else -1
        return max(feasible, key=lambda t: sign * t.value)

    def device_seconds(self) -> float:
        return sum(r.duration_s or 0.0 for r in [*(t.record for t in self.trials), *self.confirm_records])

    def _trial_seconds(self) -> float:
        """What the next trial is expected to take: the median trial so far."""
        took = [t.record.duration_s for t in self.trials if t.record.duration_s and t.record.status != Status.SKIPPED]
        return statistics.median(took) if took else 0.0

    # ---- the study -----------------------------------------------------------------------------
    def run_study(self) -> TuneSummary:
        with store.lock_run(self.run):
            stored = [r for r in store.typed_records(self.run)
                      if r.env.get("machine_key") == self.runner.env["machine_key"]]
            manifest = {**store.read_manifest(self.run), "suite": self.suite.name, "suite_file": self.suite.path,
                        "suite_as_run": self.suite.raw, "run_id": self.run.name, "env": self.runner.env,
                        "device": self.runner.device, "tune": self.tune.as_json(), "state": "running",
                        "pid": os.getpid()}
            manifest.setdefault("started_at", dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
            store.write_manifest(self.run, manifest)
            summary = TuneSummary(self.run, {})
            with signals_interrupt(), self.runner.launcher.scratch(self.run) as scratch:
                self.runner.scratch = scratch
                try:
                    study = self._study(stored)
                    self._search(study, summary)
                    if not summary.out_of_time:
                        self._confirm(stored, summary)
                except KeyboardInterrupt:
                    summary.interrupted = True
                    self._say(f"interrupted: trials so far are kept in {self.run}; continue with "
                              f"`benchbay tune {self.suite.path} --resume {self.run.name}`")
                    if self.runner.stopped:  # the trial in progress: where it stood
                        self._say(self.runner.stopped)
                except Unwritable as exc:
                    summary.unwritable = str(exc)
                    self._say(f"the tune stopped: cannot write {exc}; free space, then continue with --resume "
                              f"{self.run.name}")
            summary.result = self.result(summary)
            stopped = summary.interrupted or summary.out_of_time or summary.unwritable
            manifest.update(state="interrupted" if stopped else "complete", **{STOPPED: self.stopped},
                            finished_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
            try:
                store.write_json(self.run, RESULT, summary.result)
                store.write_manifest(self.run, manifest)
            except OSError as exc:
                summary.unwritable = summary.unwritable or f"{self.run}: {exc}"
        return summary

    def _study(self, stored: list[Record]):
        """A fresh study told every stored trial, in order."""
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
        trials = {}
        # a resumed study's confirmations count in the device time spent from the start
        self.confirm_records = [r for r in stored if r.extra.get(CONFIRMS) is not None]
        for r in stored:
            number = r.extra.get(TRIAL)
            if isinstance(number, int) and r.repeat == 0 and r.extra.get(CONFIRMS) is None:
                trials.setdefault(number, r)
        startup = max(3, min(10, (self.tune.trials or 40) // 4))
        # each trial's constraint is its violation (Trial.set_constraint): TPE ranks infeasible trials by it
        sampler = optuna.samplers.TPESampler(seed=self.tune.seed + len(trials), n_startup_trials=startup,
                                             multivariate=True)
        study = optuna.create_study(direction=self.tune.objective.direction, sampler=sampler)
        self.distributions = distributions(self.tune.space)
        for number in sorted(trials):
            params = {k: trials[number].knobs.get(k) for k in self.tune.space}
            trial = self._trial(number, params, trials[number])
            self.trials.append(trial)
            self._tell(study, params, trial.value, trial.violation)
        for start in self.tune.start:  # the configurations the suite says to try first, until measured
            if not any(all(t.params.get(k) == v for k, v in start.items()) for t in self.trials):
                study.enqueue_trial(start)
        if self.retry_failed:  # a fix since may let them run: their failures stay in the store
            self.retry = [t.params for t in self.trials if t.record.status in RETRIED
                          and t is self._latest(t.params)]
            for params in self.retry:
                study.enqueue_trial(params)
        if self.trials:
            self._say(f"resumed {self.run.name}: {len(self.trials)} trials already measured "
                      f"({self.device_seconds():.0f} device-s)")
        return study

    def _tell(self, study, params: dict[str, Any], value: float | None, violation: float) -> None:
        study.enqueue_trial(params, skip_if_exists=False)
        asked = study.ask(self.distributions)
        asked.set_constraint("violation", violation)
        study.tell(asked, self._for_sampler(value, violation))

    def _for_sampler(self, value: float | None, violation: float) -> float:
        """What the sampler is told of a trial without a value: the worst value seen (an infeasible
        trial is ranked by its violation first)."""
        if value is not None:
            return value
        seen = [t.value for t in self.trials if t.value is not None]
        if self.tune.objective.direction == "maximize":
            return min([0.0, *seen])
        return max(seen) * 2 if seen else 1e30

    def _budget_left(self, reserve: float = 0.0) -> str | None:
        """Why no further trial starts, or None."""
        ran = sum(1 for t in self.trials if t.record.status != Status.SKIPPED)
        if self.tune.trials is not None and ran >= self.tune.trials:
            return f"{ran} trials run (the budget)"
        spent, next_s = self.device_seconds(), self._trial_seconds()
        if self.tune.device_seconds is not None and spent + next_s + reserve > self.tune.device_seconds:
            return (f"{spent:.0f} device-s spent of {self.tune.device_seconds:.0f} (a trial takes ~{next_s:.0f} s"
                    + (f", {reserve:.0f} s kept to confirm the best" if reserve else "") + ")")
        return None

    def _out_of_time(self, need: float) -> bool:
        return self.time_budget_s is not None and time.perf_counter() - self.started + need > self.time_budget_s

    def _confirm_reserve(self) -> float:
        took = [t.record.duration_s for t in self.trials if t.feasible and t.record.duration_s]
        return self.tune.confirm.top * self.tune.confirm.repeats * (statistics.median(took) if took else 0.0)

    def _search(self, study, summary: TuneSummary) -> None:
        idle = 0
        while (why := self._budget_left(self._confirm_reserve())) is None:
            if idle >= MAX_IDLE:
                self._say(f"the sampler proposed {MAX_IDLE} configurations in a row that were measured or refused "
                          "already: the space holds nothing new for it")
                break
            if self._out_of_time(self._trial_seconds()):
                summary.out_of_time = True
                self._say(f"this call's time budget has no room for another trial (~{self._trial_seconds():.0f} s); "
                          f"continue with --resume {self.run.name}")
                return
            asked = study.ask(self.distributions)
            params = dict(asked.params)
            done = self._latest(params)
            if done is not None and params in self.retry:
                self.retry.remove(params)
                done = None
            point = self.point(params, len(self.trials))
            refusal = self._refusal(params)
            if done is not None or refusal:
                idle += 1
                value, violation = (done.value, done.violation) if done else (None, 1.0)
                asked.set_constraint("violation", violation)
                study.tell(asked, self._for_sampler(value, violation))
                if refusal:
                    self.refused.append({"knobs": params, "why": refusal})
                if not (refusal and self._enqueue_fitting(study, params)):
                    neighbour = self._neighbour()
                    if neighbour is None:
                        self._say("every configuration of the space was measured or refused")
                        break
                    study.enqueue_trial(neighbour)
                continue
            idle = 0
            self._say(f"trial {point.index} starts: {_knobs(params)}")  # a trial can take minutes
            started = time.perf_counter()
            try:
                record = self.runner.measure(point, 0, extra={TRIAL: point.index}, stop_below=self._stop_below())
            except KeyboardInterrupt:  # kept, so that a later call of too little time does not start it again
                self.stopped.append({"knobs": params, "seconds": round(time.perf_counter() - started, 1)})
                raise
            trial = self._trial(point.index, params, record)
            self.trials.append(trial)
            asked.set_constraint("violation", trial.violation)
            study.tell(asked, self._for_sampler(trial.value, trial.violation))
            self._progress(trial)
        else:
            self._say(f"search done: {why}")

    def _latest(self, params: dict[str, Any]) -> Trial | None:
        """The last trial of a configuration (a retried one was measured twice)."""
        return next((t for t in reversed(self.trials) if t.params == params), None)

    def _refusal(self, params: dict[str, Any]) -> str | None:
        """Why a configuration is not run: excluded by the suite, a combination that cannot run here, or
        a batch the memory so far says cannot fit."""
        point = self.point(params, len(self.trials))
        return (point.excluded or cannot_run(point, self.runner.device, self.suite.world_size)
                or (self.memory.refuses(self._rest(params), params[BATCH]) if BATCH in params else None)
                or (lost_update(self.trials, point.knobs) if self.tune.constraints.faithful else None)
                or too_long(self.stopped, params, self.time_budget_s))

    def _enqueue_fitting(self, study, params: dict[str, Any]) -> bool:
        """After a batch refused for memory: the largest batch of the same configuration that may fit,
        when not measured yet (True when one was enqueued)."""
        if BATCH not in params:
            return False
        space = self.tune.space[BATCH]
        batches = space.values() if isinstance(space, IntRange) else [b for b in space if isinstance(b, int)]
        fitting = self.memory.largest_fitting(self._rest(params), batches)
        candidate = {**params, BATCH: fitting}
        if fitting is None or any(t.params == candidate for t in self.trials) or self._refusal(candidate):
            return False
        study.enqueue_trial(candidate)
        return True

    def _neighbour(self) -> dict[str, Any] | None:
        """What to try when the sampler proposes what was measured or refused already (TPE over a
        discrete space does, around its best): one knob of one of the best feasible trials changed
        (a hand walk's move), or else any configuration not yet seen; None when none is left."""
        rng = random.Random(self.tune.seed * 7919 + len(self.trials) * 31 + len(self.refused))
        seen = {_key(t.params) for t in self.trials} | {_key(r["knobs"]) for r in self.refused}
        values = {k: list(v.values()) if isinstance(v, IntRange) else list(v) for k, v in self.tune.space.items()}
        sign = 1 if self.tune.objective.direction == "maximize" else -1
        ranked = sorted((t for t in self.trials if t.feasible), key=lambda t: -sign * t.value)[:3]
        for base in ranked:
            moves = [(k, v) for k, vs in values.items() for v in vs if v != base.params.get(k)]
            rng.shuffle(moves)
            for knob, value in moves:
                candidate = {**base.params, knob: value}
                if _key(candidate) not in seen and self._refusal(candidate) is None:
                    return candidate
        for _ in range(1000):
            candidate = {k: rng.choice(vs) for k, vs in values.items()}
            if _key(candidate) not in seen and self._refusal(candidate) is None:
                return candidate
        return None

    def _stop_below(self) -> float | None:
        """The early stop's threshold in samples/s per process, from the best feasible trial so far."""
        best = self.best()
        if not self.tune.stops_early() or best is None:
            return None
        rate = best.record.metrics.get(SAMPLES_PER_S_PER_GPU)
        return self.tune.early_stop * rate if rate else None

    # ---- what the tune leaves ------------------------------------------------------------------
    def result(self, summary: TuneSummary) -> dict[str, Any]:
        confirmed = self.confirmed()
        chosen, winner = self._chosen(confirmed)
        estimate = memory_errors(self.trials)
        predicted = {r["trial"]: r["predicted_gib"] for r in estimate["predictions"]}
        out: dict[str, Any] = {
            "suite": self.suite.name, "run_id": self.run.name, "device": self.runner.device,
            "gpu": self.runner.env.get("gpu"), "objective": self.tune.as_json()["objective"],
            "constraints": self.tune.as_json()["constraints"], "space": self.tune.as_json()["space"],
            "budget": {"trials": self.tune.trials, "device_seconds": self.tune.device_seconds},
            "early_stop": self.tune.early_stop, "early_steps": EARLY_STEPS,
            "device_seconds": self.device_seconds(),
            "trials": [t.as_json(predicted.get(t.number)) for t in self.trials], "refused": self.refused,
            "best": None if chosen is None else {
                "trial": chosen.number, "knobs": chosen.params,
                "objective": winner["mean"] if winner else chosen.value, "runs": winner["runs"] if winner else 1,
                # a winner of repeats: one run alone is one process's figure
                "confirmed": winner is not None and winner["runs"] > 1, "metrics": key_metrics(chosen.record),
                "ties": [r["trial"] for r in confirmed if r.get("tie")]},
            "confirmed": confirmed, "pareto": pareto(self.trials, self.tune.objective.direction),
            "memory_estimate": estimate, "importances": importances(self.trials, self.tune),
            "state": "interrupted" if summary.interrupted or summary.unwritable else
                     "unfinished" if summary.out_of_time else "complete"}
        if chosen is None and self.trials:
            sign = 1 if self.tune.objective.direction == "maximize" else -1
            closest = sorted(self.trials, key=lambda t: (t.violation, t.value is None, -sign * (t.value or 0.0)))[:3]
            failed = {r["trial"]: f"its confirmation: {r['why']}" for r in confirmed if not r["feasible_in_all"]}
            out["no_feasible"] = {"constraints": out["constraints"],
                                  "closest": [{"trial": t.number, "knobs": t.params, "objective": t.value,
                                               "why": t.why or failed.get(t.number, "")} for t in closest]}
        return out

    def _chosen(self, confirmed: list[dict[str, Any]]) -> tuple[Trial | None, dict[str, Any] | None]:
        """The trial to name best and its confirmation row: the confirmations' winner, else the best
        feasible trial no confirmation found infeasible (a trial an oom ended once is not the best)."""
        winner = next((r for r in confirmed if r.get("winner")), None)
        if winner is not None:
            return next(t for t in self.trials if t.number == winner["trial"]), winner
        return self.best(frozenset(r["trial"] for r in confirmed if not r["feasible_in_all"])), None

    def _progress(self, trial: Trial) -> None:
        budget = self.tune.trials
        ran = sum(1 for t in self.trials if t.record.status != Status.SKIPPED)
        best = self.best()
        spent = self.device_seconds()
        left = self.tune.device_seconds - spent if self.tune.device_seconds else None
        eta = min((budget - ran) * self._trial_seconds() if budget else math.inf, math.inf if left is None else left)
        verdict = "feasible" if trial.feasible else f"infeasible ({trial.why})"
        # the count of trials run, then the trial's own number (describe): trial 15 is the 16th
        self._say(f"{ran}/{budget or '?'} trials: {_knobs(trial.params)}: {describe(trial.record)} [{verdict}] | "
                  f"best {_fmt(best.value) if best else '-'}{f' (trial {best.number})' if best else ''} | "
                  f"device {spent:.0f} s" + (f", {left:.0f} s left" if left is not None else "")
                  + (f" | ETA {eta / 60:.0f} min" if math.isfinite(eta) else ""))

    def _say(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)


def _key(params: dict[str, Any]) -> str:
    return json.dumps(params, sort_keys=True, default=str)


def _knobs(params: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items())


def _fmt(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, (int, float)) else "-"
