"""The combinations of generic knobs that cannot run, told from the knobs, the device type and
the world size alone: the launcher skips such a point before it starts a process (or a torchrun
group) for it, and the worker checks them again beside what needs the device itself."""

from __future__ import annotations

from typing import Any

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
    return None
