"""What a sweep says on the console while it runs: progress (a live bar on a terminal, plain lines
on a pipe), one line per result, and each machine warning once."""

from __future__ import annotations

import datetime as dt
import time

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Column

from benchbay.analysis.quality import noise_note
from benchbay.launch.base import Outcome
from benchbay.record import (
    DELIVERED_RATE,
    FIRST_STEP_S,
    HOST_RSS_GIB,
    PEAK_MEM_ALLOCATED_GIB,
    SAMPLES_PER_S_PER_GPU,
    STEP_TIME_CV,
    STEP_TIME_MEAN_S,
    STEP_TIME_S,
    Record,
    Status,
)

BUSY_TAG = "[busy machine]"


def describe(record: Record) -> str:
    """One line: status, point, its key figures, and whether to doubt them."""
    m = record.metrics
    name = record.name
    knob = f" mbs={record.knobs['mbs']}" if "mbs" in record.knobs and "mbs=" not in name else ""
    busy = f" {BUSY_TAG}" if record.health.get("warnings") else ""
    if record.status == Status.OK:
        figures = _decode(record) if "view_latency_ms_median" in record.extra else _training(record)
        budget, drained = record.extra.get("measure_budget_spent"), record.extra.get("drain_steps")
        why = "stopped early: slower than the best" if record.extra.get("stopped_early") else "measure budget"
        parts = [*figures, f"{m.get('measured_steps')} steps ({why})" if budget else "",
                 f"loader behind the step: warmed up {drained} more step{'s' * (drained != 1)} until it ran dry"
                 if drained else ""]
        return f"ok {name}{knob}: " + ", ".join(p for p in parts if p) + busy
    # the reason's last line is the error; its traceback stays in the record
    traced = record.extra.get("traceback")
    where = f" (traceback: extra.traceback of its record in run {record.run_id})" if traced else ""
    return f"{record.status} {name}{knob}: {record.reason or ''}"[:300] + where + busy


def describe_warm_up(name: str, outcome: Outcome) -> str:
    """The warm-up process's line (benchbay.runner): what the run's first process paid, kept out of
    the figures."""
    m = outcome.metrics
    if outcome.status != Status.OK:
        return f"warm-up process of {name} (not recorded): {outcome.status}: {outcome.reason or ''}"[:300]
    first, step = m.get(FIRST_STEP_S), m.get(STEP_TIME_MEAN_S)
    figures = ", ".join(filter(None, [f"first step {first:.3g} s" if first else "",
                                      f"then {step * 1e3:.1f} ms/step" if step else ""]))
    return f"warm-up process of {name} (not recorded): {figures or 'ok'}"


def _training(record: Record) -> list[str]:
    """The step as the tables give it (the mean over the steady window, the rate is over), its
    rate, memory and noise."""
    m = record.metrics
    per = "GPU" if (record.device or "cuda") == "cuda" else "device"
    step = m.get(STEP_TIME_MEAN_S) or m.get(STEP_TIME_S)  # records before the mean was kept
    rate, mem = m.get(SAMPLES_PER_S_PER_GPU), m.get(PEAK_MEM_ALLOCATED_GIB)
    rss = m.get(HOST_RSS_GIB) if mem is None else None
    return [f"{step * 1e3:.1f} ms/step" if step else "", f"{rate:.2f} samples/s/{per}" if rate else "",
            f"{mem:.1f} GiB" if mem else "", f"{rss:.1f} GiB host RSS" if rss else "",
            noise_note(m.get(STEP_TIME_CV)) or ""]


def _decode(record: Record) -> list[str]:
    """A decoder's figures, as the report's Decoders section gives them: a decoder's "step" is the
    wait for its next sample, which a worker queue filled ahead answers at once."""
    extra = record.extra
    cpu, rate = extra.get("cpu_s_per_sample"), extra.get(DELIVERED_RATE)
    return [f"{extra['view_latency_ms_median']:.1f} ms/view (median)",
            f"{cpu * 1e3:.0f} ms CPU/sample" if cpu else "", f"{rate:.1f} samples/s delivered" if rate else ""]


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


def warn_once(record: Record, warned: set[str], progress: SweepProgress) -> bool:
    """Say each machine setting worth a word once, and the first point measured on a busy machine
    (the others carry a tag); True when this record's machine was not quiet."""
    for warning in record.health.get("machine_warnings") or []:
        if warning not in warned:
            warned.add(warning)
            progress.note(f"warning: {warning}")
    if not record.health.get("warnings"):
        return False
    if BUSY_TAG not in warned:
        warned.add(BUSY_TAG)
        progress.note(f"warning: the machine was not quiet while {record.name} ran: "
                      f"{'; '.join(record.health['warnings'])}. Its figures may hold that noise; such points are "
                      f"tagged {BUSY_TAG} here and noted in the report")
    return True
