"""The Wall-X training step (a VLA on Qwen2.5-VL-3B) at real dimensions: random weights, synthetic
LIBERO-shaped batches (2 cameras at 256 px -> 252 px -> 81 tokens each, ~60 text tokens, one
proprioception token, an action chunk of 32 or 10 steps).

Upstream: the step in ``Qwen2_5_VLMoEForAction.train_step_forward`` of
X-Square-Robot/wall-x@17335bcc3dd8:wall_x/model/qwen2_5_based/modeling_qwen2_5_vl_act.py;
the loop (``clip_grad_norm_`` at ``max_grad_norm``, default 1.0) and optimizer (AdamW, weight decay 0.1)
in ``QwenVlAct_Trainer.train_loop`` / ``load_model`` of
X-Square-Robot/wall-x@17335bcc3dd8:wall_x/trainer/qwen_vl_act_trainer.py;
``action_horizon`` 32 by default in X-Square-Robot/wall-x@17335bcc3dd8:wall_x/data/load_lerobot_dataset.py."""

from __future__ import annotations

import dataclasses

import torch
from torch.profiler import record_function
from transformers import Qwen2_5_VLForConditionalGeneration

from benchbay.decode.patterns import CurrentFrame
from benchbay.workloads.base import ModelParts
from benchbay.workloads.feed import open_feed, video_unavailable
from benchbay.workloads.wallx.attention import set_implementations, varlen_unavailable
from benchbay.workloads.wallx.batch import VisionInputs, WallXBatch, synthetic_batch
from benchbay.workloads.wallx.config import PRESETS
from benchbay.workloads.wallx.declared import WallXDeclaration
from benchbay.workloads.wallx.flops import forward_flops
from benchbay.workloads.wallx.layout import SequenceLayout, Token
from benchbay.workloads.wallx.model import WallXModel
from benchbay.workloads.wallx.video import QwenPatches


class WallX(WallXDeclaration):
    def __init__(self, params, knobs, device):
        super().__init__(params, knobs, device)
        if self.params["preset"] not in PRESETS:
            raise ValueError(f"wallx: unknown preset {self.params['preset']!r}; known: {sorted(PRESETS)}")
        for name, value in (("action_horizon", self.params["action_horizon"]), ("layers", self.params["layers"])):
            if (value is not None or name != "layers") and not (type(value) is int and value > 0):
                raise ValueError(f"wallx: {name} must be a positive integer, got {value!r}")
        self.preset = PRESETS[self.params["preset"]]
        self.layout = SequenceLayout.wallx(self.preset.prompt_tokens, self.preset.image_tokens, self.preset.cameras,
                                           self.preset.instruction_tokens, self.params["action_horizon"])
        self._vision: VisionInputs | None = None

    @property
    def layers(self) -> int:
        return self.params["layers"] or self.preset.text["num_hidden_layers"]

    def skip_reason(self) -> str | None:
        if reason := video_unavailable(self):
            return reason
        for name in ("attention", "vision_attention"):
            if self.knob(name) != "flash":
                continue
            reason = varlen_unavailable(self.device)
            if reason is None and self.knob("precision") == "fp32":
                reason = "FlashAttention takes bf16/fp16 only (precision=fp32)"
            if reason:
                return f"{name}=flash: {reason}"
        if self.knob("attention") == "flex" and self.device.type == "cpu":
            return "attention=flex: FlexAttention has no backward on CPU"
        if self.knob("attention") == "flex" and self.layout.length < 128:
            # seen on torch 2.11 / H200: 79 tokens fail to lower (NoValidChoicesError), 133 and 255 train
            return f"attention=flex: {self.layout.length} tokens per sample; flex training kernels need >= 128"
        return None

    def build(self) -> ModelParts:
        with torch.device(self.device):
            vlm = Qwen2_5_VLForConditionalGeneration(self.preset.vlm_config(self.params["layers"]))
            set_implementations(vlm, self.knob("attention"), self.knob("vision_attention"))
            model = WallXModel(vlm, self.preset, self.layout, self.knob("attention"), self.knob("lm_head"),
                               self.knob("loss_compile"))
        if self.knob("data") == "video":
            self.feed = open_feed(self, CurrentFrame, QwenPatches(self.preset))
        return ModelParts(model=model, regions={"backbone": list(vlm.model.language_model.layers),
                                                "vision": list(vlm.model.visual.blocks)})

    def batch(self, step: int) -> WallXBatch:
        images = self.mbs * self.preset.cameras
        if self._vision is None or len(self._vision.grid_thw) != images:
            self._vision = VisionInputs.for_images(self.preset, images, self.device)
        batch = synthetic_batch(self.preset, self._vision, self.mbs, self.params["action_horizon"], step, self.device)
        if self.feed is None:
            return batch
        # data=video: the cameras' current frames as the loader processed them, pinned, copied while the GPU works
        pixels = self.feed.next().flatten(0, 1).to(self.device, non_blocking=True)
        return dataclasses.replace(batch, pixel_values=pixels)

    def loss(self, model, batch):
        with record_function("forward"):
            text_loss, action_loss = model(batch)
        return text_loss + action_loss, {"text_loss": text_loss.detach(), "action_loss": action_loss.detach()}

    def optimizer(self, params):
        fused = bool(params) and all(p.device.type == "cuda" for p in params)
        return torch.optim.AdamW(params, lr=1e-4, weight_decay=0.01, fused=fused)

    def forward_flops(self) -> dict[str, float]:
        return forward_flops(self.preset, self.layout, self.layers, self.knob("lm_head"))

    def block_linear_rows(self) -> dict[str, int]:
        """The language layers' attention over the whole sequence, their experts over their tokens (the
        action tokens to the action expert, the rest to the VLM's MLP), the vision blocks over the patches."""
        seq, actions = self.layout.length, self.layout.count(Token.ACTION)
        patches = self.preset.cameras * self.preset.patch_grid ** 2
        mlp = ("gate_proj", "up_proj", "down_proj")
        return {**{f"self_attn.{p}_proj": seq for p in "qkvo"},
                **{f"mlp.experts.0.{n}": seq - actions for n in mlp}, **{f"mlp.experts.1.{n}": actions for n in mlp},
                "attn.qkv": patches, "attn.proj": patches, **{f"mlp.{n}": patches for n in mlp}}

    def flops_per_sample(self) -> dict[str, float]:
        # nothing is frozen: the vision tower, language model and action head all train
        return {"train": 3 * sum(self.forward_flops().values()), "frozen": 0.0}

    def extra_metrics(self) -> dict:
        video = self.feed.content() if self.feed else {}
        return {**video, "tokens_per_sample": self.layout.length,
                "image_tokens_per_sample": self.layout.count(Token.IMAGE),
                "text_tokens_per_sample": self.layout.count(Token.TEXT),
                **{f"forward_flops_{part}": flops for part, flops in self.forward_flops().items()}}
