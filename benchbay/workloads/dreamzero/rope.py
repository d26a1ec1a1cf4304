"""Rotary position embeddings of the DreamZero sequence.

Video tokens (clean and noisy alike) get Wan's 3-D RoPE: of each head's 128 dims, 44 rotate with
the latent frame, 42 with the row and 42 with the column (d - 4(d//6), 2(d//6), 2(d//6)). Action
and state tokens get 1-D RoPE over the whole head from their own tables (10,240 and 1,024
positions). Dims rotate in adjacent pairs, as Wan's complex-number formulation does.
"""

from __future__ import annotations

import torch

from benchbay.workloads.dreamzero.config import SequenceLayout, TransformerConfig


def _inverse_frequencies(dims: int, theta: float = 10000.0) -> torch.Tensor:
    return 1.0 / theta ** (torch.arange(0, dims, 2, dtype=torch.float64) / dims)


def _angles(positions: torch.Tensor, dims: int) -> torch.Tensor:
    return positions.to(torch.float64)[:, None] * _inverse_frequencies(dims)[None, :]


def rope_angles(layout: SequenceLayout, config: TransformerConfig) -> torch.Tensor:
    """Rotation angle of every (token, dim pair): shape (tokens, head_dim // 2), float64."""
    d = config.head_dim
    hw_dims = 2 * (d // 6)
    t_dims = d - 2 * hw_dims
    if layout.actions > config.action_rope_positions or layout.states > config.state_rope_positions:
        raise ValueError("more action/state tokens than RoPE positions")
    f, (h, w) = layout.latent_frames, layout.grid_hw
    frame, row, col = torch.meshgrid(torch.arange(f), torch.arange(h), torch.arange(w), indexing="ij")
    video = torch.cat([_angles(frame.flatten(), t_dims), _angles(row.flatten(), hw_dims),
                       _angles(col.flatten(), hw_dims)], dim=1)
    actions = _angles(torch.arange(layout.actions), d)
    states = _angles(torch.arange(layout.states), d)
    return torch.cat([video, video, actions, states])


def rope_table(layout: SequenceLayout, config: TransformerConfig, device: torch.device) -> torch.Tensor:
    """cos and sin of the angles, stacked: shape (2, tokens, head_dim // 2), float32."""
    angles = rope_angles(layout, config)
    return torch.stack([angles.cos(), angles.sin()]).to(device=device, dtype=torch.float32)


def apply_rope(x: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    """Rotate x of shape (batch, tokens, heads, head_dim) in float32; returns float32."""
    cos, sin = table[0][None, :, None, :], table[1][None, :, None, :]
    pairs = x.float().unflatten(-1, (-1, 2))
    even, odd = pairs[..., 0], pairs[..., 1]
    return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2)
