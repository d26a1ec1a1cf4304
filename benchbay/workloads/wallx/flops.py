"""Analytic FLOPs of one Wall-X sample's forward (matmuls and attention; 2 FLOPs per multiply-add).

Attention counts only the (query, key) pairs the masks allow: the language model's causal mask with
the bidirectional action block, the vision tower's windows (full image on its full-attention blocks).
"""

from __future__ import annotations

import torch

from benchbay.workloads.wallx.batch import VisionInputs
from benchbay.workloads.wallx.config import Preset
from benchbay.workloads.wallx.layout import SequenceLayout, Token, dense_mask


def _vision(preset: Preset) -> float:
    v = preset.vision
    hidden, ffn = v["hidden_size"], v["intermediate_size"]
    row = v["in_channels"] * v["temporal_patch_size"] * v["patch_size"] ** 2
    one = VisionInputs.for_images(preset, 1, torch.device("cpu"))
    patches = int(one.cu_seqlens[-1])
    pairs_window = float((one.cu_window_seqlens.diff().double() ** 2).sum())
    full = set(v["fullatt_block_indexes"])
    total = 2 * patches * row * hidden
    for block in range(v["depth"]):
        pairs = patches ** 2 if block in full else pairs_window
        total += 2 * patches * (4 * hidden ** 2 + 3 * hidden * ffn) + 4 * hidden * pairs
    merged, unit = patches // v["spatial_merge_size"] ** 2, hidden * v["spatial_merge_size"] ** 2
    total += 2 * merged * (unit * unit + unit * v["out_hidden_size"])
    return preset.cameras * total


def forward_flops(preset: Preset, layout: SequenceLayout, layers: int, lm_head_tokens: str) -> dict[str, float]:
    t = preset.text
    hidden, ffn = t["hidden_size"], t["intermediate_size"]
    kv = t["num_key_value_heads"] * hidden // t["num_attention_heads"]
    seq, actions = layout.length, layout.count(Token.ACTION)
    pairs = float(dense_mask(layout, torch.device("cpu")).sum())
    per_layer = (2 * seq * (2 * hidden * hidden + 2 * hidden * kv) + 4 * hidden * pairs
                 + 6 * hidden * (ffn * (seq - actions) + preset.action_expert_size * actions))
    head_tokens = seq if lm_head_tokens == "all" else layout.count(Token.TEXT)
    dim = preset.action_dim
    action_head = 2 * actions * (2 * dim * hidden + 2 * hidden * hidden + hidden * hidden + hidden * dim)
    return {"vision": _vision(preset), "language": layers * per_layer,
            "lm_head": 2.0 * head_tokens * hidden * t["vocab_size"],
            "action_head": action_head + 2.0 * 2 * dim * hidden}
