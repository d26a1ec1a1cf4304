"""Attention implementations of the Wall-X step, chosen per tower.

transformers' Qwen2.5-VL dispatches attention through ``AttentionInterface`` by name. sdpa and eager
split the vision tower's windows with ``lengths.tolist()`` and issue one call per window; any name
containing "flash" takes the one-call varlen path instead. ``VARLEN_FLASH`` registers such a name that
calls PyTorch's bundled FlashAttention-2 (``torch.nn.attention.varlen.varlen_attn``, PyTorch >= 2.10),
so the flash-attn package is not needed. transformers rejects unregistered flash names, and flex for
Qwen2.5-VL, when a model is built, so ``set_implementations`` sets them on the configs afterwards.

Upstream Wall-X trains its own copy of the model code, whose vision tower picks sdpa (one call, a
block-diagonal mask over the windows) or flash_attention_2 (``QWEN2_5_VL_VISION_ATTENTION_CLASSES``) in
X-Square-Robot/wall-x@17335bcc3dd8:wall_x/model/qwen2_5_based/modeling_qwen2_5_vl.py.
"""

from __future__ import annotations

import functools
import inspect

import torch
from transformers import AttentionInterface
from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLForConditionalGeneration

from benchbay.workloads.wallx.layout import SequenceLayout, action_bidirectional, dense_mask

VARLEN_FLASH = "benchbay_varlen_flash"   # contains "flash": Qwen2.5-VL's vision tower then packs windows

#: knob value -> transformers attention implementation name
LANGUAGE = {"sdpa": "sdpa", "eager": "eager", "flash": VARLEN_FLASH, "flex": "flex_attention"}
VISION = {"sdpa": "sdpa", "eager": "eager", "flash": VARLEN_FLASH}


def varlen_unavailable(device: torch.device) -> str | None:
    """Why the varlen flash path cannot run here (None if it can)."""
    if device.type != "cuda":
        return f"flash attention (torch varlen_attn) needs a CUDA device (running on {device.type})"
    try:
        from torch.nn.attention.varlen import varlen_attn  # noqa: F401
    except ImportError:
        return f"torch {torch.__version__} has no torch.nn.attention.varlen.varlen_attn (PyTorch >= 2.10)"
    return None


def _varlen_caller():
    """``varlen_attn`` as call(q, k, v, cu_q, cu_k, max_q, max_k, causal, scale) on packed (tokens, heads,
    head_dim) tensors. Its signature changed across PyTorch versions (2.11: ``window_size`` and no GQA;
    later ``enable_gqa``): resolved here once, outside any compiled region."""
    from torch.nn.attention.varlen import varlen_attn

    params = inspect.signature(varlen_attn).parameters
    has_is_causal, has_gqa = "is_causal" in params, "enable_gqa" in params

    def call(q, k, v, cu_q, cu_k, max_q: int, max_k: int, causal: bool, scale: float | None) -> torch.Tensor:
        kwargs = {"scale": scale}
        if has_is_causal:
            kwargs["is_causal"] = causal
        elif causal:
            kwargs["window_size"] = (-1, 0)
        if k.shape[1] != q.shape[1]:
            if has_gqa:
                kwargs["enable_gqa"] = True
            else:
                k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
                v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
        return varlen_attn(q, k, v, cu_q, cu_k, max_q, max_k, **kwargs)

    return call


def _half(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """FlashAttention takes bf16/fp16 only; under autocast the rotary embedding hands back fp32."""
    dtype = next((t.dtype for t in tensors if t.dtype in (torch.bfloat16, torch.float16)), None)
    if dtype is None and torch.is_autocast_enabled(tensors[0].device.type):
        dtype = torch.get_autocast_dtype(tensors[0].device.type)
    if dtype is None:
        raise TypeError("flash attention needs bf16 or fp16 tensors (precision bf16 or bf16_mixed)")
    return tuple(t.to(dtype) for t in tensors)


def varlen_flash_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0,
                           cu_seq_lens_q=None, cu_seq_lens_k=None, max_length_q=None, max_length_k=None,
                           action_tail: int = 0, *, varlen, **kwargs):
    """transformers attention function: (batch, heads, seq, dim) in, (batch, seq, heads, dim) out.

    Vision tower: transformers passes the packed windows' ``cu_seq_lens``: one non-causal call.
    Language model: each sample is causal, except its last ``action_tail`` queries (the action block),
    which see the whole sample: one causal call, plus one for the action queries when there are any.
    ``varlen`` is ``_varlen_caller()``, bound at registration.
    """
    q, k, v = _half(query, key, value)
    if cu_seq_lens_q is not None:
        out = varlen(q[0].transpose(0, 1), k[0].transpose(0, 1), v[0].transpose(0, 1), cu_seq_lens_q,
                     cu_seq_lens_k, max_length_q, max_length_k, causal=False, scale=scaling)
        return out.unsqueeze(0), None
    batch, heads, seq, dim = q.shape
    packed = [t.transpose(1, 2).reshape(batch * seq, t.shape[1], dim) for t in (q, k, v)]
    cu = torch.arange(0, (batch + 1) * seq, seq, dtype=torch.int32, device=q.device)
    out = varlen(*packed, cu, cu, seq, seq, causal=True, scale=scaling).view(batch, seq, heads, dim)
    if action_tail:
        tail_q = q[:, :, seq - action_tail:].transpose(1, 2).reshape(batch * action_tail, heads, dim)
        cu_tail = torch.arange(0, (batch + 1) * action_tail, action_tail, dtype=torch.int32, device=q.device)
        tail = varlen(tail_q, packed[1], packed[2], cu_tail, cu, action_tail, seq, causal=False, scale=scaling)
        out = torch.cat([out[:, : seq - action_tail], tail.view(batch, action_tail, heads, dim)], dim=1)
    return out, None


def set_implementations(vlm: Qwen2_5_VLForConditionalGeneration, language: str, vision: str) -> None:
    """Point both towers at the knobs' implementations (after build: see the module docstring)."""
    if VARLEN_FLASH in (LANGUAGE[language], VISION[vision]):
        AttentionInterface.register(VARLEN_FLASH, functools.partial(varlen_flash_attention, varlen=_varlen_caller()))
    vlm.config._attn_implementation = {"text_config": LANGUAGE[language], "vision_config": VISION[vision]}


def language_mask(language: str, layout: SequenceLayout, device: torch.device):
    """The language model's attention mask in the form its implementation takes, built once.

    sdpa: boolean (1, 1, S, S); eager: additive float; flex: a BlockMask with B=H=None (independent of
    the micro-batch); flash: None (the action block's bidirectionality is ``varlen_flash_attention``'s
    ``action_tail``)."""
    if language == "flash":
        return None
    if language == "flex":
        from torch.nn.attention.flex_attention import create_block_mask

        return create_block_mask(action_bidirectional(layout.is_action().to(device)), None, None,
                                 layout.length, layout.length, device=device)
    allowed = dense_mask(layout, device)[None, None]
    if language == "sdpa":
        return allowed
    return torch.zeros(allowed.shape, device=device).masked_fill(~allowed, torch.finfo(torch.float32).min)
