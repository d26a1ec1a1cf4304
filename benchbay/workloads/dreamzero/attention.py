"""The self-attention core (q, k, v after RoPE -> output), in the implementations a point picks.

``attention=sdpa``: one scaled_dot_product_attention call with the dense boolean mask.
``attention=flex``: FlexAttention with the BlockMask; always compiled (eager flex materialises the
whole score matrix), so even a ``compile: off`` point compiles this one call.
``attention=blockwise``: the official launch pattern, one call per block (blockwise.py).
``cuda_graph=attention``: the core (blockwise: each of its four helpers) is its own
``torch.compile(mode="reduce-overhead")`` region, as RLinf captures its attention helpers as CUDA graphs
(RLinf/RLinf@a3816b596478:rlinf/models/embodiment/dreamzero/__init__.py::get_model; the helpers are
``CausalWanSelfAttention``'s in
dreamzero0/dreamzero@ab790c198fbc:groot/vla/model/dreamzero/modules/wan_video_dit_action_casual_chunk.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import flex_attention

from benchbay.workloads.dreamzero.blockwise import BlockwiseAttention, cuda_graphed
from benchbay.workloads.dreamzero.config import SequenceLayout

#: (q, k, v of shape (batch, tokens, heads, head_dim), mask) -> output of the same shape
AttentionCore = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, object], torch.Tensor]


def sdpa_core(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask)
    return out.transpose(1, 2)


def flex_core(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask, kernel=flex_attention) -> torch.Tensor:
    out = kernel(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), block_mask=mask)
    return out.transpose(1, 2)


def attention_core(kind: str, cuda_graph: bool, layout: SequenceLayout) -> AttentionCore:
    """The core for ``attention`` = "sdpa" | "flex" | "blockwise"; as CUDA-graphed compiled regions if asked."""
    if kind not in ("sdpa", "flex", "blockwise"):
        raise ValueError(f"attention must be 'sdpa', 'flex' or 'blockwise', got {kind!r}")
    if kind == "blockwise":
        return BlockwiseAttention(layout, cuda_graph)
    if cuda_graph:
        return cuda_graphed(sdpa_core if kind == "sdpa" else flex_core)  # flex is compiled inside the region
    if kind == "sdpa":
        return sdpa_core
    return functools.partial(flex_core, kernel=torch.compile(flex_attention))
