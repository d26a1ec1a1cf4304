"""``attention=blockwise``: the official launch pattern of DreamZero's self-attention.

The official training scripts pass ``max_chunk_size=4``, which takes the block loop of
``CausalWanSelfAttention`` (``wan_video_dit_action_casual_chunk.py``): four helpers, each a Python
loop of one attention call per block over exactly the keys that block may see (the pattern of
mask.py), each block's keys gathered with ``torch.cat`` and its output written into an
``empty_like`` buffer. Per layer that is 2 + 4 x blocks calls (18 for DROID's 4 blocks) and
6 x blocks + 1 concatenations. Without flash-attn every call falls back to an unmasked SDPA whose
output is made contiguous. At micro-batch 1 this launch pattern, not FLOPs, sets the step time.

``cuda_graph=attention`` compiles each helper with ``mode="reduce-overhead"``, as RLinf patches
the four helpers: the loops become one CUDA graph each.

Upstream:
- dreamzero0/dreamzero@ab790c198fbc:groot/vla/model/dreamzero/modules/wan_video_dit_action_casual_chunk.py
  (``CausalWanSelfAttention``: ``forward``'s teacher-forcing branch and its helpers
  ``_process_clean_image_only``, ``_process_state_blocks``, ``_process_noisy_image_blocks``,
  ``_process_noisy_action_blocks``; ``CausalWanModel.__init__`` turns ``max_chunk_size`` into
  ``local_attn_size``)
- dreamzero0/dreamzero@ab790c198fbc:scripts/train/droid_training_full_finetune_wan22.sh (``max_chunk_size=4``)
- dreamzero0/dreamzero@ab790c198fbc:groot/vla/model/dreamzero/modules/wan2_1_attention.py::AttentionModule
  (without flash-attn: ``scaled_dot_product_attention``, output made ``contiguous``)
- RLinf/RLinf@a3816b596478:rlinf/models/embodiment/dreamzero/__init__.py::get_model (wraps the four helpers in
  ``torch.compile(mode="reduce-overhead")``)
- RLinf/RLinf@a3816b596478:rlinf/models/embodiment/dreamzero/dreamzero_policy.py::DreamZeroPolicy.sft_forward
  (``torch.compiler.cudagraph_mark_step_begin()`` once a step)
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise

import torch
import torch.nn.functional as F

from benchbay.workloads.dreamzero.config import SequenceLayout


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """One unmasked attention call, (B, L, H, D) in and out, as the official SDPA fallback issues it
    (transposed in, the output transposed back and made contiguous)."""
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
    return out.transpose(1, 2).contiguous()


def clean_video(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: SequenceLayout) -> torch.Tensor:
    """The clean half: the first frame alone, then block i over the first frame and blocks 0..i."""
    f, bt = layout.frame_tokens, layout.block_tokens
    out = torch.empty_like(q)
    out[:, :f] = attend(q[:, :f], k[:, :f], v[:, :f])
    for i in range(layout.blocks):
        start, end = f + i * bt, f + (i + 1) * bt
        keys = torch.cat([k[:, :f], k[:, f:end]], dim=1)
        values = torch.cat([v[:, :f], v[:, f:end]], dim=1)
        out[:, start:end] = attend(q[:, start:end], keys, values)
    return out


def _joint_keys(i: int, layout: SequenceLayout, clean: torch.Tensor, noisy: torch.Tensor, actions: torch.Tensor,
                states: torch.Tensor) -> torch.Tensor:
    """What noisy block i and action block i see: the clean prefix before block i, then noisy
    block i, action block i and state block i."""
    f, bt = layout.frame_tokens, layout.block_tokens
    a, s = layout.actions_per_block, layout.states_per_block
    start = f + i * bt
    return torch.cat([clean[:, :start], noisy[:, start:start + bt], actions[:, i * a:(i + 1) * a],
                      states[:, i * s:(i + 1) * s]], dim=1)


def noisy_video(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, clean_k: torch.Tensor, clean_v: torch.Tensor,
                action_k: torch.Tensor, action_v: torch.Tensor, state_k: torch.Tensor, state_v: torch.Tensor,
                layout: SequenceLayout) -> torch.Tensor:
    """The noisy video: its first frame alone, then block i over its joint keys."""
    f, bt = layout.frame_tokens, layout.block_tokens
    out = torch.empty_like(q)
    out[:, :f] = attend(q[:, :f], k[:, :f], v[:, :f])
    for i in range(layout.blocks):
        start = f + i * bt
        keys = _joint_keys(i, layout, clean_k, k, action_k, state_k)
        values = _joint_keys(i, layout, clean_v, v, action_v, state_v)
        out[:, start:start + bt] = attend(q[:, start:start + bt], keys, values)
    return out


def noisy_actions(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, clean_k: torch.Tensor, clean_v: torch.Tensor,
                  noisy_k: torch.Tensor, noisy_v: torch.Tensor, state_k: torch.Tensor, state_v: torch.Tensor,
                  layout: SequenceLayout) -> torch.Tensor:
    """Action block i over the same keys as noisy block i."""
    a = layout.actions_per_block
    out = torch.empty_like(q)
    for i in range(layout.blocks):
        keys = _joint_keys(i, layout, clean_k, noisy_k, k, state_k)
        values = _joint_keys(i, layout, clean_v, noisy_v, v, state_v)
        out[:, i * a:(i + 1) * a] = attend(q[:, i * a:(i + 1) * a], keys, values)
    return out


def states(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: SequenceLayout) -> torch.Tensor:
    """Each state block over itself."""
    s = layout.states_per_block
    out = torch.empty_like(q)
    for i in range(layout.blocks):
        block = slice(i * s, (i + 1) * s)
        out[:, block] = attend(q[:, block], k[:, block], v[:, block])
    return out


def cuda_graphed(fn: Callable) -> Callable:
    """``fn`` as its own ``torch.compile(mode="reduce-overhead")`` region (CUDA graphs)."""
    graphed = torch.compile(fn, mode="reduce-overhead")

    def call(*args):
        return graphed(*args)

    # a block.compile() around the region would inline it and drop its CUDA graph: break the
    # enclosing graph here instead (disable() would strip a compiled function down to its original
    # code, hence the plain wrapper; recursive=False leaves the region's own compilation on)
    return torch.compiler.disable(call, recursive=False)


class BlockwiseAttention:
    """The attention core (q, k, v of shape (B, L, H, D), mask unused) as the official block loop."""

    def __init__(self, layout: SequenceLayout, cuda_graph: bool = False):
        self.layout = layout
        helpers = (clean_video, noisy_video, noisy_actions, states)
        if cuda_graph:
            helpers = tuple(cuda_graphed(h) for h in helpers)
        self.clean_video, self.noisy_video, self.noisy_actions, self.states = helpers

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: object = None) -> torch.Tensor:
        layout = self.layout
        bounds = (0, layout.video_tokens, layout.action_start, layout.state_start, layout.total)
        (cq, nq, aq, sq), (ck, nk, ak, sk), (cv, nv, av, sv) = (
            [t[:, lo:hi] for lo, hi in pairwise(bounds)] for t in (q, k, v))
        return torch.cat([
            self.clean_video(cq, ck, cv, layout),
            self.noisy_video(nq, nk, nv, ck, cv, ak, av, sk, sv, layout),
            self.noisy_actions(aq, ak, av, ck, cv, nk, nv, sk, sv, layout),
            self.states(sq, sk, sv, layout),
        ], dim=1)
