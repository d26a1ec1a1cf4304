"""DreamZero presets: the trained CausalWanModel, the frozen encoders and one DROID sample's shapes.

Real presets follow docs/architecture.md (DreamZero-5B on Wan2.2-TI2V-5B, DreamZero-14B on Wan2.1-I2V-14B);
the tiny ones run the same code path at toy widths for CPU tests (still 33 frames -> 9 latent
frames -> 4 blocks, 96 actions, 4 states, so the attention pattern keeps its real structure).

Upstream: the training scripts' overrides (``num_frames=33``, ``num_frame_per_block=2``,
``num_action_per_block=24``, ``num_state_per_block=1``, image resolution) in
dreamzero0/dreamzero@ab790c198fbc:scripts/train/droid_training_full_finetune_wan22.sh (5B) and
dreamzero0/dreamzero@ab790c198fbc:scripts/train/droid_training_full_finetune_wan21.sh (14B);
``CausalWanModel.__init__``'s modules and RoPE tables in
dreamzero0/dreamzero@ab790c198fbc:groot/vla/model/dreamzero/modules/wan_video_dit_action_casual_chunk.py.
The Wan2.1/Wan2.2 widths come from the released checkpoints' configs, not from this repository.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class TransformerConfig:
    """CausalWanModel widths (docs/architecture.md, DreamZero: the trained transformer)."""

    dim: int
    layers: int
    heads: int
    ffn_dim: int
    in_dim: int  # channels into patch_embedding (latent, plus mask + first-frame latent for i2v)
    out_dim: int  # latent channels predicted
    patch: tuple[int, int, int] = (1, 2, 2)
    freq_dim: int = 256  # sinusoidal timestep width
    text_dim: int = 4096  # umT5 d_model
    clip_dim: int = 1280  # CLIP ViT-H width
    action_dim: int = 32  # padded action width
    state_dim: int = 64  # padded state width
    adapter_hidden: int = 1024  # hidden width of the state encoder and action decoder MLPs
    action_rope_positions: int = 10240
    state_rope_positions: int = 1024
    eps: float = 1e-6

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads


@dataclass(frozen=True)
class SampleShape:
    """One training sample as the DROID loader hands it over, and how the step sees it."""

    canvas: tuple[int, int]  # uint8 canvas (3 views tiled: wrist across the top row)
    model_hw: tuple[int, int]  # what the VAE encodes (5B resizes the canvas inside the step)
    frames: int = 33
    frames_per_block: int = 2  # latent frames per causal block
    actions: int = 96  # action horizon (24 per block)
    states: int = 4  # one state per block
    action_valid_dims: int = 8  # DROID: 7 joints + gripper, zero-padded to action_dim
    state_valid_dims: int = 8
    text_len: int = 512  # padded umT5 tokens
    text_valid: tuple[int, int] = (12, 48)  # range of real instruction lengths
    view_crop: float = 1.0  # share of each camera view kept (its centre) before it is resized into the canvas

    @property
    def longest_prompt(self) -> int:
        """Tokens that hold every prompt (text_valid's bound is exclusive, as torch.randint draws it)."""
        return self.text_valid[1]


@dataclass(frozen=True)
class Preset:
    name: str
    transformer: TransformerConfig
    vae: dict[str, Any]  # diffusers AutoencoderKLWan kwargs
    vae_spatial: int  # pixels per latent pixel (8x conv, 16x with the Wan2.2 patchify)
    image_conditioned: bool  # i2v: the model input also carries a mask + first-frame latent (y)
    t5: dict[str, Any]  # transformers UMT5Config kwargs
    clip: dict[str, Any]  # transformers CLIPVisionConfig kwargs
    sample: SampleShape = field(default_factory=lambda: SampleShape((320, 640), (160, 320)))

    def __post_init__(self):
        if self.transformer.in_dim != self.z_dim + self.condition_channels:
            raise ValueError(f"{self.name}: in_dim {self.transformer.in_dim} != latent {self.z_dim} "
                             f"+ conditioning {self.condition_channels} channels")

    @property
    def z_dim(self) -> int:
        return self.vae["z_dim"]

    @property
    def latent_frames(self) -> int:
        return 1 + (self.sample.frames - 1) // 4  # the Wan VAE's causal 4x temporal compression

    @property
    def latent_hw(self) -> tuple[int, int]:
        h, w = self.sample.model_hw
        return h // self.vae_spatial, w // self.vae_spatial

    @property
    def clip_tokens(self) -> int:
        return (self.clip["image_size"] // self.clip["patch_size"]) ** 2 + 1

    @property
    def condition_channels(self) -> int:
        """Channels of y: a 4-channel first-frame mask and the first-frame-plus-zeros latent."""
        return 4 + self.z_dim if self.image_conditioned else 0

    def layout(self) -> SequenceLayout:
        lh, lw = self.latent_hw
        _, ph, pw = self.transformer.patch
        blocks = (self.latent_frames - 1) // self.sample.frames_per_block
        return SequenceLayout(
            latent_frames=self.latent_frames,
            grid_hw=(lh // ph, lw // pw),
            frames_per_block=self.sample.frames_per_block,
            actions_per_block=self.sample.actions // blocks,
            states_per_block=self.sample.states // blocks,
        )

    def with_layers(self, layers: int | None) -> Preset:
        if layers is None:
            return self
        return replace(self, transformer=replace(self.transformer, layers=int(layers)))


@dataclass(frozen=True)
class SequenceLayout:
    """Token order of the teacher-forcing sequence: [clean video | noisy video | actions | states].

    Each video half holds ``latent_frames`` frames of ``frame_tokens`` tokens: the first frame on
    its own, then blocks of ``frames_per_block`` frames; block i owns an action chunk and a state.
    """

    latent_frames: int
    grid_hw: tuple[int, int]  # tokens per latent frame, after patchify
    frames_per_block: int
    actions_per_block: int
    states_per_block: int

    @property
    def frame_tokens(self) -> int:
        return self.grid_hw[0] * self.grid_hw[1]

    @property
    def blocks(self) -> int:
        return (self.latent_frames - 1) // self.frames_per_block

    @property
    def block_tokens(self) -> int:
        return self.frames_per_block * self.frame_tokens

    @property
    def video_tokens(self) -> int:
        return self.latent_frames * self.frame_tokens

    @property
    def actions(self) -> int:
        return self.blocks * self.actions_per_block

    @property
    def states(self) -> int:
        return self.blocks * self.states_per_block

    @property
    def action_start(self) -> int:
        return 2 * self.video_tokens

    @property
    def state_start(self) -> int:
        return self.action_start + self.actions

    @property
    def total(self) -> int:
        return self.state_start + self.states


# umT5-xxl encoder and CLIP ViT-H/14 (open-clip xlm-roberta-large-vit-huge-14's vision tower)
UMT5_XXL = dict(vocab_size=256384, d_model=4096, d_kv=64, d_ff=10240, num_layers=24, num_heads=64,
                feed_forward_proj="gated-gelu", dropout_rate=0.0)
CLIP_VIT_H14 = dict(hidden_size=1280, intermediate_size=5120, num_hidden_layers=32, num_attention_heads=16,
                    image_size=224, patch_size=14, hidden_act="gelu", layer_norm_eps=1e-5)

# Wan2.1 VAE: z 16, 8x spatial (the diffusers defaults are Wan2.1's, latent mean/std included).
WAN21_VAE = dict(base_dim=96, z_dim=16)
# Wan2.2 VAE: z 48, 16x spatial = 8x convolutions after a 2x2 patchify (12 input channels), residual
# down/up-sampling. Its 48 latent means/stds are normalisation constants only; 0/1 here (random weights).
WAN22_VAE = dict(base_dim=160, decoder_base_dim=256, z_dim=48, is_residual=True, in_channels=12, out_channels=12,
                 patch_size=2, scale_factor_spatial=16, latents_mean=[0.0] * 48, latents_std=[1.0] * 48)

_TINY_T5 = dict(vocab_size=512, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                feed_forward_proj="gated-gelu", dropout_rate=0.0)
_TINY_CLIP = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                  image_size=28, patch_size=14, hidden_act="gelu", layer_norm_eps=1e-5)
_TINY_TEXT = dict(text_len=16, text_valid=(3, 10))


def _tiny_transformer(in_dim: int, out_dim: int) -> TransformerConfig:
    return TransformerConfig(dim=64, layers=2, heads=2, ffn_dim=128, in_dim=in_dim, out_dim=out_dim,
                             text_dim=_TINY_T5["d_model"], clip_dim=_TINY_CLIP["hidden_size"], adapter_hidden=32)


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset(
            name="dreamzero-5b",
            transformer=TransformerConfig(dim=3072, layers=30, heads=24, ffn_dim=14336, in_dim=48, out_dim=48),
            vae=WAN22_VAE, vae_spatial=16, image_conditioned=False, t5=UMT5_XXL, clip=CLIP_VIT_H14,
            sample=SampleShape(canvas=(320, 640), model_hw=(160, 320)),
        ),
        Preset(
            name="dreamzero-14b",
            transformer=TransformerConfig(dim=5120, layers=40, heads=40, ffn_dim=13824, in_dim=36, out_dim=16),
            vae=WAN21_VAE, vae_spatial=8, image_conditioned=True, t5=UMT5_XXL, clip=CLIP_VIT_H14,
            sample=SampleShape(canvas=(352, 640), model_hw=(352, 640), view_crop=0.95),
        ),
        # the 5B path at toy widths: Wan2.2-style VAE (patchify, residual), canvas resized in the step
        Preset(
            name="dreamzero-tiny",
            transformer=_tiny_transformer(in_dim=8, out_dim=8),
            vae=dict(base_dim=8, z_dim=8, num_res_blocks=1, is_residual=True, in_channels=12, out_channels=12,
                     patch_size=2, scale_factor_spatial=16, latents_mean=[0.0] * 8, latents_std=[1.0] * 8),
            vae_spatial=16, image_conditioned=False, t5=_TINY_T5, clip=_TINY_CLIP,
            sample=SampleShape(canvas=(128, 256), model_hw=(64, 128), **_TINY_TEXT),
        ),
        # the 14B path at toy widths: Wan2.1-style VAE, image conditioning (mask + first-frame latent)
        Preset(
            name="dreamzero-tiny-i2v",
            transformer=_tiny_transformer(in_dim=4 + 4 + 4, out_dim=4),
            vae=dict(base_dim=8, z_dim=4, num_res_blocks=1, latents_mean=[0.0] * 4, latents_std=[1.0] * 4),
            vae_spatial=8, image_conditioned=True, t5=_TINY_T5, clip=_TINY_CLIP,
            sample=SampleShape(canvas=(32, 64), model_hw=(32, 64), **_TINY_TEXT),
        ),
    )
}


def preset(name: str, layers: int | None = None) -> Preset:
    if name not in PRESETS:
        raise ValueError(f"unknown DreamZero preset {name!r}; known: {sorted(PRESETS)}")
    return PRESETS[name].with_layers(layers)
