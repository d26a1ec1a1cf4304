"""FLOPs of one DreamZero sample: the trained transformer (analytic) and the frozen encoders.

Conventions: a matmul of (m x k) by (k x n) costs 2mkn; self-attention counts QK^T and PV only
over the (query, key) pairs the block-causal mask allows (mask.allowed_pairs: about 27% of the
full square), cross-attention over every pair; element-wise work (norms, modulation, RoPE,
softmax) is left out. Training = 3 x forward (activation recompute, when on, is not counted: this
is model FLOPs, as MFU uses). The frozen VAE's convolutions are counted by running diffusers'
encoder on meta tensors under FlopCounterMode (exact for its convolutions, no memory needed).
"""

from __future__ import annotations

import functools
import math

import torch
from diffusers import AutoencoderKLWan
from torch.utils.flop_counter import FlopCounterMode

from benchbay.workloads.dreamzero.config import Preset
from benchbay.workloads.dreamzero.mask import allowed_pairs


def _linear(tokens: int, fan_in: int, fan_out: int) -> float:
    return 2.0 * tokens * fan_in * fan_out


def transformer_forward_flops(preset: Preset) -> float:
    """Forward FLOPs of CausalWanModel on one sample."""
    c, layout = preset.transformer, preset.layout()
    d, f, L = c.dim, c.ffn_dim, layout.total
    text, image = preset.sample.text_len, preset.clip_tokens
    lv, a = layout.video_tokens, layout.actions
    time_rows = 2 * layout.latent_frames + layout.actions + layout.states
    per_block = (
        _linear(L, d, 4 * d)  # self-attention q, k, v, o
        + 4.0 * allowed_pairs(layout) * d  # QK^T and PV over the allowed pairs
        + _linear(L, d, 2 * d)  # cross-attention q, o
        + _linear(text + image, d, 2 * d)  # k, v over text; k_img, v_img over CLIP tokens
        + 4.0 * L * (text + image) * d  # cross-attention scores and values (text + image branches)
        + _linear(L, d, 2 * f)  # FFN up and down
    )
    embeddings = (
        _linear(2 * lv, c.in_dim * math.prod(c.patch), d)  # patch embedding, clean and noisy halves
        + _linear(text, c.text_dim, d) + _linear(text, d, d)
        + _linear(image, c.clip_dim, c.clip_dim) + _linear(image, c.clip_dim, d)
        + _linear(time_rows, c.freq_dim, d) + _linear(time_rows, d, d) + _linear(time_rows, d, 6 * d)
        + _linear(a, c.action_dim, d) + _linear(a, 2 * d, d) + _linear(a, d, d)  # action encoder
        + _linear(layout.states, c.state_dim, c.adapter_hidden) + _linear(layout.states, c.adapter_hidden, d)
        + _linear(a, d, c.adapter_hidden) + _linear(a, c.adapter_hidden, c.action_dim)  # action decoder
        + _linear(lv, d, c.out_dim * math.prod(c.patch))  # head
    )
    return c.layers * per_block + embeddings


def umt5_forward_flops(config: dict, tokens: int) -> float:
    """umT5 encoder: attention projections, gated-GELU FFN and attention over all padded tokens."""
    d, inner, ff = config["d_model"], config["num_heads"] * config["d_kv"], config["d_ff"]
    per_layer = _linear(tokens, d, 4 * inner) + _linear(tokens, d, 2 * ff) + _linear(tokens, ff, d)
    per_layer += 4.0 * tokens * tokens * inner
    return config["num_layers"] * per_layer


def clip_forward_flops(config: dict) -> float:
    """CLIP vision tower on one image (every layer runs; the step keeps the penultimate states)."""
    w, mlp, p = config["hidden_size"], config["intermediate_size"], config["patch_size"]
    patches = (config["image_size"] // p) ** 2
    tokens = patches + 1
    per_layer = _linear(tokens, w, 4 * w) + _linear(tokens, w, 2 * mlp) + 4.0 * tokens * tokens * w
    return _linear(patches, 3 * p * p, w) + config["num_hidden_layers"] * per_layer


@functools.cache
def _vae_encode_flops(vae_items: tuple, frames: int, height: int, width: int) -> float:
    kwargs = {k: list(v) if isinstance(v, tuple) else v for k, v in vae_items}
    with torch.device("meta"):
        vae = AutoencoderKLWan(**kwargs)
        video = torch.empty(1, 3, frames, height, width)
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        vae.encode(video)
    return float(counter.get_total_flops())


def vae_encode_flops(preset: Preset) -> float:
    """Wan VAE encode of one clip at the model's size."""
    items = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in preset.vae.items()))
    return _vae_encode_flops(items, preset.sample.frames, *preset.sample.model_hw)


def frozen_forward_flops(preset: Preset, duplicate_vae_encode: bool, trim_prompts: bool = False) -> float:
    """Frozen work per sample in the step: VAE encode(s), umT5 over the padded (or trimmed) prompt, CLIP."""
    encodes = 2 if preset.image_conditioned or duplicate_vae_encode else 1
    tokens = preset.sample.longest_prompt if trim_prompts else preset.sample.text_len
    return (encodes * vae_encode_flops(preset) + umt5_forward_flops(preset.t5, tokens)
            + clip_forward_flops(preset.clip))
