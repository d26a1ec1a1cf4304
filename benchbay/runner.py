"""Run a suite: every point in its own process, one record per point and repeat appended to the
store as soon as it is known; the sweep always goes on; Ctrl-C keeps what was measured. Each
point runs under a health check of the machine (``benchbay.collect.health``), stored with its
record and warned about once in the run's output."""

from __future__ import annotations

import datetime as dt
import shutil
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Column

from benchbay import store
from benchbay.analysis.mfu import peak_flops_for
from benchbay.analysis.quality import noise_note
from benchbay.collect.env import fingerprint
from benchbay.collect.health import HealthCheck
from benchbay.launch.process import Launch, run_point
from benchbay.store import point_id
from benchbay.suite import Point, Suite, excluded_by

#: statuses that fail a run (its exit code); an oom is a result where a batch search probes for it
FAILED = ("error", "crash", "timeout", "diverged", "oom")
BUSY_TAG = "[busy machine]"


@dataclass
class RunSummary:
    run: Path
    counts: dict[str, int]  # statuses of the records this call measured
    interrupted: bool = False
    failed: list[str] = field(default_factory=list)  # every failed point of the run, described
    busy: int = 0  # records this call measured while the machine was not quiet


def is_failure(record: dict[str, Any]) -> bool:
    return record["status"] in FAILED and not (record["status"] == "oom" and "search_group" in record["extra"])


def device_type(suite: Suite) -> str:
    if suite.devices.type != "auto":
        return suite.devices.type
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def derived_metrics(metrics: dict[str, Any], world_size: int, gpu: str | None) -> dict[str, Any]:
    """Throughput and MFU from the worker's step time, samples per step and FLOPs."""
    step, samples = metrics.get("step_time_s"), metrics.get("samples_per_step")
    out: dict[str, Any] = {"samples_per_s": None, "samples_per_s_per_gpu": None, "mfu": None,
                           "peak_flops": peak_flops_for(gpu) if gpu else None}
    if step and samples:
        out["samples_per_s_per_gpu"] = samples / step
        out["samples_per_s"] = samples * world_size / step
        flops = metrics.get("flops_per_sample")
        if flops and out["peak_flops"]:
            out["mfu"] = flops * out["samples_per_s_per_gpu"] / out["peak_flops"]
    return out


class SuiteRunner:
    def __init__(self, suite: Suite, results_root: str | Path = "results", console: Console | None = None,
                 resume: str | bool = False, launch: Launch | None = None, executor: str = "local",
                 executor_params: dict[str, Any] | None = None, labels: list[str] | None = None):
        self.suite = suite
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
        self.executor, self.executor_params = executor, dict(executor_params or {})
        # on a Slurm login node "auto" must not be resolved from the host's own devices
        self.device = device_type(suite) if executor == "local" else (
            "cpu" if suite.devices.type == "cpu" else "cuda")
        d = suite.devices
        self.launch = launch or Launch(d.nproc, d.nnodes, d.node_rank, d.rdzv_endpoint, d.torchrun)
        self.run = self._pick_run(resume)
        self.done = {(r["point_id"], r.get("repeat", 0)) for r in store.read_records(self.run)
                     if r.get("env", {}).get("machine_key") == self.env["machine_key"]}
        # Slurm nodes must see the points' folders: keep them beside the run
        self.scratch = self.run / "scratch" if executor == "slurm" else Path(tempfile.mkdtemp(prefix="benchbay-"))

    def _pick_run(self, resume: str | bool) -> Path:
        if resume:
            run = (store.run_dir(self.root, self.suite.name, resume) if isinstance(resume, str)
                   else store.latest_run(self.root, self.suite.name, self.env["machine_key"]))
            if run is None or not run.exists():
                raise FileNotFoundError(f"nothing to resume for suite {self.suite.name!r} on "
                                        f"{self.env['machine_key']} under {self.root}")
            return run
        return store.run_dir(self.root, self.suite.name, store.new_run_id())

    # ---- one point ------------------------------------------------------------------------------
    def spec(self, point: Point, repeat: int = 0) -> dict[str, Any]:
        steps = self.suite.steps
        return {"workload": point.workload, "params": point.params, "knobs": point.knobs,
                "steps": {"warmup": steps.warmup, "measure": steps.measure, "steady": steps.steady},
                "device": self.device, "timeout": self.suite.timeout,
                "profile": False,  # profiled runs are `benchbay profile`'s, kept apart
                "profile_dir": str(self.run / "profiles" / f"{point.point_id}-{repeat}")}

    def measure(self, point: Point, repeat: int, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        """Run (or skip) one point, append its record, return it."""
        started = dt.datetime.now(dt.timezone.utc)
        t0 = time.perf_counter()
        health: dict[str, Any] = {}
        if point.excluded:
            outcome = {"status": "skipped", "reason": point.excluded, "metrics": {}, "series": {}, "extra": {}}
        elif self.executor == "local":
            with HealthCheck(gpus=self.launch.nproc if self.device == "cuda" else 0) as check:
                outcome = self._run(self.spec(point, repeat), self.scratch / f"{point.point_id}-{repeat}")
            health = check.result()
        else:  # a Slurm job runs on another node: this machine's health says nothing of it
            outcome = self._run(self.spec(point, repeat), self.scratch / f"{point.point_id}-{repeat}")
        world = self.launch.world_size
        env = outcome.get("env") or self.env  # a Slurm job's node, not the submitting host
        metrics = dict(outcome.get("metrics") or {})
        metrics.update(derived_metrics(metrics, world, env.get("gpu")))
        record = {
            "schema": 1, "suite": self.suite.name, "run_id": self.run.name, "point_id": point.point_id,
            "label": point.label, "repeat": repeat, "workload": point.workload, "params": point.params,
            "knobs": point.knobs, "device": self.device, "status": outcome["status"], "reason": outcome.get("reason"),
            "metrics": metrics, "series": outcome.get("series") or {},
            "extra": {**(outcome.get("extra") or {}), **(extra or {})},
            "world_size": world, "nnodes": self.launch.nnodes, "launcher": self.launch.launcher,
            "ranks": outcome.get("ranks", []), "env": env, "health": health,
            "started_at": started.isoformat(timespec="seconds"), "duration_s": time.perf_counter() - t0,
        }
        if outcome.get("traceback"):
            record["extra"]["traceback"] = outcome["traceback"]
        if self.launch.node_rank == 0:  # every node of a multi-node point runs this; one records it
            store.append_record(self.run, record)
        self.done.add((point.point_id, repeat))
        return record

    def _run(self, spec: dict[str, Any], workdir: Path) -> dict[str, Any]:
        if self.executor == "slurm":
            from benchbay.launch.slurm import run_point_submitit

            return run_point_submitit(spec, workdir, self.suite.timeout, self.launch, self.executor_params)
        return run_point(spec, workdir, self.suite.timeout, self.launch)

    # ---- the sweep ------------------------------------------------------------------------------
    def tasks(self) -> list[tuple[Point, int]]:
        points = [p for p in self.suite.expand(self.device)
                  if not self.labels or any(matches(p, label) for label in self.labels)]
        if self.suite.search:  # one configuration per distinct point without the searched knob
            seen: dict[str, Point] = {}
            for p in points:
                seen.setdefault(_config_id(self.suite, p), p)
            points = list(seen.values())
        return [(p, r) for p in points for r in range(self.suite.repeats)]

    def run_all(self) -> RunSummary:
        tasks = self.tasks()
        manifest = {"suite": self.suite.name, "suite_file": self.suite.path, "suite_as_run": self.suite.raw,
                    "run_id": self.run.name, "env": self.env, "device": self.device,
                    "started_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                    "points": len(tasks), "state": "running"}
        # a resumed run keeps its first start
        manifest["started_at"] = store.read_manifest(self.run).get("started_at", manifest["started_at"])
        store.write_manifest(self.run, manifest)
        summary = RunSummary(self.run, {})
        warned: set[str] = set()
        with SweepProgress(self.console, self.suite.name, len(tasks)) as progress:
            try:
                for i, (point, repeat) in enumerate(tasks, 1):
                    if (point.point_id, repeat) in self.done and not self.suite.search:
                        progress.advance(measured=False)
                        continue
                    progress.start(i, point.label or f"point {point.index}")
                    records = self._search(point, repeat) if self.suite.search else [self.measure(point, repeat)]
                    for record in records:
                        summary.counts[record["status"]] = summary.counts.get(record["status"], 0) + 1
                        summary.busy += _warn_once(record, warned, progress)
                        progress.result(describe(record))
                    progress.advance()
            except KeyboardInterrupt:
                summary.interrupted = True
                progress.note(f"interrupted: records so far are kept in {self.run}; "
                              f"continue with --resume {self.run.name}")
        if self.executor == "local":  # spec, result and log per point: the record holds what matters
            shutil.rmtree(self.scratch, ignore_errors=True)
        manifest.update(state="interrupted" if summary.interrupted else "complete",
                        finished_at=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
        store.write_manifest(self.run, manifest)
        latest = {(r["point_id"], r.get("repeat", 0)): r for r in store.read_records(self.run)}
        summary.failed = [describe(r) for r in latest.values() if is_failure(r)]
        return summary

    def _search(self, config: Point, repeat: int) -> list[dict[str, Any]]:
        """Largest feasible value of the searched knob for this configuration (each probe a
        process of its own and a record of its own)."""
        from benchbay.analysis.batch_search import largest_feasible

        search = self.suite.search
        group = _config_id(self.suite, config)
        records: list[dict[str, Any]] = []

        def probe(value: int) -> bool:
            knobs = {**config.knobs, search.knob: value}
            point = replace(config, knobs=knobs, excluded=excluded_by(self.suite.exclude, knobs),
                            point_id=point_id(config.workload, config.params, knobs, self.suite.world_size))
            if (point.point_id, repeat) in self.done:  # resumed: reuse the stored probe
                stored = [r for r in store.read_records(self.run)
                          if r["point_id"] == point.point_id and r.get("repeat", 0) == repeat]
                record = stored[-1]
            else:
                record = self.measure(point, repeat, extra={"search_group": group, "search_knob": search.knob})
            records.append(record)
            if point.excluded:  # an excluded value counts as one that does not fit
                return False
            if record["status"] == "skipped":  # not runnable here at any value: stop probing
                raise _NotRunnable
            return feasible(record, search.headroom_gib, search.zero_retries)

        try:
            largest_feasible(lambda k: probe(k * search.step), search.min // search.step, search.max // search.step)
        except _NotRunnable:
            return records
        from benchbay.profiling import snapshot_search_edges  # lazy: profiling imports the runner

        snapshot_search_edges(self, config, records)
        return records


def matches(point: Point, label: str) -> bool:
    """A suite's point label, also when a grid appended its values ("base mbs=2" matches "base")."""
    return point.label is not None and (point.label == label or point.label.startswith(label + " "))


class _NotRunnable(Exception):
    """A search probe was skipped: the configuration cannot run on this machine."""


def feasible(record: dict[str, Any], headroom_gib: float | None, zero_retries: bool) -> bool:
    if record["status"] != "ok":
        return False
    m = record["metrics"]
    if zero_retries and (m.get("alloc_retries") or 0) > 0:
        return False
    if headroom_gib is not None and m.get("device_mem_total_gib") and m.get("peak_mem_reserved_gib") is not None:
        return m["peak_mem_reserved_gib"] <= m["device_mem_total_gib"] - headroom_gib
    return True


def _config_id(suite: Suite, point: Point) -> str:
    knobs = {k: v for k, v in point.knobs.items() if k != suite.search.knob}
    return point_id(point.workload, point.params, knobs, suite.world_size)


def describe(record: dict[str, Any]) -> str:
    """One line: status, point, its key figures, and whether to doubt them."""
    m = record["metrics"]
    name = record.get("label") or record["point_id"]
    knob = f" mbs={record['knobs']['mbs']}" if "mbs" in record["knobs"] and "mbs=" not in name else ""
    busy = f" {BUSY_TAG}" if (record.get("health") or {}).get("warnings") else ""
    if record["status"] == "ok":
        per = "GPU" if record.get("device", "cuda") == "cuda" else "device"
        rate, mem = m.get("samples_per_s_per_gpu"), m.get("peak_mem_allocated_gib")
        rss = m.get("host_rss_gib") if mem is None else None
        parts = [f"{m['step_time_s'] * 1e3:.1f} ms/step" if m.get("step_time_s") else "",
                 f"{rate:.2f} samples/s/{per}" if rate else "", f"{mem:.1f} GiB" if mem else "",
                 f"{rss:.1f} GiB host RSS" if rss else "", noise_note(m.get("step_time_cv")) or ""]
        return f"ok {name}{knob}: " + ", ".join(p for p in parts if p) + busy
    return f"{record['status']} {name}{knob}: {record.get('reason') or ''}"[:300] + busy


def _warn_once(record: dict[str, Any], warned: set[str], progress: SweepProgress) -> bool:
    """Say each machine setting worth a word once, and the first point measured on a busy machine
    (the others carry a tag); True when this record's machine was not quiet."""
    health = record.get("health") or {}
    for warning in health.get("machine_warnings") or []:
        if warning not in warned:
            warned.add(warning)
            progress.note(f"warning: {warning}")
    if not health.get("warnings"):
        return False
    if BUSY_TAG not in warned:
        warned.add(BUSY_TAG)
        progress.note(f"warning: the machine was not quiet while {record.get('label') or record['point_id']} ran: "
                      f"{'; '.join(health['warnings'])}. Its figures may hold that noise; such points are tagged "
                      f"{BUSY_TAG} here and noted in the report")
    return True


class SweepProgress:
    """The sweep's progress: a live bar on a terminal; on a pipe or a log, plain lines (point i/N,
    elapsed, estimated time left) that never wrap at a guessed width."""

    def __init__(self, console: Console, title: str, total: int):
        self.console, self.title, self.total = console, title, total
        self.live = console.is_terminal
        self.done = self.measured = 0
        self.index = 0
        self.t0 = time.perf_counter()
        self._bar = None
        self._progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("ETA"), TimeRemainingColumn(),
            TextColumn("{task.fields[last]}", table_column=Column(no_wrap=True, overflow="ellipsis")),
            console=console, transient=False) if self.live else None

    def __enter__(self) -> SweepProgress:
        if self._progress:
            self._progress.start()
            self._bar = self._progress.add_task(self.title, total=self.total, last="")
        return self

    def __exit__(self, *exc) -> None:
        if self._progress:
            self._progress.stop()

    def start(self, index: int, name: str) -> None:
        self.index = index
        if self._progress:
            self._progress.update(self._bar, description=f"{self.title} [{index}/{self.total}] {name}")

    def result(self, line: str) -> None:
        if self._progress:
            self._progress.console.print(f"  {escape(line)}")  # failure texts may hold [/...]
            self._progress.update(self._bar, last=escape(line))
            return
        elapsed = time.perf_counter() - self.t0
        left = elapsed / (self.measured + 1) * (self.total - self.done - 1)
        self.console.print(f"[{self.index}/{self.total} {_clock(elapsed)}, ETA {_clock(left)}] {line}",
                           markup=False, highlight=False, soft_wrap=True)

    def advance(self, measured: bool = True) -> None:
        self.done += 1
        self.measured += measured
        if self._progress:
            self._progress.advance(self._bar)

    def note(self, text: str) -> None:
        self.console.print(text, style="yellow", markup=False, highlight=False, soft_wrap=not self.live)


def _clock(seconds: float) -> str:
    return str(dt.timedelta(seconds=round(seconds)))
