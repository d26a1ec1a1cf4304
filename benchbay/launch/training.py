"""The one place where knobs turn a workload's model into a training step.

Order (torchtitan's): precision -> float8 -> recompute per block -> compile per block -> fully_shard
per block, then the root (or DDP) -> optimizer over what remains trainable. The model as built is
captured first (on the meta device): compute fidelity's reference, which no knob touches."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torch.profiler import record_function

from benchbay.collect.compute_fidelity import ComputeFidelity, Reference
from benchbay.collect.fidelity import Fidelity, UpdateFidelity
from benchbay.knobs import adam, float8, precision, recompute, rules, sharding
from benchbay.knobs import compile as compile_knob
from benchbay.knobs import optimizer as optimizer_knob
from benchbay.knobs.offload import CPUOffloadedOptimizer

if TYPE_CHECKING:  # the workload's class, for types only
    from benchbay.workloads.base import TrainingWorkload


def skip_reason(workload: TrainingWorkload, knobs: dict[str, Any], device: torch.device,
                world_size: int) -> str | None:
    """Why this combination of generic knobs cannot run here (None if it can)."""
    return (rules.skip_reason(type(workload), knobs, device.type, world_size)
            or optimizer_knob.skip_reason(knobs, device)
            or float8.skip_reason(knobs, device, workload.block_linear_rows()))


@dataclass
class TrainStep:
    """zero_grad -> loss (under autocast) -> backward -> clip 1.0 -> optimizer step."""

    workload: TrainingWorkload
    model: nn.Module
    params: list[nn.Parameter]
    optimizer: Any
    autocast: Callable[[], contextlib.AbstractContextManager]
    graphs: bool
    fidelity: Fidelity
    frozen_params: int = 0  # the frozen modules' parameters (the trained ones are ``params``)

    def backward(self, batch: Any) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """zero_grad -> loss (under autocast) -> backward: the step up to its gradients."""
        self.optimizer.zero_grad(set_to_none=True)
        if self.graphs:  # outputs of the previous step's graphs may be overwritten from here on
            torch.compiler.cudagraph_mark_step_begin()
        with self.autocast():
            out = self.workload.loss(self.model, batch)
        loss, parts = (out, {}) if isinstance(out, torch.Tensor) else out  # a bare loss has no parts
        with record_function("backward"):
            loss.backward()
        return loss, parts

    def __call__(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
        loss, parts = self.backward(batch)
        with record_function("optimizer"):
            # an optimizer that copies gradients out during backward clips its copies too (ao_offload)
            clip = getattr(self.optimizer, "clip_grad_norm_", torch.nn.utils.clip_grad_norm_)
            grad_norm = clip(self.params, 1.0)
        with record_function("update_fidelity"):
            self.fidelity.before_step()
        with record_function("optimizer"):
            self.optimizer.step()
        # clone: outputs of CUDA-graphed code are overwritten by the next replay
        return loss.detach().clone(), grad_norm.detach().clone(), {k: v.detach().clone() for k, v in parts.items()}


@contextlib.contextmanager
def process_settings(knobs: dict[str, Any]) -> Iterator[None]:
    """The knobs that are settings of the whole process, for as long as a point runs: its build and
    every step (dynamo recompiles, and kernels are picked, as the steps run). Restored after, so a
    point run in another process than its own (a test's) leaves none behind. Dynamo's and inductor's
    settings only where the point compiles: importing them costs ~2 s of a point's start."""
    saved = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
             torch.backends.cudnn.benchmark)
    if knobs["deterministic"]:
        # strict: with warn_only, flash and cuDNN attention only warn and stay non-deterministic;
        # an op without a deterministic kernel then fails the point with a clear error instead
        torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = knobs["cudnn_benchmark"]
    try:
        with _compile_settings(knobs) if knobs["compile"] != "off" else contextlib.nullcontext():
            yield
    finally:
        torch.use_deterministic_algorithms(saved[0], warn_only=saved[1])
        torch.backends.cudnn.benchmark = saved[2]


@contextlib.contextmanager
def _compile_settings(knobs: dict[str, Any]) -> Iterator[None]:
    import torch._inductor.config as inductor

    saved = torch._dynamo.config.fail_on_recompile_limit_hit, inductor.emulate_precision_casts
    # a silent fall-back to eager after too many recompiles would make a compiled point lie
    torch._dynamo.config.fail_on_recompile_limit_hit = True
    inductor.emulate_precision_casts = knobs["emulate_precision_casts"]  # read as inductor generates code
    try:
        yield
    finally:
        torch._dynamo.config.fail_on_recompile_limit_hit, inductor.emulate_precision_casts = saved


def prepare(workload: TrainingWorkload, knobs: dict[str, Any], device: torch.device) -> TrainStep:
    """The training step of one point (under ``process_settings``, which the worker holds)."""
    parts = workload.build()
    for module in parts.frozen:
        module.requires_grad_(False).eval()
    reference = Reference.capture(parts)
    precision.apply(parts, knobs["precision"])
    converted = float8.apply(parts, knobs, workload.block_linear_rows())
    recompute.apply(parts, knobs["recompute"], reentrant=knobs["recompute_impl"] == "reentrant")
    compile_knob.apply(parts, knobs["compile"], knobs["cuda_graph"])
    model = sharding.apply(parts, knobs, device)
    params = [p for p in parts.model.parameters() if p.requires_grad]
    masters = None
    if knobs["offload"] == "optimizer" and knobs["sharding"] == "none":
        optimizer = CPUOffloadedOptimizer(params, workload.optimizer, knobs["offload_shards"])
        _check_recipe(optimizer.inner)
        # this process stands for one ZeRO-2 rank: it steps (and is judged on) its share, whose weights
        # are the fp32 masters (the device copies are their rounding, redone every step)
        stepped, masters = [(optimizer.owned, adam.hyper_of(optimizer.inner)[0][1])], optimizer.master
    else:
        recipe = workload.optimizer(params)
        _check_recipe(recipe)
        optimizer = optimizer_knob.build(knobs["optimizer"], params, recipe, knobs)
        stepped = adam.hyper_of(optimizer)
    # the point's own pass of compute fidelity is the step's backward (bound late: the step is made below)
    compute = ComputeFidelity(workload, reference, parts.model, knobs, device, lambda batch: step.backward(batch),
                              facts={**parts.facts, **converted, **rules.ignored(knobs)})
    step = TrainStep(workload, model, params, optimizer, lambda: precision.autocast(knobs["precision"], device),
                     graphs=knobs["cuda_graph"] != "off",
                     fidelity=Fidelity(UpdateFidelity(stepped, seed=knobs["seed"], masters=masters), compute),
                     frozen_params=sum(p.numel() for module in parts.frozen for p in module.parameters()))
    return step


def _check_recipe(optimizer) -> None:
    """Refuse a workload optimizer that is not AdamW's update: update fidelity would judge it against
    AdamW, and every optimizer knob value but adamw would replace it with AdamW."""
    if reason := adam.recipe_refusal(optimizer):
        raise rules.Refused(reason)
