"""Run a suite: every point through the suite's launcher (on this machine, each in its own process,
or as a Slurm job), one record per point and repeat appended to the store as soon as it is known;
the sweep always goes on; Ctrl-C keeps what was measured.

Run order: the first process of a run can pay for a cold machine (files read back into the page
cache, memory touched for the first time, clocks waking from idle): a quickstart report credited
recompute with -40% for running second, its first point at 417 ms a step against 232-268 ms in
later runs. Which of these it pays depends on the machine and on how long it sat idle (on a shared
2-core VM kept warm by other work, the first process after 90 s idle read pages from disk in its
first step only), so the runner takes it out whatever it is: on this machine each call starts
with a warm-up process of the first point it measures, its steps cut to a few and its figures
recorded nowhere but the manifest (``warm_up``); and repeats run interleaved, every other one in
reverse (A B C, C B A, ...), so that no point always runs first or always after the same one."""

from __future__ import annotations

import datetime as dt
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.console import Console

from benchbay import store
from benchbay.analysis.batch_search import feasible, largest_feasible, search_edges
from benchbay.analysis.mfu import peak_flops_for
from benchbay.collect.env import fingerprint
from benchbay.interrupts import raise_if_swallowed, signals_interrupt
from benchbay.knobs import rules
from benchbay.launch.base import Launch, Launcher, Outcome, PointSpec
from benchbay.launch.local import LocalLauncher
from benchbay.launch.process import PointInterrupted, has_stacks
from benchbay.progress import SweepProgress, describe, describe_warm_up, warn_once
from benchbay.record import (
    BUILD_S,
    COMMAND_RANKS,
    DELIVERED_RATE,
    FIRST_STEP_S,
    FLOPS_PER_SAMPLE,
    MFU,
    PEAK_FLOPS,
    SAMPLES_PER_S,
    SAMPLES_PER_S_PER_GPU,
    SAMPLES_PER_STEP,
    SEARCH_GROUP,
    SEARCH_KNOB,
    STEP_TIME_MEAN_S,
    STEP_TIME_S,
    SUBMITTED_FROM,
    Record,
    Status,
)
from benchbay.store import point_id
from benchbay.suite.model import Point, Steps, Suite, card_choice, excluded_by
from benchbay.workloads import registry
from benchbay.workloads.base import TrainingWorkload


@dataclass
class RunSummary:
    run: Path
    counts: dict[str, int]  # statuses of the records this call measured
    interrupted: bool = False
    out_of_time: bool = False  # stopped before a point the time budget had no room for (resumable)
    failed: list[str] = field(default_factory=list)  # every failed point of the run, described
    busy: int = 0  # records this call measured while the machine was not quiet
    unwritable: str | None = None  # why the store could not be written (a full disk): the sweep stopped there


def derived_metrics(metrics: dict[str, Any], extra: dict[str, Any], world_size: int,
                    peak_flops: float | None) -> dict[str, Any]:
    """Throughput and MFU over the measured window: samples per step over the mean step, not the
    median. The median is a step that did not wait: DataLoader workers deliver their batches
    together, so most steps find one ready and the next waits for all (H200, DreamZero-5B mbs 24,
    4 PyAV workers: median 2.83 s, mean 6.43 s). A loader's step is the wait for its next batch,
    which a queue its workers filled ahead answers at once (8 workers on an H200 host: a median
    wait of 1.4 ms, "691 samples/s", against 54 delivered per second), so its throughput is what it
    delivered over its window, or none where it gave no rate."""
    step = metrics.get(STEP_TIME_MEAN_S) or metrics.get(STEP_TIME_S)
    samples = metrics.get(SAMPLES_PER_STEP)
    out: dict[str, Any] = {SAMPLES_PER_S: None, SAMPLES_PER_S_PER_GPU: None, MFU: None,
                           PEAK_FLOPS: peak_flops}
    if DELIVERED_RATE in extra:
        rate = extra[DELIVERED_RATE]
        out.update(samples_per_s=rate, samples_per_s_per_gpu=rate / world_size if rate else None)
    elif step and samples:
        out[SAMPLES_PER_S_PER_GPU] = samples / step
        # a command's ranks are its own (torchrun in its argv): its point's process is one
        out[SAMPLES_PER_S] = samples * (metrics.get(COMMAND_RANKS) or world_size) / step
        flops = metrics.get(FLOPS_PER_SAMPLE)
        if flops and peak_flops:
            out[MFU] = flops * out[SAMPLES_PER_S_PER_GPU] / peak_flops
    return out


#: the measured steps of the warm-up process (its warm-up steps are the suite's): enough to reach the
#: step's steady code paths, which a cold page cache or allocator makes slow the first time
WARM_UP_MEASURED = 2
#: what the manifest keeps of the warm-up process: what the run's first process paid
WARM_UP_FIGURES = (BUILD_S, FIRST_STEP_S, STEP_TIME_MEAN_S)


class SuiteRunner:
    """``launcher``: where points run (default: this machine); ``peak_flops``: the MFU denominator
    (FLOP/s) for every point instead of the device's from the table in ``benchbay.analysis.mfu``;
    ``time_budget_s``: start no point once the time left is shorter than what it took before on this
    machine (its longest record in any run of the suite), or than the longest point so far where it
    has none (a job's time limit then ends the sweep between points, not inside one it would lose);
    ``warm_up``: run the warm-up process (the module docstring) where points run on this machine (a
    Slurm job may land on another node, which a warm-up here does not warm)."""

    def __init__(self, suite: Suite, results_root: str | Path = "results", console: Console | None = None,
                 resume: str | bool = False, launcher: Launcher | None = None, labels: list[str] | None = None,
                 peak_flops: float | None = None, time_budget_s: float | None = None, retry_failed: bool = False,
                 warm_up: bool = True):
        self.suite = suite
        self.retry_failed = retry_failed  # resumed: measure again the points whose records failed
        self.time_budget_s = time_budget_s
        self.labels = list(labels or [])
        if self.labels:
            points = suite.expand()
            unknown = [label for label in self.labels if not any(matches(p, label) for p in points)]
            if unknown:
                known = sorted({p.label for p in points if p.label})
                raise ValueError(f"no point labelled {', '.join(map(repr, unknown))}; labels: {known}")
        self.root = Path(results_root)
        self.console = console or Console(stderr=True)
        self.env = fingerprint()
        self.launcher = launcher or LocalLauncher(Launch.of(suite.devices))
        self.launch = self.launcher.launch
        self.warm_up = warm_up and isinstance(self.launcher, LocalLauncher)
        self.device = self.launcher.device(suite.devices.type)
        # the card picks params given per card memory class; a launcher that cannot read it from here
        # (Slurm's login node) has no memory_gb, and such params take their smallest class
        read_memory = getattr(self.launcher, "memory_gb", None)
        self.memory_gb = read_memory(self.device) if read_memory else None
        self.peak_flops = peak_flops
        self.run = self._pick_run(resume)
        self.stored: dict[tuple[str, int], Record] = {}  # read once the run is locked
        self.scratch: Path | None = None  # the launcher's folder for the points' files, while run_all runs
        self.stopped: str | None = None  # where the point that a Ctrl-C or SIGTERM stopped stood

    def _pick_run(self, resume: str | bool) -> Path:
        if resume:
            run = (store.run_dir(self.root, self.suite.name, resume) if isinstance(resume, str)
                   else store.latest_run(self.root, self.suite.name, self.env["machine_key"]))
            if isinstance(resume, str) and not run.exists():
                raise FileNotFoundError(f"--resume {resume}: no run {resume!r} of suite {self.suite.name!r} "
                                        f"under {self.root / self.suite.name}")
            if run is None or not run.exists():
                raise FileNotFoundError(f"nothing to resume for suite {self.suite.name!r} on "
                                        f"{self.env['machine_key']} under {self.root}")
            return run
        return store.run_dir(self.root, self.suite.name, store.new_run_id())

    # ---- one point ------------------------------------------------------------------------------
    def spec(self, point: Point, repeat: int = 0, stop_below: float | None = None) -> PointSpec:
        shared = self.suite.compile_cache == "run" and self.scratch is not None
        return PointSpec(workload=point.workload, params=point.params, knobs=point.knobs, steps=self.suite.steps,
                         device=self.device, timeout=self.suite.timeout,
                         profile_dir=str(store.profile_dir(self.run, point.point_id, repeat)),
                         compile_cache_dir=str(self.scratch / "inductor") if shared else None, stop_below=stop_below)

    def measure(self, point: Point, repeat: int, extra: dict[str, Any] | None = None,
                stop_below: float | None = None) -> Record:
        """Run (or skip) one point, append its record, return it; ``stop_below``: a tune's early stop."""
        raise_if_swallowed()  # a sweep's point, a batch search's probe, a tune's trial or confirmation
        started = dt.datetime.now(dt.timezone.utc)
        t0 = time.perf_counter()
        skipped = point.excluded or cannot_run(point, self.device, self.launch.world_size)
        if skipped:
            outcome = Outcome(status=Status.SKIPPED, reason=skipped)
        else:
            spec = self.spec(point, repeat, stop_below)
            try:
                outcome = self.launcher.run(spec, self.scratch / f"{point.point_id}-{repeat}")
            except PointInterrupted as stop:
                self.stopped = self._keep_stopped(point, f"{point.point_id}-{repeat}", stop, time.perf_counter() - t0)
                raise
            except OSError as exc:  # its spec or log not written (a full disk): resumable, as a record is
                raise Unwritable(f"{self.scratch}: {exc}") from exc
        env = outcome.env or self.env  # a Slurm job's node, not the submitting host
        if outcome.env:  # the resume and the time budget look for the host that submitted it
            extra = {**(extra or {}), SUBMITTED_FROM: self.env["machine_key"]}
        gpu = env.get("gpu")
        peak = peak_flops_for(gpu, self.peak_flops, env.get("gemm_tflops")) if gpu else None
        metrics = {**outcome.metrics, **derived_metrics(outcome.metrics, outcome.extra, self.launch.world_size, peak)}
        traceback = {"traceback": outcome.traceback} if outcome.traceback else {}
        record = Record(
            suite=self.suite.name, run_id=self.run.name, point_id=point.point_id, label=point.label, repeat=repeat,
            workload=point.workload, params=point.params, knobs=point.knobs, device=self.device,
            status=outcome.status, reason=outcome.reason, metrics=metrics, series=outcome.series,
            extra={**outcome.extra, **(extra or {}), **traceback}, world_size=self.launch.world_size,
            nnodes=self.launch.nnodes, launcher=self.launch.launcher, ranks=outcome.ranks, env=env,
            health=outcome.health, started_at=started.isoformat(timespec="seconds"),
            duration_s=time.perf_counter() - t0)
        if self.launch.node_rank == 0:  # every node of a multi-node point runs this; one records it
            try:
                store.append_record(self.run, record)
            except OSError as exc:  # the record is absent, not cut: the point runs again on resume
                raise Unwritable(f"{self.run / store.RECORDS}: {exc}") from exc
        return record

    def _keep_stopped(self, point: Point, name: str, stop: PointInterrupted, seconds: float) -> str:
        """The line that says where a stopped point stood; the end of its log kept in the run folder
        as ``name`` (its scratch folder goes): a point that never ends within a call's time limit says why."""
        path = store.stopped_log(self.run, name)
        try:
            store.write_atomic(path, stop.log.encode(), root=self.run)
            stacks = "its stacks in it" if has_stacks(stop.log) else "no stacks in it (none came when asked)"
            kept = f"; the end of its log, {stacks}: {path}"
        except (OSError, ValueError):  # a full disk, a planted link: the line still says where it stood
            kept = ""
        where = f", {stop.where}" if stop.where else ""
        return f"{point.label or point.point_id} was stopped after {seconds:.0f} s{where}{kept}"

    def warm_up_process(self, point: Point) -> Outcome:
        """One process of ``point`` (not profiled, its steps cut to ``WARM_UP_MEASURED``) whose
        figures are discarded: it pays what the first process of a run pays for a cold machine. Its
        compile cache is its own: the run's (``compile_cache: run``) is the points' to fill, and the
        first point's compile time a figure."""
        steps = Steps(warmup=self.suite.steps.warmup, measure=min(self.suite.steps.measure, WARM_UP_MEASURED))
        spec = replace(self.spec(point), steps=steps, profile=False, stop_below=None, compile_cache_dir=None)
        t0 = time.perf_counter()
        try:
            return self.launcher.run(spec, self.scratch / "warm-up")
        except PointInterrupted as stop:
            self.stopped = "the warm-up process of " + self._keep_stopped(
                point, f"{point.point_id}-warm-up", stop, time.perf_counter() - t0)
            raise

    # ---- the sweep ------------------------------------------------------------------------------
    def tasks(self, labels: list[str] | None | bool = True) -> list[tuple[Point, int]]:
        """Every (point, repeat) in run order: repeat by repeat, each other repeat in reverse (A B C,
        C B A, A B C...), so that no point always runs first or always after the same one; of the
        call's labels (``labels``: others; None: the whole suite)."""
        labels = self.labels if labels is True else labels
        points = [p for p in self.suite.expand(self.device, self.memory_gb)
                  if not labels or any(matches(p, label) for label in labels)]
        if self.suite.search:  # one configuration per distinct point without the searched knob
            seen: dict[str, Point] = {}
            for p in points:
                seen.setdefault(_config_id(self.suite, p), p)
            points = list(seen.values())
        return [(p, r) for r in range(self.suite.repeats) for p in (points[::-1] if r % 2 else points)]

    def _this_machines(self, run: Path) -> list[Record]:
        """A run's records measured on this machine (a Slurm job's: submitted from it): another
        host's say nothing of this one's."""
        return [r for r in store.typed_records(run)
                if r.extra.get(SUBMITTED_FROM, r.env.get("machine_key")) == self.env["machine_key"]]

    def _durations_before(self) -> dict[str, float]:
        """Each point's longest record on this machine in the suite's runs (by today's identity); a
        batch search's configuration: the longest sum of its probes in one run and repeat."""
        took: dict[str, float] = {}
        for run in sorted((self.root / self.suite.name).glob("*/")):
            searched: dict[tuple[str, int], float] = {}
            for r in self._this_machines(run):
                if r.duration_s and r.search_group:
                    searched[(r.search_group, r.repeat)] = searched.get((r.search_group, r.repeat), 0.0) + r.duration_s
                elif r.duration_s:
                    pid = store.today_point_id(r)
                    took[pid] = max(took.get(pid, 0.0), r.duration_s)
            for (group, _), seconds in searched.items():
                took[group] = max(took.get(group, 0.0), seconds)
        return took

    def run_all(self) -> RunSummary:
        # one process writes a run: two --resume of one run each measured every point
        with store.lock_run(self.run):
            # what this machine measured in the run, by today's identity of each point; a point
            # measured twice is known by its first record, the one its memory snapshots name
            for r in self._this_machines(self.run):
                store.keep(self.stored, (store.today_point_id(r), r.repeat), r)
            if self.retry_failed:
                self.stored = {k: r for k, r in self.stored.items() if not r.failed}
            return self._sweep()

    def _sweep(self) -> RunSummary:
        tasks = self.tasks()
        manifest = {"suite": self.suite.name, "suite_file": self.suite.path, "suite_as_run": self.suite.raw,
                    "run_id": self.run.name, "env": self.env, "device": self.device,
                    "started_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                    "points": len(tasks), "state": "running", "pid": os.getpid()}
        previous = store.read_manifest(self.run)
        asked = previous.get("labels")
        # --point calls: the run's points and state are those of the labels its calls asked (all of
        # the suite once one call asked for it: a resume of one point does not finish the others)
        scope = None if not self.labels or (previous.get("state") and not asked) else \
            sorted({*(asked if isinstance(asked, list) else []), *self.labels}, key=str)
        if scope:
            manifest["labels"] = scope
        # a resumed run keeps its first start
        manifest["started_at"] = previous.get("started_at", manifest["started_at"])
        store.write_manifest(self.run, manifest)
        if self.device == "cuda" and (classes := self.suite.card_classes()):
            self.console.print(card_choice(self.memory_gb, classes), markup=False, highlight=False)
        summary = RunSummary(self.run, {})
        warned: set[str] = set()
        started, longest = time.perf_counter(), 0.0
        took_before = self._durations_before() if self.time_budget_s is not None else {}
        not_started: list[str] = []
        warm_pending = self.warm_up  # until this call's first point that runs here

        def report(record: Record) -> None:  # as each record lands: a long search shows its probes
            summary.counts[record.status] = summary.counts.get(record.status, 0) + 1
            summary.busy += warn_once(record, warned, progress)
            progress.result(describe(record))

        ended = False
        try:
            with signals_interrupt(), self.launcher.scratch(self.run) as scratch, \
                    SweepProgress(self.console, self.suite.name, len(tasks)) as progress:
                self.scratch = scratch
                try:
                    for i, (point, repeat) in enumerate(tasks, 1):
                        if (point.point_id, repeat) in self.stored and not self.suite.search:
                            progress.advance(measured=False)
                            continue
                        left = None if self.time_budget_s is None else \
                            self.time_budget_s - (time.perf_counter() - started)
                        runs_here = not (point.excluded or cannot_run(point, self.device, self.launch.world_size))
                        warms = warm_pending and runs_here
                        # the warm-up process runs the same point, fewer steps: at most as long again; a
                        # search's configuration, all its probes; a skipped point, nothing
                        key = _config_id(self.suite, point) if self.suite.search else point.point_id
                        need = took_before.get(key, longest) * (2 if warms else 1) if runs_here else 0.0
                        if left is not None and left < need:
                            # a shorter point further on may still fit: left for a resume, not lost
                            summary.out_of_time = True
                            not_started.append(f"{point.label or point.point_id} ({need:.0f} s)")
                            progress.advance(measured=False)
                            continue
                        progress.start(i, point.label or f"point {point.index}")
                        if warms:
                            warm_pending = False
                            outcome = self.warm_up_process(point)
                            manifest["warm_up"] = {"point_id": point.point_id, "label": point.label,
                                                   "status": outcome.status, "reason": outcome.reason,
                                                   **{k: outcome.metrics.get(k) for k in WARM_UP_FIGURES}}
                            progress.result(describe_warm_up(point.label or point.point_id, outcome))
                        if self.suite.search:
                            records = self._search(point, repeat, report)
                        else:
                            records = [self.measure(point, repeat)]
                            report(records[0])
                        longest = max(longest, sum(r.duration_s for r in records) if self.suite.search
                                      else records[0].duration_s)
                        progress.advance()
                    if not_started:
                        progress.note(f"time budget: not started, each needing more than the time left (what it "
                                      f"took before, or the longest point so far): {', '.join(not_started)}; "
                                      f"continue with --resume {self.run.name}")
                except KeyboardInterrupt:
                    summary.interrupted = True
                    progress.note(f"interrupted: records so far are kept in {self.run}; "
                                  f"continue with --resume {self.run.name}")
                    if self.stopped:
                        progress.note(self.stopped)
                except Unwritable as exc:
                    summary.unwritable = str(exc)
                    progress.note(f"the sweep stopped: cannot write {exc}; records so far are kept in {self.run}; "
                                  f"free space, then continue with --resume {self.run.name}")
            ended = True
        except KeyboardInterrupt:  # a second Ctrl-C, or SIGTERM, as the scratch folder or the progress closed
            summary.interrupted = ended = True
        finally:  # however the sweep ended (an error of the launcher's too), the manifest says so
            self._finish(manifest, summary, ended, scope)
        # by today's identity, as the resume keys them: a retried record from before a knob was added
        # is the same point as its retry, which stands for it
        latest = {(store.today_point_id(r), r.repeat): r for r in store.typed_records(self.run)}
        summary.failed = [describe(r) for r in latest.values() if r.failed]
        return summary

    def _finish(self, manifest: dict[str, Any], summary: RunSummary, ended: bool, scope: list[str] | None) -> None:
        """The manifest's last state: complete once every point of the calls' labels is in the store."""
        stopped = not ended or summary.interrupted or summary.out_of_time or summary.unwritable
        if not stopped and scope != self.labels and not self.suite.search:
            stored = {(store.today_point_id(r), r.repeat) for r in self._this_machines(self.run)}
            stopped = any((p.point_id, r) not in stored for p, r in self.tasks(scope))
        manifest.update(state="interrupted" if stopped else "complete",
                        finished_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
        try:
            store.write_manifest(self.run, manifest)
        except OSError as exc:  # a full disk: the manifest stays as it was (written whole or not at all)
            summary.unwritable = f"{self.run / store.MANIFEST}: {exc}"
            self.console.print(f"cannot write {summary.unwritable}; free space, then continue with --resume "
                               f"{self.run.name}", markup=False, highlight=False)

    def _search(self, config: Point, repeat: int, report: Callable[[Record], None]) -> list[Record]:
        """Largest feasible value of the searched knob for this configuration (each probe a
        process of its own and a record of its own); on CUDA, then the allocator's history of its
        edges (``_snapshot_edges``)."""
        search = self.suite.search
        group = _config_id(self.suite, config)
        records: list[Record] = []

        def probe(value: int) -> bool:
            knobs = {**config.knobs, search.knob: value}
            point = replace(config, knobs=knobs, excluded=excluded_by(self.suite.exclude, knobs),
                            point_id=point_id(config.workload, config.params, knobs, self.suite.world_size))
            if (point.point_id, repeat) in self.stored:  # resumed: reuse the stored probe
                record = self.stored[(point.point_id, repeat)]
            else:
                record = self.measure(point, repeat, extra={SEARCH_GROUP: group, SEARCH_KNOB: search.knob})
                report(record)
            records.append(record)
            if point.excluded:  # an excluded value counts as one that does not fit
                return False
            if record.status == Status.SKIPPED:  # not runnable here at any value: stop probing
                raise _NotRunnable
            return feasible(record, search.headroom_gib, search.zero_retries)

        try:
            largest_feasible(lambda k: probe(k * search.step), search.min // search.step, search.max // search.step)
        except _NotRunnable:
            return records
        if self.device == "cuda":  # the allocator's history is CUDA's
            self._snapshot_edges(config, records)
        return records

    def _snapshot_edges(self, config: Point, records: list[Record]) -> None:
        """Re-run the largest feasible and the smallest OOM probe of one configuration with the
        allocator's history recorded, each in a process of its own and leaving no record (recording
        slows every allocation): the snapshots go to ``<run>/memory/<point_id>-<repeat>/``, an entry
        per snapshot run to ``<run>/memory/snapshots.jsonl``. Not when the suite's search says
        ``memory_snapshots: false``."""
        search = self.suite.search
        if not search.memory_snapshots:
            return
        log = store.memory_dir(self.run) / "snapshots.jsonl"
        # a resumed run: an edge snapshotted (or tried) before is not run again (each costs a whole point)
        done = {(e.get("point_id"), e.get("repeat")) for e in store.log_entries(log)}
        for role, record in search_edges(records, search.knob, search.headroom_gib, search.zero_retries):
            if (record.point_id, record.repeat) in done:
                continue
            point = replace(config, knobs=record.knobs, point_id=record.point_id, label=record.label)
            name = f"{record.point_id}-{record.repeat}"
            out = store.refuse_links(store.memory_dir(self.run) / name, self.root)
            # the probe's own steps: an OOM can come late (H200, Wall-X mbs 20: at the third step)
            spec = replace(self.spec(point), memory_snapshot=True, memory_snapshot_dir=str(out))
            outcome = self.launcher.run(spec, self.scratch / f"snapshot-{name}")
            entry = {"point_id": record.point_id, "repeat": record.repeat, "label": record.label,
                     SEARCH_GROUP: record.search_group, "knob": search.knob,
                     "value": record.knobs[search.knob], "role": role, "status": outcome.status,
                     "reason": outcome.reason, "snapshots": sorted(str(p) for p in out.glob("snapshot*.pickle"))}
            try:
                store.append_log(log, self.root, entry)
            except OSError as exc:  # a full disk: the snapshot runs again on resume
                raise Unwritable(f"{log}: {exc}") from exc


def cannot_run(point: Point, device: str, world_size: int) -> str | None:
    """A combination of generic knobs that cannot run here, known without the point's process: it is
    skipped before a process (or a torchrun group) starts for it."""
    cls = registry.declaration(point.workload)
    return rules.skip_reason(cls, point.knobs, device, world_size) if issubclass(cls, TrainingWorkload) else None


def matches(point: Point, label: str) -> bool:
    """A suite's point label, also when a grid appended its values ("base mbs=2" matches "base")."""
    return point.label is not None and (point.label == label or point.label.startswith(label + " "))


class Unwritable(Exception):
    """A record could not be appended to the store (a full disk, a read-only mount)."""


class _NotRunnable(Exception):
    """A search probe was skipped: the configuration cannot run on this machine."""


def _config_id(suite: Suite, point: Point) -> str:
    knobs = {k: v for k, v in point.knobs.items() if k != suite.search.knob}
    return point_id(point.workload, point.params, knobs, suite.world_size)
