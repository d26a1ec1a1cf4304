"""CausalWanModel: the trained DreamZero transformer (docs/architecture.md, DreamZero).

Teacher forcing: one sequence [clean latent tokens | noisy latent tokens | action tokens | state
tokens] runs through every block; the self-attention pattern (mask.py) keeps it causal per block.
Every token carries its own adaLN-zero modulation from its timestep: clean video at t = 0, noisy
video at its latent frame's t, actions at their block's t, each state at its block's action t.

The element-wise work around the matmuls comes in two versions (``Kernels``, the ``kernels``
knob): benchbay's fused one and the official one, written as the official code writes it
(WanRMSNorm as separate kernels, RoPE in complex128 per half, every token's timestep embedded in
float64, attention outputs made contiguous): the same function, more launches and bytes.

Upstream: ``CausalWanModel`` (``__init__``, ``_forward_train``), ``CausalWanAttentionBlock``,
``CausalHead``, ``MultiEmbodimentActionEncoder`` and ``CategorySpecificMLP`` in
dreamzero0/dreamzero@ab790c198fbc:groot/vla/model/dreamzero/modules/wan_video_dit_action_casual_chunk.py;
``WanRMSNorm``, ``WanLayerNorm``, ``WanI2VCrossAttention`` (the ``k_img``/``v_img`` branch), ``MLPProj``
(``img_emb``) and ``sinusoidal_embedding_1d`` (float64) in
dreamzero0/dreamzero@ab790c198fbc:groot/vla/model/dreamzero/modules/wan2_1_submodule.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from benchbay.workloads.dreamzero.attention import AttentionCore, sdpa_core
from benchbay.workloads.dreamzero.blockwise import attend
from benchbay.workloads.dreamzero.config import TransformerConfig
from benchbay.workloads.dreamzero.rope import ComplexRope, RealRope


def timestep_embedding(t: torch.Tensor, dim: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Sinusoidal embedding [cos | sin] of diffusion timesteps (any shape) -> (..., dim) in ``dtype``."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=t.device, dtype=dtype) / half)
    args = t.to(dtype)[..., None] * freqs
    return torch.cat([args.cos(), args.sin()], dim=-1)


class RMSNorm(nn.RMSNorm):
    """Wan's q/k RMSNorm: normalised in float32 over the whole width (one weight across heads)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x.float(), self.normalized_shape, eps=self.eps) * self.weight


class WanRMSNorm(nn.RMSNorm):
    """The same norm as the official WanRMSNorm writes it: square, mean, rsqrt, scale, cast back
    and weight, each its own kernel."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(dim=-1, keepdim=True) + self.eps)).type_as(x) * self.weight


def _attend_all(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return sdpa_core(q, k, v, None)


@dataclass(frozen=True)
class Kernels:
    """How the element-wise work around the matmuls is written (the ``kernels`` knob)."""

    norm: type[nn.Module]  # the q/k RMSNorm
    rope: type[RealRope] | type[ComplexRope]  # built by the workload for its sequence layout
    attend: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]  # cross-attention, all keys
    per_token_time: bool  # embed every token's timestep (official) rather than each distinct one once


KERNELS = {"fused": Kernels(RMSNorm, RealRope, _attend_all, per_token_time=False),
           "official": Kernels(WanRMSNorm, ComplexRope, attend, per_token_time=True)}


def _split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    return x.unflatten(-1, (heads, -1))


class SelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int, eps: float, core: AttentionCore, kernels: Kernels):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))
        self.norm_q, self.norm_k = kernels.norm(dim, eps=eps), kernels.norm(dim, eps=eps)
        self.core = core

    def forward(self, x: torch.Tensor, rope: RealRope | ComplexRope, mask) -> torch.Tensor:
        v = _split_heads(self.v(x), self.heads)
        q = rope(_split_heads(self.norm_q(self.q(x)), self.heads), v.dtype)
        k = rope(_split_heads(self.norm_k(self.k(x)), self.heads), v.dtype)
        return self.o(self.core(q, k, v, mask).flatten(2))


class CrossAttention(nn.Module):
    """Wan's i2v cross-attention: text keys/values plus a separate branch over the CLIP tokens."""

    def __init__(self, dim: int, heads: int, eps: float, kernels: Kernels):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.o, self.k_img, self.v_img = (nn.Linear(dim, dim) for _ in range(6))
        self.norm_q, self.norm_k, self.norm_k_img = (kernels.norm(dim, eps=eps) for _ in range(3))
        self.attend = kernels.attend

    def forward(self, x: torch.Tensor, text: torch.Tensor, image: torch.Tensor) -> torch.Tensor:
        h = self.heads
        v, v_img = _split_heads(self.v(text), h), _split_heads(self.v_img(image), h)
        q = _split_heads(self.norm_q(self.q(x)), h).to(v.dtype)
        k = _split_heads(self.norm_k(self.k(text)), h).to(v.dtype)
        k_img = _split_heads(self.norm_k_img(self.k_img(image)), h).to(v.dtype)
        return self.o(self.attend(q, k, v).flatten(2) + self.attend(q, k_img, v_img).flatten(2))


class CausalWanBlock(nn.Module):
    def __init__(self, config: TransformerConfig, core: AttentionCore, kernels: Kernels):
        super().__init__()
        d, eps = config.dim, config.eps
        self.norm1 = nn.LayerNorm(d, eps=eps, elementwise_affine=False)
        self.self_attn = SelfAttention(d, config.heads, eps, core, kernels)
        self.norm3 = nn.LayerNorm(d, eps=eps, elementwise_affine=True)
        self.cross_attn = CrossAttention(d, config.heads, eps, kernels)
        self.norm2 = nn.LayerNorm(d, eps=eps, elementwise_affine=False)
        self.ffn = nn.Sequential(nn.Linear(d, config.ffn_dim), nn.GELU(approximate="tanh"),
                                 nn.Linear(config.ffn_dim, d))
        self.modulation = nn.Parameter(torch.randn(1, 6, d) / d**0.5)

    def forward(self, x: torch.Tensor, e: torch.Tensor, text: torch.Tensor, image: torch.Tensor,
                rope: RealRope | ComplexRope, mask) -> torch.Tensor:
        """x: (B, L, d); e: per-token time projection (B, L, 6, d)."""
        shift_a, scale_a, gate_a, shift_f, scale_f, gate_f = (self.modulation + e).unbind(2)
        x = x + self.self_attn(self.norm1(x) * (1 + scale_a) + shift_a, rope, mask) * gate_a
        x = x + self.cross_attn(self.norm3(x), text, image)
        return x + self.ffn(self.norm2(x) * (1 + scale_f) + shift_f) * gate_f


class Head(nn.Module):
    def __init__(self, config: TransformerConfig):
        super().__init__()
        d = config.dim
        self.norm = nn.LayerNorm(d, eps=config.eps, elementwise_affine=False)
        self.head = nn.Linear(d, config.out_dim * math.prod(config.patch))
        self.modulation = nn.Parameter(torch.randn(1, 2, d) / d**0.5)

    def forward(self, x: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        shift, scale = (self.modulation + e.unsqueeze(2)).unbind(2)
        return self.head(self.norm(x) * (1 + scale) + shift)


class ActionEncoder(nn.Module):
    """W1 on the noisy action, W2 over [W1(a) | sinusoidal(t)] with swish, then W3."""

    def __init__(self, action_dim: int, dim: int):
        super().__init__()
        self.dim = dim
        self.W1 = nn.Linear(action_dim, dim)
        self.W2 = nn.Linear(2 * dim, dim)
        self.W3 = nn.Linear(dim, dim)

    def forward(self, actions: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        a = self.W1(actions)
        tau = timestep_embedding(t, self.dim).to(a.dtype)
        return self.W3(F.silu(self.W2(torch.cat([a, tau], dim=-1))))


class CausalWanModel(nn.Module):
    def __init__(self, config: TransformerConfig, core: AttentionCore = sdpa_core, kernels: Kernels = KERNELS["fused"]):
        super().__init__()
        self.config = config
        self.kernels = kernels
        d = config.dim
        self.patch_embedding = nn.Conv3d(config.in_dim, d, kernel_size=config.patch, stride=config.patch)
        self.text_embedding = nn.Sequential(nn.Linear(config.text_dim, d), nn.GELU(approximate="tanh"),
                                            nn.Linear(d, d))
        self.time_embedding = nn.Sequential(nn.Linear(config.freq_dim, d), nn.SiLU(), nn.Linear(d, d))
        self.time_projection = nn.Sequential(nn.SiLU(), nn.Linear(d, 6 * d))
        self.img_emb = nn.Sequential(nn.LayerNorm(config.clip_dim), nn.Linear(config.clip_dim, config.clip_dim),
                                     nn.GELU(), nn.Linear(config.clip_dim, d), nn.LayerNorm(d))
        self.blocks = nn.ModuleList(CausalWanBlock(config, core, kernels) for _ in range(config.layers))
        self.head = Head(config)
        self.state_encoder = nn.Sequential(nn.Linear(config.state_dim, config.adapter_hidden), nn.ReLU(),
                                           nn.Linear(config.adapter_hidden, d))
        self.action_encoder = ActionEncoder(config.action_dim, d)
        self.action_decoder = nn.Sequential(nn.Linear(d, config.adapter_hidden), nn.ReLU(),
                                            nn.Linear(config.adapter_hidden, config.action_dim))
        self.init_weights()

    def init_weights(self) -> None:
        """Wan's initialisation: Xavier linears with zero bias, N(0, 0.02) text/time embeddings,
        zero output head (the model starts predicting zero velocity)."""
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)
        nn.init.xavier_uniform_(self.patch_embedding.weight.flatten(1))
        for m in [*self.text_embedding.modules(), *self.time_embedding.modules()]:
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=0.02)
        nn.init.zeros_(self.head.head.weight)

    def forward(self, noisy_video: torch.Tensor, clean_video: torch.Tensor, timesteps: torch.Tensor,
                noisy_actions: torch.Tensor, action_timesteps: torch.Tensor, states: torch.Tensor,
                text: torch.Tensor, image: torch.Tensor, rope: RealRope | ComplexRope, mask,
                condition: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """noisy/clean_video: (B, z, F, h, w) latents; timesteps: (B, F); noisy_actions: (B, A, 32);
        action_timesteps: (B, A); states: (B, S, 64); text: (B, T, 4096); image: (B, 257, 1280);
        condition (i2v only): (B, 4 + z, F, h, w), joined to both video halves.
        Returns the predicted velocity of the noisy video (B, out, F, h, w) and of the actions (B, A, 32)."""
        dtype = self.patch_embedding.weight.dtype
        videos = torch.cat([clean_video, noisy_video])
        if condition is not None:
            videos = torch.cat([videos, condition.repeat(2, 1, 1, 1, 1)], dim=1)
        tokens = self.patch_embedding(videos.to(dtype))
        grid = tokens.shape[2:]
        clean, noisy = tokens.flatten(2).transpose(1, 2).chunk(2)
        actions = self.action_encoder(noisy_actions.to(dtype), action_timesteps)
        x = torch.cat([clean, noisy, actions, self.state_encoder(states.to(dtype))], dim=1)

        frame_tokens = grid[1] * grid[2]
        conditioning = self._time_per_token if self.kernels.per_token_time else self._time_conditioning
        e_noisy, e_tokens = conditioning(timesteps, action_timesteps, states.shape[1], frame_tokens, dtype)
        text = self.text_embedding(text.to(dtype))
        image = self.img_emb(image.to(dtype))
        for block in self.blocks:
            x = block(x, e_tokens, text, image, rope, mask)

        video_tokens = clean.shape[1]
        video = self.head(x[:, video_tokens:2 * video_tokens], e_noisy)
        action = self.action_decoder(x[:, 2 * video_tokens:2 * video_tokens + actions.shape[1]])
        return self._unpatchify(video, grid), action

    def _time_conditioning(self, timesteps: torch.Tensor, action_timesteps: torch.Tensor, states: int,
                           frame_tokens: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """Time embedding of the noisy video tokens (for the head) and every token's time projection.

        Embedded once per distinct row (latent frame, action, state) and expanded to tokens: the
        official code embeds every token; the result is the same."""
        frames = timesteps.shape[1]
        state_timesteps = action_timesteps[:, :: action_timesteps.shape[1] // states]
        rows = torch.cat([torch.zeros_like(timesteps), timesteps, action_timesteps, state_timesteps], dim=1)
        e = self.time_embedding(timestep_embedding(rows, self.config.freq_dim).to(dtype))
        e0 = self.time_projection(e).unflatten(-1, (6, -1))
        e_tokens = torch.cat([e0[:, :frames].repeat_interleave(frame_tokens, dim=1),
                              e0[:, frames:2 * frames].repeat_interleave(frame_tokens, dim=1),
                              e0[:, 2 * frames:]], dim=1)
        return e[:, frames:2 * frames].repeat_interleave(frame_tokens, dim=1), e_tokens

    def _time_per_token(self, timesteps: torch.Tensor, action_timesteps: torch.Tensor, states: int,
                        frame_tokens: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """As ``_time_conditioning``, the official way: every token's timestep embedded (in float64)
        and projected, the clean half's zeros too."""
        video = timesteps.repeat_interleave(frame_tokens, dim=1)
        noisy = torch.cat([video, action_timesteps, action_timesteps[:, :: action_timesteps.shape[1] // states]], dim=1)

        def embed(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            e = self.time_embedding(timestep_embedding(t, self.config.freq_dim, torch.float64).to(dtype))
            return e, self.time_projection(e).unflatten(-1, (6, -1))

        e, e0 = embed(noisy)
        _, e0_clean = embed(torch.zeros_like(video))
        return e[:, :video.shape[1]], torch.cat([e0_clean, e0], dim=1)

    def _unpatchify(self, x: torch.Tensor, grid: torch.Size) -> torch.Tensor:
        f, h, w = grid
        pt, ph, pw = self.config.patch
        x = x.reshape(x.shape[0], f, h, w, pt, ph, pw, self.config.out_dim)
        x = x.permute(0, 7, 1, 4, 2, 5, 3, 6)
        return x.reshape(x.shape[0], self.config.out_dim, f * pt, h * ph, w * pw)
