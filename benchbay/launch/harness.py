"""The harness's side of a point: how each kind of workload is run, step by step.

A workload is a spec (what to build, a batch, the loss, the optimizer, its FLOPs; a command's argv);
the harness turns it into the step the worker times (torchtitan's split: the model is a spec, the
trainer owns the loop). One harness per kind of workload:

- ``TrainingHarness``: the knobs make the training step (``launch.training``), with its fidelity
  figures over the measured steps;
- ``CommandHarness``: a user's command is started, and each step waits for the probe to see it;
- ``StepHarness``: a step that is not a training step (decoding a sample) is timed as it is.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchbay.collect import Collector
from benchbay.record import COMMAND_STOP_S
from benchbay.workloads.base import TrainingWorkload, Workload
from benchbay.workloads.command import Command

if TYPE_CHECKING:
    import torch


@dataclass
class StepOutput:
    """What one measured step leaves: its loss (or loss-like value) and gradient norm, if any."""

    loss: torch.Tensor | None = None
    grad_norm: torch.Tensor | None = None
    data_s: float | None = None  # host time the step spent getting its batch (waiting for the loader)
    loader_s: float | None = None  # what its batch cost the loader's workers, per worker (workloads.feed)


#: a prepared step: step index -> its output
Step = Callable[[int], StepOutput]


class StepHarness:
    """Runs a ``StepWorkload``: its ``setup`` untimed, then its ``step`` timed; no training knobs."""

    def __init__(self, workload: Workload, world_size: int):
        self.workload = workload
        self.world_size = world_size

    def skip_reason(self) -> str | None:
        """Why this point cannot run here (None if it can): becomes a ``skipped`` record."""
        return self.workload.skip_reason()

    def settings(self) -> contextlib.AbstractContextManager:
        """Settings of the whole process the point runs under, from its build to its last step."""
        return contextlib.nullcontext()

    def prepare(self) -> Step:
        """Everything before the first step (build, knobs, files); returns the step to time."""
        import torch

        self.workload.setup()

        def one(index: int) -> StepOutput:
            value = self.workload.step(index)
            return StepOutput(None if value is None else torch.as_tensor(value, dtype=torch.float32))

        return one

    def before_last_warmup(self) -> None:
        """Called before the last warm-up step (where there is one)."""

    def start_measuring(self) -> None:
        """Called before the first measured step."""

    def profiler(self, out_dir: Path, after: int, steps: int) -> Collector:
        """torch.profiler over ``steps`` steps (and one of its own warm-up) after the first ``after``,
        into ``out_dir``: entered by the worker as those steps begin."""
        from benchbay.collect.profile import StepProfiler

        return StepProfiler(out_dir, active=steps)

    def figures(self, steps: int) -> dict[str, Any]:
        """Figures of the first ``steps`` steps beside the worker's own: ``times``, ``losses`` (each
        standing in for the worker's), ``metrics`` and ``extra``."""
        return self.workload.own_figures(steps)

    def settled_metrics(self) -> dict[str, float]:
        """Metrics known once ``settings`` has been left (a command's stop)."""
        return {}


class TrainingHarness(StepHarness):
    """Runs a ``TrainingWorkload``: the knobs turn its model into the training step."""

    workload: TrainingWorkload

    def skip_reason(self) -> str | None:
        from benchbay.launch import training  # the knobs apply to training workloads: imported lazily

        w = self.workload
        return training.skip_reason(w, w.knob_values, w.device, self.world_size) or w.skip_reason()

    def settings(self) -> contextlib.AbstractContextManager:
        from benchbay.launch import training

        return training.process_settings(self.workload.knob_values)

    def prepare(self) -> Step:
        from torch.profiler import record_function

        from benchbay.launch import training

        w = self.workload
        train_step = self.train_step = training.prepare(w, w.knob_values, w.device)

        def one(index: int) -> StepOutput:
            started = time.perf_counter()
            with record_function("data"):
                batch = w.batch(index)
            data_s = time.perf_counter() - started
            loss, grad_norm, _ = train_step(batch)
            return StepOutput(loss, grad_norm, data_s, w.feed.last_loader_s if w.feed else None)

        return one

    def before_last_warmup(self) -> None:
        self.train_step.fidelity.before_last_warmup()

    def start_measuring(self) -> None:
        self.train_step.fidelity.start_window()

    def figures(self, steps: int) -> dict[str, Any]:
        own, fidelity = self.workload.own_figures(steps), self.train_step.fidelity.summary()
        # what the weights, gradients and optimizer state scale with (the tune's static memory, tune.memory)
        sizes = {"trainable_params": sum(p.numel() for p in self.train_step.params),
                 "frozen_params": self.train_step.frozen_params}
        return {**own, "metrics": {**own.get("metrics", {}), **fidelity.get("metrics", {})},
                "extra": {**sizes, **own.get("extra", {}), **fidelity.get("extra", {})}}


class CommandHarness(StepHarness):
    """Runs a ``Command``: started in its own process group, stopped (and its scratch removed) when
    the point ends; a step is the probe seeing the command's next optimizer step."""

    workload: Command

    def settings(self) -> contextlib.AbstractContextManager:
        return self.workload.running()

    def profiler(self, out_dir: Path, after: int, steps: int) -> Collector:
        """The probe profiles the command's own steps, in its process (the worker's only wait)."""
        from benchbay.collect.profile import ProbeTrace

        self.workload.profile = (out_dir, after, steps)
        return ProbeTrace(out_dir, running=self.workload.running_now)

    def settled_metrics(self) -> dict[str, float]:
        stopped = self.workload.stop_s
        return {} if stopped is None else {COMMAND_STOP_S: stopped}

    def prepare(self) -> Step:
        self.workload.start()

        def one(index: int) -> StepOutput:
            self.workload.wait_for(index + 1)
            return StepOutput()

        return one


def harness_for(workload: Workload, world_size: int) -> StepHarness:
    """The harness that runs ``workload`` on ``world_size`` ranks."""
    if isinstance(workload, TrainingWorkload):
        return TrainingHarness(workload, world_size)
    if isinstance(workload, Command):
        return CommandHarness(workload, world_size)
    return StepHarness(workload, world_size)
