"""Wall-X presets: the Qwen2.5-VL backbone's dimensions, the action expert's width and the shape of
one LIBERO-like sample (cameras, prompt lengths, action and state widths).

Upstream: ``Qwen2_5_VLConfig`` (``num_experts``, ``experts``, ``mlp_moe``) in
X-Square-Robot/wall-x@17335bcc3dd8:wall_x/model/qwen2_5_based/configuration_qwen2_5_vl.py;
the 20-wide padding in ``DataCollator.__call__`` of
X-Square-Robot/wall-x@17335bcc3dd8:wall_x/data/load_lerobot_dataset.py.
The backbone's dimensions and the action expert's width are the released checkpoints' config.json,
not in that repository."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from transformers import Qwen2_5_VLConfig


@dataclass(frozen=True)
class Preset:
    """One model size and the sample it is trained on."""

    text: dict[str, Any]                 # Qwen2_5_VLTextConfig fields
    vision: dict[str, Any]               # Qwen2_5_VLVisionConfig fields
    action_expert_size: int              # intermediate width of each layer's action-expert SwiGLU
    camera_size: int                     # square camera frame side (pixels) before smart_resize
    prompt_tokens: int                   # text before the images (system prompt, user header)
    instruction_tokens: int              # text after the images (task instruction, assistant header)
    cameras: int = 2
    action_dim: int = 20                 # action and proprioception vectors padded to this width
    action_dof: int = 7                  # real action dimensions (the dof mask covers these)
    state_dof: int = 8                   # real proprioception dimensions
    config_extra: dict[str, Any] = field(default_factory=dict)   # top-level Qwen2_5_VLConfig fields

    @property
    def resized_image(self) -> int:
        """smart_resize's rounding to a multiple of patch x merge (its pixel bounds never bind here)."""
        factor = self.vision["patch_size"] * self.vision["spatial_merge_size"]
        return factor * round(self.camera_size / factor)

    @property
    def patch_grid(self) -> int:
        """Patches per image side."""
        return self.resized_image // self.vision["patch_size"]

    @property
    def image_tokens(self) -> int:
        """Language-model tokens per image, after the vision tower's 2x2 merge."""
        return (self.patch_grid // self.vision["spatial_merge_size"]) ** 2

    @property
    def text_tokens(self) -> int:
        """Prompt + instruction + a <vision_start>/<vision_end> pair per camera."""
        return self.prompt_tokens + self.instruction_tokens + 2 * self.cameras

    def vlm_config(self, layers: int | None = None) -> Qwen2_5_VLConfig:
        text = dict(self.text)
        if layers is not None:
            text["num_hidden_layers"] = layers
        # no KV cache in training: transformers would otherwise fill one every forward
        return Qwen2_5_VLConfig(text_config={**text, "use_cache": False}, vision_config=dict(self.vision),
                                tie_word_embeddings=True, **self.config_extra)


PRESETS: dict[str, Preset] = {
    # Qwen2.5-VL-3B-Instruct's config.json, with Wall-X's action expert and LIBERO's two 256 px cameras
    "wallx-3b": Preset(
        text=dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16,
                  num_key_value_heads=2, vocab_size=151936, max_position_embeddings=128000, rms_norm_eps=1e-6,
                  hidden_act="silu", rope_parameters={"rope_type": "default", "rope_theta": 1000000.0,
                                                      "mrope_section": [16, 24, 24]}),
        vision=dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, in_channels=3,
                    out_hidden_size=2048, patch_size=14, spatial_merge_size=2, temporal_patch_size=2,
                    window_size=112, fullatt_block_indexes=[7, 15, 23, 31], tokens_per_second=2,
                    hidden_act="silu"),
        action_expert_size=2048, camera_size=256, prompt_tokens=16, instruction_tokens=40,
        config_extra=dict(image_token_id=151655, video_token_id=151656, vision_start_token_id=151652,
                          vision_end_token_id=151653),
    ),
    # the same code path at toy size: 8x8 patches per image -> 16 tokens in four 2x2 windows; head_dim 64
    # (FlexAttention's Triton templates find no kernel for head_dim 16)
    "wallx-tiny": Preset(
        text=dict(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
                  num_key_value_heads=1, vocab_size=512, max_position_embeddings=1024, rms_norm_eps=1e-6,
                  hidden_act="silu", bos_token_id=None, eos_token_id=None,
                  rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [8, 12, 12]}),
        vision=dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, in_channels=3, out_hidden_size=128,
                    patch_size=4, spatial_merge_size=2, temporal_patch_size=2, window_size=16,
                    fullatt_block_indexes=[1], tokens_per_second=2, hidden_act="silu"),
        action_expert_size=128, camera_size=32, prompt_tokens=24, instruction_tokens=40,
        config_extra=dict(image_token_id=500, video_token_id=501, vision_start_token_id=502,
                          vision_end_token_id=503),
    ),
}
