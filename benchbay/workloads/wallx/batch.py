"""Synthetic LIBERO-shaped batches for the Wall-X step.

Per sample: ``cameras`` images already smart-resized and cut into the vision tower's patch rows
(C x temporal_patch x patch x patch values each, the still image repeated over the temporal patch),
the text token ids and labels, a proprioception vector and an action chunk padded to ``action_dim``
with their dof masks. The vision tower's packing metadata (window order, cu_seqlens, rotary
positions) depends only on the image grid and the micro-batch: it is computed once per micro-batch
size with transformers' own helpers and passed in, so the tower never derives it on the host.

Upstream: ``DataCollator.__call__`` in X-Square-Robot/wall-x@17335bcc3dd8:wall_x/data/load_lerobot_dataset.py
(proprioception and its mask padded to 20 dimensions, the dof masks, ``moe_token_types``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers.vision_utils import get_vision_cu_seqlens, get_vision_position_ids, get_vision_window_index

from benchbay.workloads.wallx.config import Preset


@dataclass(frozen=True)
class VisionInputs:
    """Precomputed inputs of ``Qwen2_5_VisionTransformerPretrainedModel.forward`` (popped from its
    kwargs by transformers.vision_utils instead of being derived from ``grid_thw``)."""

    grid_thw: torch.Tensor
    position_ids: torch.Tensor
    cu_seqlens: torch.Tensor
    max_seqlen: int
    window_index: torch.Tensor
    cu_window_seqlens: torch.Tensor
    max_window_seqlen: int

    @classmethod
    def for_images(cls, preset: Preset, images: int, device: torch.device) -> VisionInputs:
        v = preset.vision
        grid_thw = torch.tensor([[1, preset.patch_grid, preset.patch_grid]] * images)
        window_index, cu_window = get_vision_window_index(grid_thw, v["spatial_merge_size"], v["window_size"],
                                                          v["patch_size"])
        cu_seqlens = get_vision_cu_seqlens(grid_thw)
        return cls(grid_thw=grid_thw.to(device),
                   position_ids=get_vision_position_ids(grid_thw, v["spatial_merge_size"]).to(device),
                   cu_seqlens=cu_seqlens.to(device), max_seqlen=int(cu_seqlens.diff().max()),
                   window_index=window_index.to(device), cu_window_seqlens=cu_window.to(device),
                   max_window_seqlen=int(cu_window.diff().max()))

    def kwargs(self) -> dict:
        return {"grid_thw": self.grid_thw, "position_ids": self.position_ids, "cu_seqlens": self.cu_seqlens,
                "max_seqlen": self.max_seqlen, "window_index": self.window_index,
                "cu_window_seqlens": self.cu_window_seqlens, "max_window_seqlen": self.max_window_seqlen}


@dataclass(frozen=True)
class WallXBatch:
    pixel_values: torch.Tensor   # (mbs x cameras x patches, C x T x P x P)
    vision: VisionInputs
    text_ids: torch.Tensor       # (mbs, text tokens) long
    text_labels: torch.Tensor    # (mbs, text tokens) long: the cross-entropy targets
    proprio: torch.Tensor        # (mbs, action_dim), zero past state_dof
    proprio_mask: torch.Tensor   # (mbs, action_dim), 1 on the state_dof real dimensions
    actions: torch.Tensor        # (mbs, horizon, action_dim) in [-1, 1], zero past action_dof
    dof_mask: torch.Tensor       # (mbs, horizon, action_dim), 1 on the action_dof real dimensions


def synthetic_batch(preset: Preset, vision: VisionInputs, mbs: int, horizon: int, step: int,
                    device: torch.device) -> WallXBatch:
    """A batch that depends only on ``step`` (its own generator, not the global RNG)."""
    gen = torch.Generator(device=device).manual_seed(step)
    v = preset.vision
    patches = mbs * preset.cameras * preset.patch_grid ** 2
    row = v["in_channels"] * v["temporal_patch_size"] * v["patch_size"] ** 2
    vocab = preset.text["vocab_size"]
    dof = (torch.arange(preset.action_dim, device=device) < preset.action_dof).float()
    state = (torch.arange(preset.action_dim, device=device) < preset.state_dof).float()
    return WallXBatch(
        pixel_values=torch.randn(patches, row, generator=gen, device=device),
        vision=vision,
        text_ids=torch.randint(0, vocab, (mbs, preset.text_tokens), generator=gen, device=device),
        text_labels=torch.randint(0, vocab, (mbs, preset.text_tokens), generator=gen, device=device),
        proprio=torch.randn(mbs, preset.action_dim, generator=gen, device=device) * state,
        proprio_mask=state.expand(mbs, -1).contiguous(),
        actions=(torch.rand(mbs, horizon, preset.action_dim, generator=gen, device=device) * 2 - 1) * dof,
        dof_mask=dof.expand(mbs, horizon, -1).contiguous(),
    )
