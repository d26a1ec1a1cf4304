"""sharding: none | ddp | fsdp2_full | fsdp2_grad_op | fsdp2_hybrid, and offload=optimizer under FSDP2.

FSDP2 wraps each block of every region, then the root (torchtitan's order, after recompute and
compile). full and grad_op differ only in ``reshard_after_forward``; hybrid is a 2-D mesh
(replicate x shard)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch import nn

if TYPE_CHECKING:  # the workloads import the knobs' declarations, never the other way round
    from benchbay.knobs.parts import ModelParts


def apply(parts: ModelParts, knobs: dict, device: torch.device) -> nn.Module:
    """Returns the module to call (DDP wraps; FSDP2 converts in place)."""
    sharding = knobs["sharding"]
    if sharding == "none":
        return parts.model
    # imported here: FSDP2 and DTensor take ~1 s of every point process's start, most points unsharded
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard
    from torch.nn.parallel import DistributedDataParallel

    if sharding == "ddp":
        return DistributedDataParallel(
            parts.model,
            device_ids=[device.index] if device.type == "cuda" else None,
            static_graph=knobs["ddp_static_graph"],
            gradient_as_bucket_view=knobs["ddp_gradient_as_bucket_view"],
            bucket_cap_mb=knobs["ddp_bucket_cap_mb"],
            find_unused_parameters=knobs["ddp_find_unused_parameters"],
        )
    world = dist.get_world_size()
    # build the mesh on the module's own device type: with GPUs visible, a CPU run would
    # otherwise move the module to CUDA (PT #132471)
    if sharding == "fsdp2_hybrid":
        replicate = knobs["replicate"]
        mesh = init_device_mesh(device.type, (replicate, world // replicate), mesh_dim_names=("replicate", "shard"))
    else:
        mesh = init_device_mesh(device.type, (world,))
    kwargs = {"mesh": mesh}
    if knobs["precision"] == "bf16_mixed":
        # RLinf's DreamZero recipe: param_dtype bf16 and reduce_dtype bf16 (fsdp_config.mixed_precision in
        # RLinf/RLinf@a3816b596478:examples/sft/config/libero_sft_dreamzero_5b.yaml, built in
        # RLinf/RLinf@a3816b596478:rlinf/hybrid_engines/fsdp/strategy/fsdp2.py::FSDP2Strategy.wrap_model)
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    kwargs["offload_policy"] = (CPUOffloadPolicy(pin_memory=device.type == "cuda")
                                if knobs["offload"] == "optimizer" else OffloadPolicy())
    reshard = sharding != "fsdp2_grad_op"
    for blocks in parts.regions.values():
        for block in blocks:
            fully_shard(block, reshard_after_forward=reshard, **kwargs)
    fully_shard(parts.model, reshard_after_forward=False, **kwargs)
    if dist.get_backend() == "gloo":
        # gloo has no AVG reduction: FSDP2 would sum gradients across ranks (PT #162338)
        for module in parts.model.modules():
            if hasattr(module, "set_force_sum_reduction_for_comms"):
                module.set_force_sum_reduction_for_comms(True)
    return parts.model
