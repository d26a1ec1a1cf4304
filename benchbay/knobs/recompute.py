"""recompute: activation checkpointing per block, full or selective; ``recompute_impl`` picks
non-reentrant (torch's recommended) or reentrant checkpointing (RLinf's default, which keeps
CUDA-graphed regions inside a checkpointed block working: PT #154306).

Selective keeps the outputs of matmuls and of every attention kernel (SDPA's, FlexAttention's,
varlen attention's, and compiled regions'), as torchtitan's save list does, and recomputes the
cheap element-wise ops. Attention keeps only the attention kernels' outputs: where memory allows
little more than full recompute (one token-sized tensor a block), the replay skips the attention,
the costliest op of a long sequence, and recomputes the matmuls.

RLinf's default: ``gradient_checkpointing_use_reentrant`` (True) in
RLinf/RLinf@a3816b596478:rlinf/hybrid_engines/fsdp/fsdp_model_manager.py and its DreamZero configs
(RLinf/RLinf@a3816b596478:examples/sft/config/libero_sft_dreamzero_5b.yaml), applied per block in
RLinf/RLinf@a3816b596478:rlinf/models/embodiment/dreamzero/patch/wan_causal_model_forward_train.py."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import torch._higher_order_ops as higher_order_ops
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

from benchbay.knobs.replace import replace_blocks
from benchbay.knobs.rules import Refused

if TYPE_CHECKING:  # the workloads import the knobs' declarations, never the other way round
    from benchbay.knobs.parts import ModelParts

# filled on the first recompute that needs them (_fill_policy_sets): naming varlen attention's op
# imports torch.nn.attention.varlen, which imports dynamo, ~2 s of every point process's start
_ATTENTION: set = set()
_SAVE: set = set()


def _fill_policy_sets() -> None:
    """The ops the policies save, in the module-level sets they read (filled in place)."""
    if _ATTENTION:
        return
    import torch.nn.attention.varlen  # noqa: F401  (registers torch.ops.torch_attn before the set names it)

    _ATTENTION.update({torch.ops.aten._scaled_dot_product_efficient_attention.default,
                       torch.ops.aten._scaled_dot_product_flash_attention.default,
                       torch.ops.aten._scaled_dot_product_cudnn_attention.default,
                       torch.ops.aten._scaled_dot_product_attention_math.default,
                       torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
                       torch.ops.torch_attn._varlen_attn.default,
                       higher_order_ops.flex_attention})
    _SAVE.update(_ATTENTION, {torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default,
                              torch.ops.aten._scaled_mm.default})  # float8's matmuls (benchbay.knobs.float8)
    # compiled regions run as one higher-order op where this torch has it (2.10+)
    _SAVE.update(op for op in [getattr(higher_order_ops, "inductor_compiled_code", None)] if op is not None)


# Module-level policies reading module-level sets: dynamo inlines them. A policy bound to its set
# (functools.partial) makes dynamo build a variable of every op in the set, and it cannot for
# inductor_compiled_code: the checkpointed block then graph-breaks out of its compile (torch 2.11-2.13)
# and runs eager, silently.
def _selective(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE if op in _SAVE else CheckpointPolicy.PREFER_RECOMPUTE


def _attention_only(ctx, op, *args, **kwargs):
    return CheckpointPolicy.MUST_SAVE if op in _ATTENTION else CheckpointPolicy.PREFER_RECOMPUTE


POLICIES = {"selective": _selective, "attention": _attention_only}


def apply(parts: ModelParts, mode: str, reentrant: bool = False) -> None:
    if mode == "off":
        return
    if not any(parts.regions.values()):  # nothing to wrap: the point would run without checkpoints
        raise Refused(f"recompute={mode}: the model declares no blocks to checkpoint")
    kwargs = {"checkpoint_impl": CheckpointImpl.REENTRANT if reentrant else CheckpointImpl.NO_REENTRANT}
    if mode in POLICIES:
        _fill_policy_sets()
        kwargs["context_fn"] = functools.partial(create_selective_checkpoint_contexts, POLICIES[mode])
    replace_blocks(parts, lambda block: checkpoint_wrapper(block, **kwargs))
