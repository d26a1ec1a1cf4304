"""The protocol a training step implements to be measured by benchbay.

A workload builds its model for one sweep point, makes synthetic batches, and computes the loss.
The harness (``benchbay.launch.harness``) owns everything else (precision, recompute, compile, CUDA
graphs, sharding, the optimizer step, timing), so a knob is implemented once, in ``benchbay.knobs``,
for every workload: a workload is a spec.

Minimal user workload (``workload: mypkg.bench:MyStep`` in a suite)::

    class MyStep(TrainingWorkload):
        name = "mystep"
        def build(self):
            model = MyModel().to(self.device)
            return ModelParts(model=model, regions={"blocks": list(model.layers)})
        def batch(self, step):
            return torch.randn(self.mbs, 128, device=self.device)
        def loss(self, model, batch):
            return model(batch).pow(2).mean(), {}
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from benchbay.knobs import GENERIC, defaults_for
from benchbay.knobs.parts import ModelParts  # what build returns (the knobs act on it)

if TYPE_CHECKING:  # a workload's declaration (name, knobs, params, regions) is read without torch
    import torch
    from torch import nn

    from benchbay.knobs import Choice
    from benchbay.workloads.feed import VideoFeed


class Workload:
    """What every workload shares: a name, its own knobs and params, samples per step."""

    name: ClassVar[str] = "workload"
    #: knobs only this workload understands, e.g. {"attention": Choice(("flex", "sdpa"))}
    knobs: ClassVar[dict[str, Choice]] = {}
    #: parameters a suite may give under ``workload.params`` with their defaults
    params: ClassVar[dict[str, Any]] = {}
    #: the names a param may take where it names one of a fixed set (a preset): checked by validate
    param_values: ClassVar[dict[str, tuple[str, ...]]] = {}
    #: the generic knobs (benchbay.knobs.GENERIC) a point of it may set
    generic_knobs: ClassVar[tuple[str, ...]] = ("mbs", "seed")
    #: params whose value is a mapping of its own (not one value per device type)
    mapping_params: ClassVar[tuple[str, ...]] = ()
    #: its steps are timed in processes of its own (a command's probe): the worker keeps off the device
    own_clock: ClassVar[bool] = False

    @classmethod
    def with_params(cls, params: dict[str, Any]) -> type[Workload]:
        """The declaration of a workload given these params: itself, unless its params declare knobs."""
        return cls

    def __init__(self, params: dict[str, Any], knobs: dict[str, Any], device: torch.device):
        unknown = set(params) - set(self.params)
        if unknown:
            raise ValueError(f"{self.name}: unknown params {sorted(unknown)}; known: {sorted(self.params)}")
        self.params = {**type(self).params, **params}
        self.knob_values = {**defaults_for(type(self)), **knobs}  # every knob: its default where not given
        self.device = device

    @property
    def mbs(self) -> int:
        return int(self.knob("mbs"))

    def knob(self, name: str) -> Any:
        """This point's value of a knob (generic or the workload's own)."""
        return self.knob_values[name]

    def samples_per_step(self) -> int:
        return self.mbs

    def flops_per_sample(self) -> dict[str, float]:
        """Analytic FLOPs of one sample: {"train": fwd+bwd of trained parts, "frozen": frozen fwd}."""
        return {}

    def skip_reason(self) -> str | None:
        """Why this point cannot run on this machine (None if it can); becomes a ``skipped`` record."""
        return None

    def extra_metrics(self) -> dict[str, Any]:
        """Workload-specific figures to store in the record after the measured steps."""
        return {}

    def own_figures(self, steps: int) -> dict[str, Any]:
        """Figures of the first ``steps`` steps that the workload measured itself (``own_clock``):
        {"times": [...], "losses": [...], "metrics": {...}}, each standing in for the harness's."""
        return {}

    def batches_ahead(self) -> int:
        """Batches a loader's workers have been asked for ahead of the step (after ``prepare``).
        The harness warms up over that many more steps: the workers make them while the first
        steps compile, and measured, they would pass for a loader that keeps up."""
        return 0


class StepWorkload(Workload):
    """A workload whose step is not a training step (e.g. decoding one sample): the harness only
    times ``step``; it applies no training knobs."""

    def setup(self) -> None:
        """Open files, build decoders... (not timed)."""

    def step(self, index: int) -> float | None:
        """One timed step; may return a loss-like value to record."""
        raise NotImplementedError


class TrainingWorkload(Workload):
    """A training step. Subclasses implement build/batch/loss; the harness applies the knobs."""

    generic_knobs = tuple(GENERIC)
    #: region names this workload's ``build`` returns (``compile`` values are validated against them)
    regions: ClassVar[tuple[str, ...]] = ("blocks",)
    #: the ``cuda_graph`` values it supports: "step" is the harness's; "attention" only where the
    #: workload captures its own attention helpers (other values are skipped with the reason)
    graphs: ClassVar[tuple[str, ...]] = ("off", "step")
    #: with the video knobs (workloads.feed): the generated dataset ``data: video`` reads without
    #: ``params.root`` (a decode.clips.PRESETS name)
    video_preset: ClassVar[str | None] = None
    #: data=video: the feed ``build`` opened (benchbay.workloads.feed), else None
    feed: VideoFeed | None = None

    # --- to implement -------------------------------------------------------------------------
    def build(self) -> ModelParts:
        """Build the model on ``self.device`` (fp32 weights, random init)."""
        raise NotImplementedError

    def batch(self, step: int) -> Any:
        """A synthetic batch of ``self.mbs`` samples, on ``self.device``."""
        raise NotImplementedError

    def loss(self, model: nn.Module, batch: Any) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Forward pass and loss; returns (loss, named loss parts to log), or the loss alone. No
        backward here."""
        raise NotImplementedError

    # --- optional -----------------------------------------------------------------------------
    def optimizer(self, params: list[nn.Parameter]) -> torch.optim.Optimizer:
        """The optimizer over the trainable parameters (after sharding)."""
        import torch

        return torch.optim.AdamW(params, lr=1e-5)

    def batches_ahead(self) -> int:
        return self.feed.backlog if self.feed else 0

    def block_linear_rows(self) -> dict[str, int]:
        """Rows a sample that each linear of a repeated block takes in (its name inside the block,
        e.g. ``cross_attn.k_img`` -> 257), for ``float8``: FP8's weight-gradient GEMM runs over the
        rows of a batch and needs a multiple of 16, so a linear whose rows are not is kept in bf16
        (and the knob refused where none is left). Linears not named here are taken to fit."""
        return {}
