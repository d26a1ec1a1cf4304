"""recompute: activation checkpointing per block (non-reentrant), full or selective.

Selective keeps the outputs of matmuls and attention and recomputes the cheap element-wise ops."""

from __future__ import annotations

import functools

import torch
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

from benchbay.knobs.replace import replace_blocks
from benchbay.workloads.base import ModelParts

_SAVE = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default,
         torch.ops.aten._scaled_dot_product_efficient_attention.default,
         torch.ops.aten._scaled_dot_product_flash_attention.default,
         torch.ops.aten._scaled_dot_product_cudnn_attention.default,
         torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default}


def _policy(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE if op in _SAVE else CheckpointPolicy.PREFER_RECOMPUTE


def apply(parts: ModelParts, mode: str) -> None:
    if mode == "off":
        return
    kwargs = {"checkpoint_impl": CheckpointImpl.NO_REENTRANT}
    if mode == "selective":
        kwargs["context_fn"] = functools.partial(create_selective_checkpoint_contexts, _policy)
    replace_blocks(parts, lambda block: checkpoint_wrapper(block, **kwargs))
