"""Rotary position embeddings of the DreamZero sequence.

Video tokens (clean and noisy alike) get Wan's 3-D RoPE: of each head's 128 dims, 44 rotate with
the latent frame, 42 with the row and 42 with the column (d - 4(d//6), 2(d//6), 2(d//6)). Action
and state tokens get 1-D RoPE over the whole head from their own tables (10,240 and 1,024
positions). Dims rotate in adjacent pairs, as Wan's complex-number formulation does.

Two ways to apply it (the ``kernels`` knob): ``RealRope`` (float32 cos/sin, one rotation per
tensor) and ``ComplexRope`` (the official complex128 rotation, per half of the sequence).

Upstream: the tables in ``CausalWanModel.__init__`` (``freqs``, ``freqs_action``, ``freqs_state``) and
``CausalWanModel._create_freqs``, and ``CausalWanSelfAttention.forward`` rotating the clean and the
noisy half apart, in
dreamzero0/dreamzero@ab790c198fbc:groot/vla/model/dreamzero/modules/wan_video_dit_action_casual_chunk.py;
``rope_params`` and ``rope_action_apply_polar`` (``torch.view_as_complex`` over float64 pairs) in
dreamzero0/dreamzero@ab790c198fbc:groot/vla/model/dreamzero/modules/wan2_1_submodule.py.
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


class RealRope:
    """``kernels=fused``: cos and sin in float32, one rotation over the whole sequence."""

    def __init__(self, layout: SequenceLayout, config: TransformerConfig, device: torch.device):
        angles = rope_angles(layout, config)
        self.table = torch.stack([angles.cos(), angles.sin()]).to(device=device, dtype=torch.float32)

    def __call__(self, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """Rotate x of shape (batch, tokens, heads, head_dim) in float32; returns ``dtype``."""
        cos, sin = self.table[0][None, :, None, :], self.table[1][None, :, None, :]
        pairs = x.float().unflatten(-1, (-1, 2))
        even, odd = pairs[..., 0], pairs[..., 1]
        return torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1).flatten(-2).to(dtype)


class ComplexRope:
    """``kernels=official``: Wan's complex128 rotation, as the official layer issues it: the clean
    and the noisy half apart (the noisy half's table joined with the action and state tables at
    every call), each cast back on its own, then joined."""

    def __init__(self, layout: SequenceLayout, config: TransformerConfig, device: torch.device):
        angles = rope_angles(layout, config)
        polar = torch.polar(torch.ones_like(angles), angles)[:, None].to(device)  # (tokens, 1, head_dim // 2)
        lv = self.video_tokens = layout.video_tokens
        self.video = polar[:lv]
        self.actions, self.states = polar[layout.action_start:layout.state_start], polar[layout.state_start:]

    @staticmethod
    def _rotate(x: torch.Tensor, table: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        pairs = torch.view_as_complex(x.to(torch.float64).unflatten(-1, (-1, 2)))
        return torch.view_as_real(pairs * table[None]).flatten(3).to(dtype)

    def __call__(self, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        lv = self.video_tokens
        clean = self._rotate(x[:, :lv], self.video, dtype)
        noisy = self._rotate(x[:, lv:], torch.cat([self.video, self.actions, self.states]), dtype)
        return torch.cat([clean, noisy], dim=1)
