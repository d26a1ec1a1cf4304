"""Compute fidelity: does this point compute the gradients the reference computes?

A knob that changes the arithmetic (float8's FP8 GEMMs, compile's fusions, pure bf16 weights, a
sharded reduction) changes the gradients, and a few steps' losses cannot say by how much. Once,
just before the last warm-up step (the first measured one after a single warm-up step), the point
runs its own forward and backward on one batch (that step's; a loader feeding the step gives one
batch more) and so does the reference:
the same weights, batch and random draws, eager, bf16 autocast over fp32 weights (fp32 for an fp32
point), the point's recompute (the same arithmetic, replayed; a reentrant checkpoint gives no
gradient to a block whose inputs need none, so the reference's blocks take inputs that do), or every
block recomputed where the point's would not fit beside it (the same gradients again) and no other
knob. Their gradients are compared on a fixed sample of parameter tensors (``sample``): up
to ``TENSORS_PER_GROUP`` of each group, evenly spaced through it, ``ELEMENTS_PER_TENSOR`` strided
elements of each; cosine similarity and relative error per group and over all of them, and a verdict
(``verdict``); lossy too where a trainable tensor gets a gradient in the reference and none in the
point (``untrained``: the optimizer skips it, so it never trains). A sharded point's gradients are
averaged over its ranks: so are the reference's.

The reference is the model as the workload built it, captured before any knob (``Reference``: its
parameters on the meta device, no memory). It takes the point's weights when it measures: the
point's own tensors where they are fp32, and where they are bf16 weights of linears and
convolutions (autocast computes with those in bf16 either way; only a linear called twice in one
step then sums its two bf16 gradients in bf16 rather than fp32); fp32 copies of the rest; an FSDP2
shard gathered whole. So it costs one step's activations and gradients and what it copies. The
worker runs it before the last warm-up step, which pays for the cache it gave back, and before the
peak memory is reset; the random state is restored after. (Run before the first measured step, it
cost that step 25-95 ms of Wall-X's 438 ms on an H100: wallx-probe-crosscheck, run -091850-ad88;
before the last warm-up step, that step took 4-6 ms more and the first measured one none: -093050-7450.)
Where the copies and a step's working memory would not fit in the free device memory, the
reference recomputes every block, as it does once more when it runs out of memory all the same (eager
may hold more than the point's compiled step); where the copies alone would not (the 14B on one card may not),
it is not measured and the record says why, as it does where the
point's random draws differ from eager's (compiled random ops draw from inductor's own generator).
"""

from __future__ import annotations

import copy
import dataclasses
import gc
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from benchbay.knobs import precision, recompute
from benchbay.record import COMPUTE_GRADIENT_COSINE

if TYPE_CHECKING:  # the workloads import the knobs' declarations, never the other way round
    from benchbay.workloads.base import ModelParts, TrainingWorkload

#: parameter tensors sampled from each group, evenly spaced through it (all of a smaller group)
TENSORS_PER_GROUP = 8
#: strided elements of each sampled tensor's gradient (all of a smaller one)
ELEMENTS_PER_TENSOR = 1 << 16
#: faithful when every group's gradient, and all of them together, is at least this aligned with
#: the reference's and at most this far from it in relative norm. Provisional: to be set from the
#: H200 measurement of compiled bf16 against eager bf16 (the noise floor: what fusing and reordering
#: alone do to bf16 gradients), with a margin over it.
COSINE_MIN = 0.99
RELATIVE_ERROR_MAX = 0.15
#: the group of the parameters outside every region
REST = "rest"
#: what module wrappers put before their module's parameter names (checkpoint_wrapper, torch.compile)
_WRAPPERS = ("_checkpoint_wrapped_module.", "_orig_mod.")
#: modules whose parameters autocast casts to bf16 before it computes: a bf16 weight there is what it computes with
_CAST_BY_AUTOCAST = (nn.Linear, nn.modules.conv._ConvNd)
GIB = 1024**3


@dataclasses.dataclass
class Reference:
    """The trained model as the workload built it, before any knob: its parameters on the meta
    device (their values come from the point when it measures), its buffers copied; or why not."""

    parts: ModelParts | None
    reason: str | None = None

    @classmethod
    def capture(cls, parts: ModelParts) -> Reference:
        memo: dict[int, Any] = {id(p): nn.Parameter(torch.empty_like(p, device="meta"), requires_grad=p.requires_grad)
                                for p in parts.model.parameters()}
        try:
            return cls(dataclasses.replace(_copied(parts, memo), frozen=[]))
        except Exception as exc:  # an attribute that cannot be copied (a handle, a CUDA graph)
            return cls(None, f"the model cannot be copied for the reference: {type(exc).__name__}: {exc}")

    def fresh(self) -> ModelParts:
        """A copy of the captured model to measure with (its parameters still on the meta device): a
        pass that ran out of memory leaves its copy wrapped and filled, and a second pass takes another."""
        return _copied(self.parts, {id(b): b for b in self.parts.model.buffers()})  # buffers shared, not copied


def _copied(parts: ModelParts, memo: dict[int, Any]) -> ModelParts:
    """``parts`` with its model deep-copied through ``memo`` (what it maps stays as mapped) and its
    regions' blocks those of the copy."""
    model = copy.deepcopy(parts.model, memo)
    regions = {name: [memo[id(b)] for b in blocks] for name, blocks in parts.regions.items()}
    return dataclasses.replace(parts, model=model, regions=regions)


def sample(parts: ModelParts) -> dict[str, str]:
    """The sampled trainable tensors by name, each with its group: ``<region>.weights`` (two or more
    dimensions) or ``<region>.vectors`` (biases, norm scales), ``rest.*`` outside every region."""
    names = {id(m): name for name, m in parts.model.named_modules()}
    prefixes = [(names[id(b)] + ".", region) for region, blocks in parts.regions.items() for b in blocks]
    groups: dict[str, list[str]] = {}
    for name, p in parts.model.named_parameters():
        if p.requires_grad:
            where = next((region for prefix, region in prefixes if name.startswith(prefix)), REST)
            groups.setdefault(f"{where}.{'weights' if p.dim() >= 2 else 'vectors'}", []).append(name)
    out = {}
    for group, members in groups.items():
        picks = np.unique(np.linspace(0, len(members) - 1, min(TENSORS_PER_GROUP, len(members))).round().astype(int))
        out.update({members[i]: group for i in picks})
    return out


def compare(point: dict[str, torch.Tensor], reference: dict[str, torch.Tensor],
            groups: dict[str, str]) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
    """Cosine similarity and relative error (|point - reference| / |reference|) of the sampled
    gradients, per group and over all of them."""
    members: dict[str, list[str]] = {}
    for name, group in groups.items():
        members.setdefault(group, []).append(name)

    def figures(names: list[str]) -> dict[str, float]:
        a = torch.cat([point[n] for n in names]).double()
        b = torch.cat([reference[n] for n in names]).double()
        na, nb = float(a.norm()), float(b.norm())
        if nb == 0.0:  # a gradient the reference says is zero: the point's must be too
            return {"cosine": 1.0 if na == 0.0 else 0.0, "relative_error": 0.0 if na == 0.0 else float("inf"),
                    "tensors": len(names)}
        cosine = min(float(a @ b) / (na * nb), 1.0) if na else 0.0  # not above 1 by rounding
        return {"cosine": cosine, "relative_error": float((a - b).norm()) / nb, "tensors": len(names)}

    return {group: figures(names) for group, names in members.items()}, figures(list(groups))


#: the fact a workload's build states when it changed what its frozen modules compute (FP8 encoders):
#: their outputs' verdict, by this module's measures; lossy there makes the point's compute lossy
FROZEN_VERDICT = "frozen_outputs_fidelity"


def verdict(by_group: dict[str, dict[str, float]], overall: dict[str, float]) -> str:
    """faithful when every group and all of them together pass both thresholds, else lossy."""
    return "faithful" if all(f["cosine"] >= COSINE_MIN and f["relative_error"] <= RELATIVE_ERROR_MAX
                             for f in [*by_group.values(), overall]) else "lossy"


class ComputeFidelity:
    """Measures once (``measure``, before the last warm-up step) and says what it found (``summary``),
    with ``facts``: what the point computes otherwise than the reference (the float8 knob's linears)."""

    def __init__(self, workload: TrainingWorkload, reference: Reference, model: nn.Module, knobs: dict[str, Any],
                 device: torch.device, point: Callable[[Any], Any], facts: dict[str, Any] | None = None):
        self.workload, self.reference, self.model, self.knobs, self.device = workload, reference, model, knobs, device
        self.point = point  # the point's own forward and backward of a batch
        self.facts = facts or {}
        self.reference_precision = "fp32" if knobs["precision"] == "fp32" else "bf16_mixed"
        self.reference_recompute = knobs["recompute"]  # or full, where the point's would not fit (_measure)
        self.figures: dict[str, Any] = {}
        self.untrained: list[str] = []  # trainable tensors the reference gives a gradient and the point none
        self.reason = reference.reason
        built = {} if reference.parts is None else dict(reference.parts.model.named_parameters())
        self.groups = sample(reference.parts) if built else {}
        self.sizes = {name: built[name].numel() for name in self.groups}
        missing = sorted(set(built) - set(_named(model)))
        if knobs["offload"] == "optimizer" and knobs["sharding"].startswith("fsdp2"):
            self.reason = "FSDP2's CPU offload keeps the weights on the host: the reference does not gather them"
        elif missing:
            self.reason = f"the point has no parameter {missing[0]!r} of the model as built (a knob renamed it)"
        elif self.reason is None and not self.groups:
            self.reason = "no trainable parameters"

    def measure(self, step: int) -> None:
        """Compare the gradients of the batch of step ``step``; once."""
        if self.reason is not None or self.figures:
            self.reference = None
            return
        cuda = self.device.type == "cuda"
        reserved = torch.cuda.memory_reserved(self.device) if cuda else 0
        with torch.random.fork_rng(devices=[self.device] if cuda else []):  # the steps draw as if it never ran
            self.figures, self.reason = self._measure(self.workload.batch(step))
        # what it held is freed now: a model of transformers' holds reference cycles, so without a collection
        # the reference's copies and gradients (12 GiB for Wall-X) would live into the measured steps
        self.reference = None
        gc.collect()
        if cuda and torch.cuda.memory_reserved(self.device) > reserved:
            # what the reference needed beyond the point's own cache goes back to the device, not into the
            # measured steps' reserved peak (the point's cache with it: the next step, a warm-up one, allocates again)
            torch.cuda.empty_cache()

    def summary(self) -> dict[str, dict[str, Any]]:
        extra = dict(self.facts)
        if self.untrained:  # known once the reference's backward ran, whatever else stopped the comparison
            extra["fidelity_untrained"] = (
                f"{len(self.untrained)} trainable tensors got a gradient in the reference and none in the point, "
                f"so they never train (first: {self.untrained[0]})")
        lossy = {"compute_fidelity": "lossy"} if extra.get(FROZEN_VERDICT) == "lossy" or self.untrained else {}
        if self.reason is not None:
            return {"extra": {**extra, "compute_fidelity_skipped": f"not measured: {self.reason}", **lossy}}
        if not self.figures:
            return {"extra": {**extra, **lossy}} if extra else {}
        by_group, overall = self.figures["groups"], self.figures["overall"]
        return {"metrics": {COMPUTE_GRADIENT_COSINE: overall["cosine"],
                            "compute_gradient_error": overall["relative_error"],
                            "compute_sampled_tensors": overall["tensors"]},
                "extra": {**extra, "compute_fidelity": verdict(by_group, overall), **lossy,
                          "compute_fidelity_groups": by_group,
                          "compute_fidelity_sample": (
                              f"{overall['tensors']} parameter tensors (up to {TENSORS_PER_GROUP} a group), up to "
                              f"{ELEMENTS_PER_TENSOR} strided elements of each gradient, of one batch against the "
                              f"reference: eager, {self.reference_precision}, recompute={self.reference_recompute}"
                              f"{' (reentrant, every block trained)' if self._lifted() else ''}, "
                              "the same weights, batch and random draws")}}

    def _lifted(self) -> bool:
        """Whether the reference's blocks take inputs that need a gradient (``_inputs_need_grad``)."""
        return self.knobs["recompute_impl"] == "reentrant" and self.reference_recompute != "off"

    def _measure(self, batch: Any) -> tuple[dict[str, Any], str | None]:
        start = _rng_state(self.device)
        rest = _allocated(self.device, reset_peak=True)
        self.point(batch)
        working = _peak(self.device) - rest
        named = _named(self.model)
        point = self._sampled({name: named[name].grad for name in self.groups})
        no_grad = [name for name, p in named.items() if p.requires_grad and p.grad is None]
        drawn = _rng_state(self.device)
        for p in self.model.parameters():
            p.grad = None
        _set_rng_state(start, self.device)
        reason, regions = self._fits(working), any(self.reference.parts.regions.values())
        if reason is not None and self.reference_recompute != "full" and regions:
            # every block recomputed replays the same ops, so the same gradients, holding a block's
            # activations at a time: the reference of a point whose batch fills the card still fits
            self.reference_recompute, reason = "full", self._fits(0)
        if not _everyone(reason is None, self.device):
            return {}, reason or "another rank's reference did not fit in its free memory"
        reference, reason, out_of_memory = self._reference_pass(batch, no_grad, drawn)
        # every rank decides alike (their passes gather shards together): all may go again or none
        failed = not _everyone(reason is None, self.device)
        again = _everyone((reason is None or out_of_memory) and self.reference_recompute != "full" and regions,
                          self.device)
        if failed and again:
            # eager may hold more of a step than the point's compiled code, which the estimate goes by (Wall-X
            # at mbs 48 ran out on an H200): once more with every block recomputed, from the same draws
            gc.collect()
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            _set_rng_state(start, self.device)
            self.reference_recompute = "full"
            reference, reason, _ = self._reference_pass(batch, no_grad, drawn)
        if not _everyone(reason is None, self.device):
            return {}, reason or "another rank's reference pass failed"
        if self.knobs["sharding"] != "none":
            reference = _averaged(reference, self.device)
        by_group, overall = compare(point, reference, self.groups)
        return {"groups": by_group, "overall": overall}, None

    def _reference_pass(self, batch: Any, no_grad: list[str],
                        drawn: list[torch.Tensor]) -> tuple[dict[str, torch.Tensor], str | None, bool]:
        """The reference's sampled gradients, or why not; whether it ran out of memory."""
        try:
            reference = self._reference_gradients(batch, no_grad)
        except Exception as exc:  # an OOM or what the reference cannot run: the measured steps are not affected
            oom = isinstance(exc, torch.OutOfMemoryError)
            return {}, f"the reference pass failed: {type(exc).__name__}: {str(exc)[:300]}", oom
        if not _same(drawn, _rng_state(self.device)):
            return {}, ("the point draws its random numbers otherwise than eager (compiled random ops use "
                        "inductor's own generator): its gradients are of other noise"), False
        return reference, None, False

    def _reference_gradients(self, batch: Any, no_grad: list[str]) -> dict[str, torch.Tensor]:
        """The reference's sampled gradients; ``untrained``: which of ``no_grad`` (the point's trainable
        tensors without a gradient) get a non-zero one here."""
        parts = self.reference.fresh()
        self._materialise(parts.model)
        recompute.apply(parts, self.reference_recompute, reentrant=self.knobs["recompute_impl"] == "reentrant")
        if self._lifted():
            # not non-reentrant: it fails around the workload's CUDA-graphed helpers (PT #154306); and not
            # without recompute: the blocks' activations would not fit where the point's batch needs it
            for block in (b for blocks in parts.regions.values() for b in blocks):
                block.register_forward_pre_hook(_inputs_need_grad, with_kwargs=True)
        if self.knobs["cuda_graph"] != "off":  # the workload's own graphed helpers run in the reference too
            torch.compiler.cudagraph_mark_step_begin()
        with precision.autocast(self.reference_precision, self.device):
            out = self.workload.loss(parts.model, batch)
        (out if isinstance(out, torch.Tensor) else out[0]).backward()
        named = _named(parts.model)
        # a gradient the reference leaves None or zero too is the model's (an unused head), not the point's loss
        self.untrained = [n for n in no_grad if n in named and named[n].grad is not None and bool(named[n].grad.any())]
        return self._sampled({name: named[name].grad for name in self.groups})

    def _weights(self, model: nn.Module):
        """Each parameter slot of the reference (module, name, its meta parameter), the point's parameter
        of that name, and whether the reference may compute with it as it is when it is bf16."""
        point = _named(self.model)
        fqn = {id(meta): name for name, meta in model.named_parameters()}  # a tied weight: its first name
        autocast = self.reference_precision != "fp32"
        cast = {}  # id(meta) -> whether every module holding it is one autocast casts (tied weights)
        for module in model.modules():
            for meta in module._parameters.values():
                if meta is not None:
                    cast[id(meta)] = cast.get(id(meta), True) and isinstance(module, _CAST_BY_AUTOCAST)
        for module in model.modules():
            for name, meta in module._parameters.items():
                if meta is not None:
                    yield module, name, meta, point[fqn[id(meta)]], autocast and cast[id(meta)]

    def _copy_bytes(self) -> int:
        """Device memory the reference's weights take beyond the point's (copies and gathered shards)."""
        total, seen = 0, set()
        for _, _, meta, theirs, bf16_ok in self._weights(self.reference.parts.model):
            if id(meta) in seen:
                continue
            seen.add(id(meta))
            if not _as_is(theirs.dtype, bf16_ok):
                total += meta.numel() * 4
            elif hasattr(theirs, "full_tensor"):
                total += meta.numel() * theirs.element_size()
        return total

    def _materialise(self, model: nn.Module) -> None:
        """The point's weights into the reference's slots: as they are where allowed, else fp32 copies."""
        made: dict[int, nn.Parameter] = {}
        for module, name, meta, theirs, bf16_ok in list(self._weights(model)):
            if id(meta) not in made:
                value = _whole(theirs).detach()
                if not _as_is(value.dtype, bf16_ok):
                    value = value.float()
                made[id(meta)] = nn.Parameter(value, requires_grad=meta.requires_grad)
            module._parameters[name] = made[id(meta)]

    def _fits(self, working: int) -> str | None:
        free = _free_bytes(self.device)
        if free is None:
            return None
        copies = self._copy_bytes()
        if copies + working <= free:
            return None
        return (f"the reference's weight copies ({copies / GIB:.1f} GiB) and a step's working memory "
                f"({working / GIB:.1f} GiB) need {(copies + working) / GIB:.1f} GiB; {free / GIB:.1f} GiB are free")

    def _sampled(self, grads: dict[str, torch.Tensor | None]) -> dict[str, torch.Tensor]:
        out = {}
        for name in self.groups:
            grad = grads[name]
            if grad is None:  # not used by this loss: a zero gradient
                out[name] = torch.zeros(min(self.sizes[name], ELEMENTS_PER_TENSOR), device=self.device)
                continue
            flat = _whole(grad).detach().reshape(-1)
            out[name] = flat[:: max(flat.numel() // ELEMENTS_PER_TENSOR, 1)][:ELEMENTS_PER_TENSOR].float().clone()
        return out


def _inputs_need_grad(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """A reentrant checkpoint's block, fed inputs that need a gradient: torch's reentrant checkpoint
    gives its parameters none where no input needs one (the first block, fed the batch)."""
    def lift(a: Any) -> Any:
        needs = isinstance(a, torch.Tensor) and a.is_floating_point() and not a.requires_grad
        return a.detach().requires_grad_() if needs and torch.is_grad_enabled() else a

    return tuple(lift(a) for a in args), {k: lift(v) for k, v in kwargs.items()}


def _as_is(dtype: torch.dtype, bf16_ok: bool) -> bool:
    """Whether the reference computes with a point's weight of this dtype as it is (else an fp32 copy)."""
    return dtype == torch.float32 or (bf16_ok and dtype == torch.bfloat16)


def _named(model: nn.Module) -> dict[str, nn.Parameter]:
    """Parameters by the name they had as built (wrappers' prefixes removed)."""
    out = {}
    for name, p in model.named_parameters():
        for wrapper in _WRAPPERS:
            name = name.replace(wrapper, "")
        out[name] = p
    return out


def _whole(t: torch.Tensor) -> torch.Tensor:
    """A parameter or gradient as one plain tensor: an FSDP2 shard gathered, torchao's FP8
    all-gather wrapper (float8=tensorwise under FSDP2) taken off."""
    if hasattr(t, "full_tensor"):
        t = t.full_tensor()
    if type(t) not in (torch.Tensor, nn.Parameter):
        from torchao.float8.fsdp_utils import WeightWithDynamicFloat8CastTensor

        if isinstance(t, WeightWithDynamicFloat8CastTensor):
            t = t._tensor
    return t


def _averaged(grads: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    """The sampled gradients averaged over the ranks, as a sharded point's gradients are (in one all-reduce)."""
    if not (dist.is_initialized() and dist.get_world_size() > 1):
        return grads
    flat = torch.cat(list(grads.values()))
    dist.all_reduce(flat)  # a sum: gloo has no average
    flat /= dist.get_world_size()
    return dict(zip(grads, flat.split([g.numel() for g in grads.values()]), strict=True))


def _everyone(ok: bool, device: torch.device) -> bool:
    """Whether every rank is ``ok``: they go on to the collectives together or not at all."""
    if not (dist.is_initialized() and dist.get_world_size() > 1):
        return ok
    flag = torch.tensor([int(ok)], device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())


def _rng_state(device: torch.device) -> list[torch.Tensor]:
    return [torch.get_rng_state(), *([torch.cuda.get_rng_state(device)] if device.type == "cuda" else [])]


def _set_rng_state(state: list[torch.Tensor], device: torch.device) -> None:
    torch.set_rng_state(state[0])
    if device.type == "cuda":
        torch.cuda.set_rng_state(state[1], device)


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def _allocated(device: torch.device, reset_peak: bool = False) -> int:
    if device.type != "cuda":
        return 0
    if reset_peak:  # the worker resets it again before the measured steps
        torch.cuda.reset_peak_memory_stats(device)
    return torch.cuda.memory_allocated(device)


def _peak(device: torch.device) -> int:
    return torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0


def _free_bytes(device: torch.device) -> int | None:
    """Device memory a reference could take: free on the device and cached by torch unused; None on
    a CPU (host memory is not checked: CPU points are small)."""
    if device.type != "cuda":
        return None
    free, _ = torch.cuda.mem_get_info(device)
    return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
