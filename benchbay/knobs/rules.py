"""The combinations of generic knobs that cannot run, told from the knobs, the device type and
the world size alone: the launcher skips such a point before it starts a process (or a torchrun
group) for it, and the worker checks them again beside what needs the device itself."""

from __future__ import annotations

from typing import Any

from benchbay.knobs import GENERIC
from benchbay.knobs.optimizer import CHOICES as OPTIMIZERS


class Refused(Exception):
    """A knob value found, as it is applied to the built model, to have nothing to act on: the point
    is skipped with this reason (a knob value acts or is refused)."""


def skip_reason(workload_cls: type, knobs: dict[str, Any], device_type: str, world_size: int) -> str | None:
    """Why a training workload's point cannot run here (None if it can)."""
    graphs = workload_cls.graphs
    if knobs["cuda_graph"] not in graphs:
        return (f"cuda_graph={knobs['cuda_graph']}: workload {workload_cls.name} does not support it "
                f"(supports {', '.join(graphs)})")
    if knobs["recompute"] in ("selective", "attention") and knobs["recompute_impl"] == "reentrant":
        return f"recompute={knobs['recompute']} needs recompute_impl=non_reentrant (selective checkpoint contexts)"
    if knobs["cudnn_benchmark"] and device_type != "cuda":
        return f"cudnn_benchmark=True picks cuDNN's algorithms: it needs a CUDA device (running on {device_type})"
    if knobs["cudnn_benchmark"] and knobs["deterministic"]:
        return "cudnn_benchmark=True may pick non-deterministic algorithms: it contradicts deterministic=True"
    if knobs["float8"] != "off" and device_type != "cuda":
        return (f"float8={knobs['float8']} runs its GEMMs on FP8 tensor cores: it needs a CUDA GPU of compute "
                f"capability 8.9 or newer (running on {device_type})")
    if knobs["cuda_graph"] != "off" and device_type != "cuda":
        return f"cuda_graph={knobs['cuda_graph']} needs a CUDA device (running on {device_type})"
    if knobs["emulate_precision_casts"] and knobs["compile"] == "off":
        return "emulate_precision_casts=True changes what inductor generates: it needs compile != off"
    if knobs["cuda_graph"] == "step" and knobs["compile"] == "off":
        return "cuda_graph=step runs the compiled regions as CUDA graphs: it needs compile != off"
    if knobs["cuda_graph"] == "step" and knobs["sharding"].startswith("fsdp2"):
        return "cuda_graph=step with FSDP2: all-gathered parameters change address every step (re-recording)"
    if knobs["sharding"] == "fsdp2_hybrid":
        replicate = knobs["replicate"]
        if world_size % replicate or world_size // replicate < 2 or replicate < 2:
            return (f"fsdp2_hybrid needs replicate >= 2 groups of >= 2 shards dividing the world size "
                    f"({world_size} processes, replicate={replicate})")
    if OPTIMIZERS[knobs["optimizer"]].needs_bf16 and knobs["precision"] != "bf16":
        return f"optimizer={knobs['optimizer']} rounds bf16 weights: it needs precision=bf16 (now {knobs['precision']})"
    if knobs["offload"] == "optimizer" and knobs["sharding"] == "ddp":
        return "offload=optimizer is implemented with FSDP2's CPUOffloadPolicy or without sharding, not under DDP"
    return _idle_modifier(knobs)


#: the float8 recipes whose weight-gradient GEMM is FP8, over the rows of the batch
FP8_WEIGHT_GRADIENT = ("tensorwise", "rowwise")
#: modifier knobs, when they act, and why not otherwise
_MODIFIERS = (
    ("offload_shards", lambda k: k["offload"] == "optimizer" and k["sharding"] == "none",
     "ZeRO-2's split of the CPU-offloaded optimizer acts only with offload=optimizer and sharding=none"),
    ("replicate", lambda k: k["sharding"] == "fsdp2_hybrid", "replica groups act only with sharding=fsdp2_hybrid"),
    ("recompute_impl", lambda k: k["recompute"] != "off", "the checkpoint implementation acts only with recompute on"),
    ("float8_pad_rows", lambda k: k["float8"] in FP8_WEIGHT_GRADIENT,
     "padding rows acts only under float8=tensorwise or rowwise, whose weight-gradient GEMM is FP8"),
)
DDP_KNOBS = ("ddp_static_graph", "ddp_gradient_as_bucket_view", "ddp_bucket_cap_mb", "ddp_find_unused_parameters")


def _idle_modifier(knobs: dict[str, Any]) -> str | None:
    """A modifier set to other than its default where the knob it modifies is off: it would be
    ignored while the point claims it. Its default value claims nothing."""
    for name, acts, why in _MODIFIERS:
        if knobs[name] != GENERIC[name].default and not acts(knobs):
            return f"{name}={knobs[name]!r}: {why}"
    if knobs["sharding"] == "none" and (set_ := ddp_set(knobs)):
        return f"{set_[0]} configures DDP: it needs sharding=ddp (now none)"
    return None


def ddp_set(knobs: dict[str, Any]) -> list[str]:
    """The DDP knobs set to other than their defaults (``name=value``)."""
    return [f"{n}={knobs[n]!r}" for n in DDP_KNOBS if knobs[n] != GENERIC[n].default]


def ignored(knobs: dict[str, Any]) -> dict[str, str]:
    """What the record states of knobs that do not act but are not refused: DDP's under FSDP2, which
    the committed sharding suites (dreamzero-5b-sharding*, wallx-sharding*) set once for every
    strategy; refusing them would skip those suites' FSDP2 points and change their point ids."""
    if knobs["sharding"].startswith("fsdp2") and (set_ := ddp_set(knobs)):
        return {"knobs_ignored": f"{', '.join(set_)}: DDP's knobs do not act under sharding={knobs['sharding']}"}
    return {}
