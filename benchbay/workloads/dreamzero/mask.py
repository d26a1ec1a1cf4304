"""The teacher-forcing self-attention pattern, written once as a FlexAttention ``mask_mod``.

Query -> keys it sees, as the official training code computes it (its training scripts pass
``max_chunk_size=4``, which takes the block loop of ``CausalWanSelfAttention``):
- clean first frame -> the clean first frame;
- clean block i -> the clean first frame and clean blocks 0..i, its own block whole (block-causal);
- noisy first frame -> the noisy first frame;
- noisy block i and action block i -> clean first frame + clean blocks 0..i-1, noisy block i,
  action block i, state block i;
- state block i -> state block i.

The same function gives the FlexAttention BlockMask and the dense boolean mask of the SDPA path;
``attention=blockwise`` issues one call per block over exactly these keys (blockwise.py).

Upstream: the four helpers of ``CausalWanSelfAttention`` (``_process_clean_image_only``,
``_process_noisy_image_blocks``, ``_process_noisy_action_blocks``, ``_process_state_blocks``) in
dreamzero0/dreamzero@ab790c198fbc:groot/vla/model/dreamzero/modules/wan_video_dit_action_casual_chunk.py;
``max_chunk_size=4`` in dreamzero0/dreamzero@ab790c198fbc:scripts/train/droid_training_full_finetune_wan22.sh.
"""

from __future__ import annotations

import torch
from torch.nn.attention.flex_attention import BlockMask, create_block_mask

from benchbay.workloads.dreamzero.config import SequenceLayout

CLEAN, NOISY, ACTION, STATE = 0, 1, 2, 3


def token_labels(layout: SequenceLayout, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
    """(segment, block) of every token: segment is CLEAN/NOISY/ACTION/STATE; block is the causal
    block index, -1 for the first latent frame of either video half."""
    frame_block = torch.tensor([-1] + [(f - 1) // layout.frames_per_block for f in range(1, layout.latent_frames)])
    video_block = frame_block.repeat_interleave(layout.frame_tokens)
    chunks = torch.arange(layout.blocks)
    block = torch.cat([video_block, video_block, chunks.repeat_interleave(layout.actions_per_block),
                       chunks.repeat_interleave(layout.states_per_block)])
    lengths = torch.tensor([layout.video_tokens, layout.video_tokens, layout.actions, layout.states])
    segment = torch.arange(4).repeat_interleave(lengths)
    return segment.to(device), block.to(device)


def make_mask_mod(layout: SequenceLayout, device: torch.device | str = "cpu"):
    """``mask_mod(b, h, q_idx, kv_idx) -> bool``: True where query q_idx may attend to key kv_idx."""
    segment, block = token_labels(layout, device)

    def mask_mod(b, h, q_idx, kv_idx):
        q_seg, kv_seg = segment[q_idx], segment[kv_idx]
        q_block, kv_block = block[q_idx], block[kv_idx]
        kv_clean = kv_seg == CLEAN
        clean_query = kv_clean & (kv_block <= q_block)  # the first frame is block -1: it sees itself only
        first_noisy_query = (kv_seg == NOISY) & (kv_block < 0)
        # noisy block i and action block i: earlier clean blocks (first frame is block -1), then
        # the noisy/action/state tokens of their own block
        joint_query = torch.where(kv_clean, kv_block < q_block, kv_block == q_block)
        state_query = (kv_seg == STATE) & (kv_block == q_block)
        return torch.where(q_seg == CLEAN, clean_query,
                           torch.where(q_seg == STATE, state_query,
                                       torch.where(q_block < 0, first_noisy_query, joint_query)))

    return mask_mod


def dense_mask(layout: SequenceLayout, device: torch.device | str = "cpu") -> torch.Tensor:
    """(tokens, tokens) boolean mask for scaled_dot_product_attention (True = attend)."""
    positions = torch.arange(layout.total, device=device)
    return make_mask_mod(layout, device)(None, None, positions[:, None], positions[None, :])


def block_mask(layout: SequenceLayout, device: torch.device | str) -> BlockMask:
    """FlexAttention BlockMask, built once per shape with B=H=None (valid for any batch size).
    Eager: it evaluates the mask over the whole (Q, KV) grid, ~3 GB for a moment at DreamZero-14B's
    15,940 tokens, where torch 2.11's compiled builder crashed on the H200 (the 14B's build stall)."""
    return create_block_mask(make_mask_mod(layout, device), B=None, H=None, Q_LEN=layout.total,
                             KV_LEN=layout.total, device=device)


def allowed_pairs(layout: SequenceLayout) -> int:
    """Number of (query, key) pairs the pattern allows, counted in closed form from the prose."""
    f, bt = layout.frame_tokens, layout.block_tokens
    a, s = layout.actions_per_block, layout.states_per_block
    clean = f * f + sum(bt * (f + (i + 1) * bt) for i in range(layout.blocks))
    noisy_first = f * f
    joint = sum((bt + a) * (f + i * bt + bt + a + s) for i in range(layout.blocks))
    states = layout.blocks * s * s
    return clean + noisy_first + joint + states
