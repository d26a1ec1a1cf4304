"""The frozen encoders that run inside DreamZero's training step (no grad): the Wan VAE (diffusers
``AutoencoderKLWan``), the umT5-xxl text encoder (``UMT5EncoderModel``) and the CLIP ViT-H/14
vision tower (``CLIPVisionModel``, penultimate hidden states: 257 x 1280 tokens).

``HostSyncEncoders`` (``host_syncs=official``) adds the official step's host synchronisations
around them: an assert on the normalised video's range, and the prompt zeroing indexed by each
prompt's length, read from the device one sample at a time.

Upstream (the official networks, here replaced by their diffusers/transformers counterparts):
- dreamzero0/dreamzero@ab790c198fbc:groot/vla/model/dreamzero/modules/wan_video_vae.py
  (``WanVideoVAE``: Wan2.1, 14B; ``WanVideoVAE38``: Wan2.2, 5B; ``WanVideoVAE.encode`` encodes one video
  at a time)
- dreamzero0/dreamzero@ab790c198fbc:groot/vla/model/dreamzero/modules/wan_video_text_encoder.py::WanTextEncoder
- dreamzero0/dreamzero@ab790c198fbc:groot/vla/model/dreamzero/modules/wan_video_image_encoder.py
  (``WanImageEncoder.encode_image``: each sample resized on its own, then ``visual(..., use_31_block=True)``,
  the penultimate block's states)
- dreamzero0/dreamzero@ab790c198fbc:groot/vla/model/dreamzero/action_head/wan_flow_matching_action_tf.py
  (``WANPolicyHead``: ``preprocess_image``, ``encode_prompt`` with its per-sample zeroing, ``encode_video``,
  ``encode_image`` with the second VAE encode of the first frame + zeros, and ``forward``'s range asserts
  and 5B resize to ``target_video_height`` x ``target_video_width``)"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from diffusers import AutoencoderKLWan
from torch import nn
from transformers import CLIPVisionConfig, CLIPVisionModel, UMT5Config, UMT5EncoderModel

from benchbay.workloads.dreamzero.config import Preset

# OpenAI CLIP pixel normalisation (what Wan's CLIP preprocessing uses)
_CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
_CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


@dataclass
class Conditioning:
    """What the frozen encoders hand to the transformer for a micro-batch."""

    latents: torch.Tensor  # (B, z, F, h, w), normalised VAE means
    text: torch.Tensor  # (B, T, 4096), zero past each prompt's end
    image: torch.Tensor  # (B, 257, 1280)
    condition: torch.Tensor | None  # i2v: (B, 4 + z, F, h, w) first-frame mask + first-frame latent


class FrozenEncoders(nn.Module):
    def __init__(self, preset: Preset):
        super().__init__()
        self.preset = preset
        self.vae = AutoencoderKLWan(**preset.vae)
        self.text_encoder = UMT5EncoderModel(UMT5Config(**preset.t5))
        self.image_encoder = CLIPVisionModel(CLIPVisionConfig(**preset.clip))
        channels = (1, -1, 1, 1, 1)
        latents_mean, latents_std = (torch.tensor(v).view(channels)
                                     for v in (self.vae.config.latents_mean, self.vae.config.latents_std))
        self.register_buffer("latents_mean", latents_mean, persistent=False)
        self.register_buffer("latents_std", latents_std, persistent=False)
        self.register_buffer("clip_mean", torch.tensor(_CLIP_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("clip_std", torch.tensor(_CLIP_STD).view(1, 3, 1, 1), persistent=False)
        self.video_format = torch.contiguous_format  # the VAE input's memory format
        self.prompt_tokens = preset.sample.text_len  # the tokens umT5 runs over (trim_prompts)

    def vae_channels_last(self) -> None:
        """The VAE's conv3d weights in channels-last (NDHWC); ``encode_video`` hands it its input so
        too, and its convolutions then keep that layout from one to the next."""
        for module in self.vae.modules():
            if isinstance(module, nn.Conv3d):
                module.weight.data = module.weight.data.contiguous(memory_format=torch.channels_last_3d)
        self.video_format = torch.channels_last_3d

    def trim_prompts(self) -> None:
        """Run umT5 over the first ``longest_prompt`` tokens instead of all 512 (the padded length),
        zeros after: the same text condition, since no valid token attends to padding (masked keys;
        per-token norms and FFN; position bias by relative distance)."""
        self.prompt_tokens = self.preset.sample.longest_prompt

    def compile_in_place(self) -> None:
        """torch.compile each encoder's network (the VAE's encoder: 3 graphs, its first frame, later
        chunks and their caches); their Python wrappers stay eager."""
        for module in (self.vae.encoder, self.text_encoder, self.image_encoder):
            module.compile()

    def attention(self) -> dict[str, str]:
        """The attention implementation transformers chose for umT5 and CLIP (sdpa where it can)."""
        return {"umt5": self.text_encoder.config._attn_implementation,
                "clip": self.image_encoder.config._attn_implementation}

    @property
    def dtype(self) -> torch.dtype:
        return self.latents_mean.dtype

    @torch.no_grad()
    def encode(self, video: torch.Tensor, text_ids: torch.Tensor, text_mask: torch.Tensor, *,
               per_sample: bool, duplicate_vae_encode: bool) -> Conditioning:
        """video: uint8 (B, 3, frames, H, W) canvas; text_ids/text_mask: (B, T).

        per_sample: the VAE and CLIP run one sample at a time (the official loop; umT5 is batched
        there too). duplicate_vae_encode: also encode the first-frame-plus-zeros clip where the
        model does not use it (5B), as the official code does."""
        video = self.preprocess(video)
        text = self.encode_text(text_ids, text_mask)
        latents = self._per_sample(self.encode_video, video, per_sample)
        first_frame = video[:, :, 0]
        image = self._per_sample(self.encode_image, first_frame, per_sample)
        condition = None
        if self.preset.image_conditioned or duplicate_vae_encode:
            condition = self._per_sample(self.first_frame_condition, video, per_sample)
        return Conditioning(latents, text, image, condition if self.preset.image_conditioned else None)

    @staticmethod
    def _per_sample(encode, x: torch.Tensor, per_sample: bool) -> torch.Tensor:
        if not per_sample:
            return encode(x)
        return torch.cat([encode(sample) for sample in x.split(1)])

    def preprocess(self, video: torch.Tensor) -> torch.Tensor:
        """uint8 canvas -> [-1, 1] in the encoders' dtype, resized to the model's size (5B: the
        320x640 canvas is bilinearly resized to 160x320, as the official head does)."""
        x = video.float() / 127.5 - 1
        b, c, t, h, w = x.shape
        if (h, w) != self.preset.sample.model_hw:
            frames = x.transpose(1, 2).reshape(b * t, c, h, w)
            frames = F.interpolate(frames, size=self.preset.sample.model_hw, mode="bilinear", align_corners=False)
            x = frames.reshape(b, t, c, *frames.shape[-2:]).transpose(1, 2)
        return x.to(self.dtype)

    def encode_video(self, video: torch.Tensor) -> torch.Tensor:
        """(B, 3, frames, H, W) in [-1, 1] -> normalised latent means (B, z, 1 + (frames - 1) // 4, h, w)."""
        mean = self.vae.encode(video.contiguous(memory_format=self.video_format)).latent_dist.mode()
        return (mean - self.latents_mean) / self.latents_std

    def encode_text(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(B, T) padded prompts -> (B, T, 4096), zero past each prompt's end (umT5 runs over the
        first ``prompt_tokens``; the transformer still gets all T)."""
        n = self.prompt_tokens
        hidden = self.text_encoder(input_ids=ids[:, :n], attention_mask=mask[:, :n]).last_hidden_state
        return F.pad(self.zero_padding(hidden, mask[:, :n]), (0, 0, 0, ids.shape[1] - n))

    def zero_padding(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return hidden * mask[..., None].to(hidden.dtype)

    def encode_image(self, frame: torch.Tensor) -> torch.Tensor:
        """(B, 3, H, W) in [-1, 1] -> CLIP's penultimate hidden states (B, 257, 1280)."""
        size = self.preset.clip["image_size"]
        pixels = F.interpolate(frame * 0.5 + 0.5, size=(size, size), mode="bicubic", align_corners=False)
        pixels = ((pixels - self.clip_mean) / self.clip_std).to(self.dtype)
        return self.image_encoder(pixel_values=pixels, output_hidden_states=True).hidden_states[-2]

    def first_frame_condition(self, video: torch.Tensor) -> torch.Tensor:
        """The image condition y: a mask marking latent frame 0 (4 channels) and the latent of the
        clip made of the first frame followed by zero frames."""
        clip = torch.cat([video[:, :, :1], torch.zeros_like(video[:, :, 1:])], dim=2)
        latent = self.encode_video(clip)
        mask = torch.zeros_like(latent[:, :4])
        mask[:, :, 0] = 1
        return torch.cat([mask, latent], dim=1)


class HostSyncEncoders(FrozenEncoders):
    def preprocess(self, video: torch.Tensor) -> torch.Tensor:
        x = super().preprocess(video)
        assert x.min() >= -1.0 and x.max() <= 1.0, "videos must be in [-1, 1]"
        return x

    def zero_padding(self, hidden: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        hidden = hidden.clone()
        for i, length in enumerate(mask.gt(0).sum(dim=1)):
            hidden[i, length:] = 0  # a device scalar as a slice bound: one host sync per sample
        return hidden
