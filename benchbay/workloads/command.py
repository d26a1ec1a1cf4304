"""The ``command`` workload: a user's own training script, run as it is, each point a process of its
own. Its flags and environment switches take the point's knobs through ``{name}`` placeholders; its
own knobs are declared with their values (the first the default) and sweep like any knob. Its steps
are timed from inside by the probe (``benchbay/workloads/probe/sitecustomize.py``, first on the
command's PYTHONPATH): each optimizer step's end, on the device's clock. Where the probe sees no
optimizer step, ``step_regex`` (a line per step) or ``throughput_regex`` (samples/s) over the
output stand in. Once the warm-up and measured steps are in, the command is stopped (SIGINT, then
SIGTERM, then SIGKILL to its process group). ``dataset`` gives it a LeRobot dataset benchbay writes
(a ``benchbay.decode.clips`` preset, its fields changed as given), named by ``{dataset}``; ``{scratch}``
is a folder of the point's own, removed when it ends. Read without torch: it is also its own declaration."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from benchbay.knobs import Choice
from benchbay.parent_death import die_with_parent
from benchbay.record import (
    COMMAND_RANKS,
    DATA_WAITS_S,
    FIGURES,
    LOSSES,
    PEAK_HOST_RSS_GIB,
    PEAK_MEM_ALLOCATED_GIB,
    PEAK_MEM_RESERVED_GIB,
    PROBE_HOST_S,
    SKIPPED_STEPS,
)
from benchbay.workloads.base import Workload

PROBE_DIR = Path(__file__).resolve().parent / "probe"
#: a placeholder is a plain name: ``str.format``'s attribute and index access would run on a suite's text;
#: ``{{`` and ``}}`` are literal braces (a shell's ``${VAR}``, a JSON argument)
PLACEHOLDER = re.compile(r"\{\{|\}\}|\{([A-Za-z_][A-Za-z0-9_]*)\}")
#: a line of a command's output that says it ran out of memory: an error's, not any line with the words
OOM_LINE = re.compile(r"^.*(OutOfMemoryError|CUDA out of memory|CUBLAS_STATUS_ALLOC_FAILED|"
                      r"(RuntimeError|Error): .*out of memory).*$", re.MULTILINE)
#: how much of the output's end is searched for that line (a shutdown may print a lot after it)
OOM_SEARCH_CHARS = 65536
#: seconds between a stop's signals: SIGINT (a script's own clean exit), SIGTERM, then SIGKILL
STOP_GRACE_S = (10.0, 5.0)
POLL_S = 0.005
LOSS_GRACE_S = 5.0
#: placeholders beside the knobs: the point's device type, the Python running benchbay, the point's
#: own scratch folder, and the dataset of ``params.dataset``
SPECIAL = ("device", "python", "scratch", "dataset")
TAIL_CHARS = 2000
#: the point's own folder (set by the launcher): a command's scratch goes inside, so that it goes with the
#: point's folder even where the worker was killed (a timeout, Ctrl-C) before it could remove it
POINT_DIR_ENV = "BENCHBAY_POINT_DIR"


class CommandFailed(RuntimeError):
    """The command ended before its steps were in; the message holds the tail of its output."""


class Command(Workload):
    name = "command"
    params: ClassVar[dict[str, Any]] = {
        "argv": None,  # the command: a list of strings, placeholders allowed
        "env": {},  # environment switches: name -> string, placeholders allowed
        "knobs": {},  # the command's own knobs: name -> values, the first the default
        "loss_regex": None,  # a regular expression whose first group is a step's loss
        "series_regex": {},  # name -> a regular expression of a per-step figure the script prints (its own
        # clocks), recorded as a series; data_waits_s (its data wait, s) feeds the data-wait figures
        "step_regex": None,  # a line per step, where the probe sees no optimizer step
        "throughput_regex": None,  # samples/s, where neither sees steps
        "samples_per_step": None,  # samples one rank's step trains ("{mbs}" by default)
        "cwd": None,  # where it runs (relative to the working directory)
        "dataset": None,  # {preset: a clips preset, field: value...}: written once (cached), named by {dataset}
    }
    mapping_params: ClassVar[tuple[str, ...]] = ("env", "knobs", "dataset", "series_regex")
    own_clock: ClassVar[bool] = True
    # off: what the probe costs a step is what the same step runs without it, timed by its output
    knobs = {"probe": Choice(("on", "off"), "on: the probe times the steps from inside; off: it is not loaded, "
                                            "and step_regex or throughput_regex over the output times them")}

    @classmethod
    def with_params(cls, params: dict[str, Any]) -> type[Command]:
        """The declaration of one suite's command: its declared knobs as choices, beside ``probe``."""
        declared = params.get("knobs") if isinstance(params.get("knobs"), dict) else {}
        knobs = {k: Choice(tuple(v), "the command's own knob") for k, v in declared.items()
                 if isinstance(v, list) and v}
        return type(cls.__name__, (cls,), {"knobs": {**cls.knobs, **knobs}}) if knobs else cls

    def __init__(self, params, knobs, device):
        super().__init__(params, knobs, device)
        self.knob_values = {**{k: v[0] for k, v in (self.params["knobs"] or {}).items()}, **self.knob_values}
        self.proc: subprocess.Popen | None = None
        self.scratch: tempfile.TemporaryDirectory | None = None
        self._log_lines: _Lines | None = None  # the output's
        self._probe_lines: _Lines | None = None  # rank 0's probe's
        self._probe_steps: list[dict[str, Any]] = []  # its lines of one process (the first to write a step)
        self._step_lines = 0  # the output's lines step_regex matched, of those it searched (_log_lines.consumed)
        self.dataset_root: Path | None = None
        self.started = 0.0
        self.stop_s: float | None = None  # how long its stop took (``stop``), once stopped
        self.out: Path | None = None
        self.log: Path | None = None
        #: profiled through the probe (``benchbay profile``): its folder, the steps before, the steps profiled
        self.profile: tuple[Path, int, int] | None = None

    # ---- what the command is -------------------------------------------------------------------
    def values(self) -> dict[str, str]:
        """What a placeholder may name: every knob of the point, the device, benchbay's own Python and,
        once started, the point's scratch folder and its dataset."""
        started = {"scratch": self.scratch.name} if self.scratch is not None else {}
        if self.dataset_root is not None:
            started["dataset"] = str(self.dataset_root)
        return {**{k: str(v) for k, v in self.knob_values.items()}, "device": self.device.type,
                "python": sys.executable, **started}

    def skip_reason(self) -> str | None:
        if self.knob_values["probe"] == "off" and not (self.params["step_regex"] or self.params["throughput_regex"]):
            return "probe=off times the steps by the output: the suite gives no step_regex or throughput_regex"
        return None

    def fill(self, text: str) -> str:
        values = self.values()
        return PLACEHOLDER.sub(lambda m: values[m.group(1)] if m.group(1) else m.group(0)[0], text)

    def samples_per_step(self) -> int:
        """A rank's: the ranks are the command's own (the probe counts them for the samples/s of all)."""
        given = self.params["samples_per_step"]
        return self.mbs if given is None else int(self.fill(str(given)))

    # ---- running it (benchbay.launch.harness.CommandHarness) ------------------------------------
    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """For as long as the point runs: stopped, and its scratch folder removed, when it ends."""
        try:
            yield
        finally:
            self.stop()
            if self.scratch is not None:
                self.scratch.cleanup()  # ignoring what a stopped command's group left half-removed

    def start(self) -> None:
        """Start the command in a process group of its own, the probe first on its PYTHONPATH (once:
        benchbay.launch.entry may have started it before the worker imported torch)."""
        if self.proc is not None:
            return
        if self.params["dataset"] is not None:
            from benchbay.decode.clips import cached_dataset

            self.dataset_root = cached_dataset(dataset_spec(self.params["dataset"]))
        self.scratch = tempfile.TemporaryDirectory(prefix="benchbay-command-",  # removed once it is stopped
                                                   dir=os.environ.get(POINT_DIR_ENV), ignore_cleanup_errors=True)
        self.out, self.log = Path(self.scratch.name) / "probe", Path(self.scratch.name) / "command.log"
        self._log_lines, self._probe_lines = _Lines(self.log), _Lines(Path(f"{self.out}.0"))
        env = {**os.environ, **{k: self.fill(str(v)) for k, v in (self.params["env"] or {}).items()}}
        if self.knob_values["probe"] == "on" or self.profile is not None:  # a profile is the probe's
            env.update(BENCHBAY_PROBE_OUT=str(self.out),
                       PYTHONPATH=os.pathsep.join(filter(None, [str(PROBE_DIR), env.get("PYTHONPATH")])))
        if self.profile is not None:
            folder, after, steps = self.profile
            env.update(BENCHBAY_PROBE_PROFILE=str(folder), BENCHBAY_PROBE_PROFILE_AFTER=str(after),
                       BENCHBAY_PROBE_PROFILE_STEPS=str(steps))
        argv = [self.fill(a) for a in self.params["argv"]]
        cwd = self.params["cwd"]
        self.started = time.time()
        with open(self.log, "wb") as log:
            try:
                # it dies with the point's process, killed or not (that dies with the runner)
                self.proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                             stdin=subprocess.DEVNULL, start_new_session=True,
                                             preexec_fn=die_with_parent)
            except OSError as exc:  # not found, not executable: the point's error says which
                raise CommandFailed(f"cannot start {argv[0]!r}: {exc.strerror or exc}") from None

    def running_now(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def wait_for(self, steps: int) -> None:
        """Until the command has made ``steps`` steps; raises (``_ended``) if it ends before."""
        while len(self.steps_seen()) < steps:
            if self.proc.poll() is not None:
                if len(self.steps_seen()) >= steps:  # written as it exited
                    return
                raise self._ended(steps)
            time.sleep(POLL_S)

    def _ended(self, steps: int) -> BaseException:
        """Why the command ended before ``steps`` steps: out of memory (a failure whose output says
        so), or an error with its output."""
        output = self.output()
        tail = output[-TAIL_CHARS:]
        rc = self.proc.returncode
        said = list(OOM_LINE.finditer(output, max(0, len(output) - OOM_SEARCH_CHARS)))
        if rc != 0 and said:  # a script that exits 0 did not fail, whatever its log says
            import torch

            return torch.OutOfMemoryError(f"the command ran out of memory: {said[-1].group(0).strip()[:300]}")
        seen = len(self.steps_seen())
        how = f"exit code {rc}" if rc >= 0 else f"signal {_signal_name(-rc)}"
        if rc == 0:
            return CommandFailed(f"the command ended ({how}) after {seen} steps, before the {steps} the suite's "
                                 f"warm-up and measured steps need{self._no_steps_hint(seen)}\n{tail}")
        return CommandFailed(f"the command failed ({how}) after {seen} steps: {_last_line(tail)}\n{tail}")

    def _no_steps_hint(self, seen: int) -> str:
        if seen or self.params["step_regex"] or self.params["throughput_regex"]:
            return ""
        return ("; the probe saw no optimizer step (torch.optim) and no step_regex or throughput_regex is given "
                "to find steps in its output")

    def steps_seen(self) -> list[dict[str, Any]]:
        """The steps so far: the probe's lines of rank 0, or else the output's lines matching step_regex
        (each poll reads and searches only what was added since the last)."""
        probed = self._probed()
        if probed or not self.params["step_regex"] or self._log_lines is None:
            return probed
        lines, rx = self._log_lines.read(), re.compile(self.params["step_regex"])
        self._step_lines += sum(1 for line in lines[self._log_lines.consumed:] if rx.search(line))
        self._log_lines.consumed = len(lines)
        return [{"step": i} for i in range(self._step_lines)]

    def _probed(self) -> list[dict[str, Any]]:
        """The probe's steps of rank 0, from one process: the first to write a step (a script that
        starts several without a rank, torch.multiprocessing.spawn's, has each write as rank 0)."""
        if self._probe_lines is None:
            return []
        lines = self._probe_lines.read()
        for line in lines[self._probe_lines.consumed:]:
            if line.endswith("}"):
                step = json.loads(line)
                if not self._probe_steps or step.get("pid") == self._probe_steps[0].get("pid"):
                    self._probe_steps.append(step)
        self._probe_lines.consumed = len(lines)
        return self._probe_steps

    def output(self) -> str:
        return "\n".join(self._log_lines.read()) if self._log_lines is not None else ""

    def stop(self) -> None:
        """SIGINT, then SIGTERM, then SIGKILL to the command's process group, each after a grace;
        then SIGKILL to what is left of the group once its leader is gone (a helper it started)."""
        if self.proc is None:
            return
        began = time.perf_counter()
        for sig, grace in ((signal.SIGINT, STOP_GRACE_S[0]), (signal.SIGTERM, STOP_GRACE_S[1]), (signal.SIGKILL, 5.0)):
            if self.proc.poll() is not None:
                break
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=grace)
        deadline = time.monotonic() + STOP_GRACE_S[1]
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
            while time.monotonic() < deadline:  # gone, so that its scratch folder can go
                os.killpg(self.proc.pid, 0)
                time.sleep(POLL_S)
        self.stop_s = time.perf_counter() - began

    # ---- its figures ---------------------------------------------------------------------------
    def own_figures(self, steps: int) -> dict[str, Any]:
        """The first ``steps`` step times (the first from the command's start to its first step's
        end), losses and peak memory, as the probe or the output says them."""
        seen = self.steps_seen()[:steps]
        times = [s["dt"] for s in seen[1:] if isinstance(s.get("dt"), (int, float))]
        first = seen[0].get("t", self.started) - self.started if seen else None
        figures: dict[str, Any] = {"times": [first, *times] if first is not None and len(times) == len(seen) - 1
                                   else []}
        metrics: dict[str, float] = {}
        if seen and "peak_allocated" in seen[-1]:
            metrics[PEAK_MEM_ALLOCATED_GIB] = seen[-1]["peak_allocated"] / 2**30
            metrics[PEAK_MEM_RESERVED_GIB] = seen[-1]["peak_reserved"] / 2**30
        if seen and "peak_rss" in seen[-1]:  # the command's (rank 0's) process, not the worker's
            metrics[PEAK_HOST_RSS_GIB] = seen[-1]["peak_rss"] / 2**30
        if seen and isinstance(seen[-1].get("world"), int) and seen[-1]["world"] > 1:  # torchrun in its argv
            metrics[COMMAND_RANKS] = seen[-1]["world"]
        if seen and "skipped" in seen[-1]:
            metrics[SKIPPED_STEPS] = sum(bool(s.get("skipped")) for s in seen)
        if len(seen) > 1 and "probe_s" in seen[-1]:  # the probe's hook: host seconds a step, a bound on its cost
            metrics[PROBE_HOST_S] = (seen[-1]["probe_s"] - seen[0]["probe_s"]) / (len(seen) - 1)
        if self.params["loss_regex"]:
            figures[LOSSES] = self._per_step(self.params["loss_regex"], steps)
        if self.params["series_regex"]:
            figures["series"] = {name: self._per_step(rx, steps) for name, rx in self.params["series_regex"].items()}
        if self.params["throughput_regex"]:
            rates = _numbers(self.params["throughput_regex"], self.output())
            if rates:
                metrics["command_samples_per_s"] = rates[-1]
        if metrics:
            figures["metrics"] = metrics
        return figures

    def _per_step(self, regex: str, steps: int) -> list[float]:
        """The first ``steps`` values ``regex`` finds in the output (a loss, a clock): a script prints a
        step's figures after its optimizer step, so the last may come a moment after the probe saw the
        step, or a step later where it reads each loss a step late, as the harness does (so the last
        two are waited for, briefly); one that prints them less often (every 10 steps) is not waited for."""
        deadline = time.monotonic() + LOSS_GRACE_S
        while True:
            values = _numbers(regex, self.output())[:steps]
            if len(values) >= steps or len(values) < steps - 2 or self.proc.poll() is not None \
                    or time.monotonic() > deadline:
                return values
            time.sleep(POLL_S * 10)  # the whole output searched again: not as often as the steps are polled

    def extra_metrics(self) -> dict[str, Any]:
        return {"command": [self.fill(a) for a in self.params["argv"]],
                "probe": "optimizer-step hook" if self._probed() else "output"}


def dataset_spec(given: dict[str, Any]):
    """The ``ClipSpec`` of ``params.dataset``: its preset with the other keys' values."""
    from benchbay.decode.clips import PRESETS

    fields = dict(given)
    return PRESETS[fields.pop("preset")].replace(**fields)


class _Lines:
    """A growing file's whole lines so far, read from where the last read ended; a line ends at a
    newline or a carriage return (a progress bar's, which would otherwise be read again at each poll
    until its line ends). ``consumed``: how many of them a reader has taken."""

    def __init__(self, path: Path):
        self.path, self.offset, self.lines, self.consumed = path, 0, [], 0

    def read(self) -> list[str]:
        if self.path.exists():
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                added = f.read()
            end = max(added.rfind(b"\n"), added.rfind(b"\r")) + 1
            self.lines.extend(added[:end].decode(errors="replace").splitlines())
            self.offset += end
        return self.lines


def _numbers(regex: str, text: str) -> list[float]:
    """The numbers that ``regex``'s first group finds in ``text``; a match that is no number (a
    script's own format, "0.5,") is passed over rather than fail the point after its steps."""
    out = []
    for m in re.finditer(regex, text):
        with contextlib.suppress(TypeError, ValueError):
            out.append(float(m.group(1)))
    return out


def _signal_name(number: int) -> str:
    """SIGKILL for 9; a real-time signal (no name in ``signal.Signals``) by its number."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else "(no output)"


def _findable(program: str, cwd: Any) -> bool:
    folder = Path(cwd) if isinstance(cwd, str) else Path()
    return shutil.which(program) is not None or (os.sep in program and (folder / program).is_file())


def check(params: dict[str, Any], error, programs: bool = True) -> None:
    """A command's params: ``error(key, expected)`` for each problem (the suite's Validator); with
    ``programs``, its program must be found here (a suite to run, not only read)."""
    argv = params.get("argv")
    if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)):
        error("workload.params.argv", f"a non-empty list of strings, got {argv!r}")
        argv = []
    elif programs and "{" not in argv[0] and not _findable(argv[0], params.get("cwd")):
        error("workload.params.argv[0]", f"a command on PATH or a file, got {argv[0]!r}: not found")
    env = params.get("env", {})
    if not (isinstance(env, dict) and all(isinstance(k, str) and isinstance(v, (str, int, float)) and
                                          not isinstance(v, bool) for k, v in env.items())):
        error("workload.params.env", "a mapping of variable names to strings")
        env = {}
    knobs = params.get("knobs", {})
    from benchbay.knobs import GENERIC

    if not isinstance(knobs, dict):
        error("workload.params.knobs", "a mapping of knob names to lists of values (the first the default)")
        knobs = {}
    reserved = {*GENERIC, *SPECIAL, *Command.knobs}  # names a suite's own knob or series may not take
    for name, values in knobs.items():
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(name)) or name in reserved:
            error(f"workload.params.knobs.{name}", "a name of letters, digits and _ that is not a generic knob "
                                                   "nor the probe's")
        elif not (isinstance(values, list) and values and all(isinstance(v, (str, int, float, bool)) for v in values)):
            error(f"workload.params.knobs.{name}", f"a non-empty list of values, got {values!r}")
    # what a point fills: a command's generic knobs (mbs, seed), its own, the probe's and the special names
    known = {*Command.generic_knobs, *SPECIAL, *Command.knobs, *knobs} - (
        {"dataset"} if params.get("dataset") is None else set())
    for where, text in [*((f"argv[{i}]", a) for i, a in enumerate(argv)),
                        *((f"env.{k}", str(v)) for k, v in env.items()),
                        *([("samples_per_step", str(params["samples_per_step"]))]
                          if params.get("samples_per_step") is not None else [])]:
        for name in re.findall(r"\{([^{}]*)\}", re.sub(r"\{\{|\}\}", "", text)):
            if name not in known:
                error(f"workload.params.{where}", f"placeholders naming a knob ({sorted(known)}), got {{{name}}} "
                                                  "({{ and }} for a literal brace)")
    series = params.get("series_regex", {})
    taken = {*reserved, *knobs, *FIGURES} - {DATA_WAITS_S}  # a column of its own in the tables
    if not (isinstance(series, dict) and all(isinstance(k, str) and re.fullmatch(r"[a-z_][a-z0-9_]*", k)
                                             and k not in taken for k in series)):
        error("workload.params.series_regex", "a mapping of series names (lower-case letters, digits, _; not a "
                                              "knob's nor a recorded figure's) to regular expressions")
        series = {}
    for key, rx in [*((k, params.get(k)) for k in ("loss_regex", "step_regex", "throughput_regex")),
                    *((f"series_regex.{name}", rx) for name, rx in series.items())]:
        if rx is None:
            continue
        try:
            groups = re.compile(rx).groups
        except (re.error, TypeError) as exc:
            error(f"workload.params.{key}", f"a regular expression ({exc})")
            continue
        if key != "step_regex" and groups < 1:
            error(f"workload.params.{key}", "a regular expression with a group around the number")
    cwd = params.get("cwd")
    if cwd is not None and not (isinstance(cwd, str) and Path(cwd).is_dir()):
        error("workload.params.cwd", f"an existing folder, got {cwd!r}")
    _check_dataset(params.get("dataset"), error)


def _check_dataset(given: Any, error) -> None:
    """``params.dataset``: a mapping with a clips preset and fields of ``ClipSpec`` that make a valid one."""
    if given is None:
        return
    import dataclasses

    from benchbay.decode.clips import PRESETS, ClipSpec

    if not isinstance(given, dict) or given.get("preset") not in PRESETS:
        error("workload.params.dataset", f"a mapping with preset: one of {sorted(PRESETS)} (and fields of the "
                                         f"clip spec to change), got {given!r}")
        return
    fields = {f.name for f in dataclasses.fields(ClipSpec)}
    for key in given.keys() - {"preset"} - fields:
        error(f"workload.params.dataset.{key}", f"a field of the clip spec ({sorted(fields)})")
    try:
        dataset_spec({k: v for k, v in given.items() if k == "preset" or k in fields})
    except (TypeError, ValueError) as exc:
        error("workload.params.dataset", f"a valid clip spec ({exc})")

