"""DreamZero's training step as a benchbay workload (``name: dreamzero``).

One step, as the official ``WANPolicyHead.forward`` runs it: frozen encoders (VAE, umT5, CLIP) on
the raw batch, flow-matching noise, the CausalWanModel forward in teacher forcing, video + action
losses. Real dimensions, random weights, synthetic batches of the real shapes.

The official step itself is these knobs together: ``attention=blockwise`` (its launch pattern),
``host_syncs=official``, ``kernels=official``, ``encoders=per_sample``, ``duplicate_vae_encode=true``
(with the harness's ``recompute=full``, ``compile=off``, ``precision=bf16``). Each of them is the
same function computed another way, so one knob at a time shows what it costs.

Upstream: ``WANPolicyHead.forward`` in
dreamzero0/dreamzero@ab790c198fbc:groot/vla/model/dreamzero/action_head/wan_flow_matching_action_tf.py;
the optimizer (HF Trainer ``adamw_torch``, betas 0.95/0.999, eps 1e-8) in
dreamzero0/dreamzero@ab790c198fbc:groot/vla/configs/conf.yaml;
lr 1e-5, weight decay 1e-5, bf16 and DeepSpeed ``zero2_offload`` in
dreamzero0/dreamzero@ab790c198fbc:scripts/train/droid_training_full_finetune_wan22.sh.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.profiler import record_function

from benchbay.collect import compute_fidelity
from benchbay.decode.patterns import DreamZeroFullClip
from benchbay.knobs import float8_inference
from benchbay.workloads.base import ModelParts
from benchbay.workloads.dreamzero import flops, mask
from benchbay.workloads.dreamzero.attention import attention_core
from benchbay.workloads.dreamzero.config import Preset, preset
from benchbay.workloads.dreamzero.declared import DreamZeroDeclaration
from benchbay.workloads.dreamzero.encoders import Conditioning, FrozenEncoders, HostSyncEncoders
from benchbay.workloads.dreamzero.flow import FlowMatching, HostSyncFlowMatching, action_loss
from benchbay.workloads.dreamzero.transformer import KERNELS, CausalWanModel
from benchbay.workloads.dreamzero.video import DroidCanvas
from benchbay.workloads.feed import open_feed, video_unavailable


class DreamZero(DreamZeroDeclaration):
    def __init__(self, params: dict[str, Any], knobs: dict[str, Any], device: torch.device):
        super().__init__(params, knobs, device)
        self.preset: Preset = preset(self.params["preset"], self.params["layers"])
        self.layout = self.preset.layout()
        self.encoders: FrozenEncoders | None = None  # frozen_encoders=in_step: made in build

    # --- protocol -----------------------------------------------------------------------------
    def skip_reason(self) -> str | None:
        if self.knob("attention") == "flex" and self.device.type == "cpu":
            return "attention=flex cannot train on CPU: FlexAttention has no backward there (forward only)"
        if self.knob("attention") == "flex" and self.knob("recompute") in ("selective", "attention") \
                and self.knob("compile") == "off":
            return (f"attention=flex with eager recompute={self.knob('recompute')} runs FlexAttention uncompiled "
                    "(the checkpoint's "
                    "dispatch mode turns torch.compile off there: the full score matrix is materialised); "
                    "use compile=blocks, which compiles the checkpoint with it")
        # RLinf checkpoints reentrantly (gradient_checkpointing_use_reentrant: True in
        # RLinf/RLinf@a3816b596478:examples/sft/config/libero_sft_dreamzero_5b.yaml, applied by
        # RLinf/RLinf@a3816b596478:rlinf/models/embodiment/dreamzero/patch/wan_causal_model_forward_train.py)
        if (self.knob("cuda_graph") == "attention" and self.knob("recompute") != "off"
                and self.knob("recompute_impl") == "non_reentrant"):
            return ("cuda_graph=attention inside non-reentrant activation checkpointing fails ('graph recording "
                    "observed an input tensor deallocate', PT #154306): use recompute_impl=reentrant, as RLinf does")
        if reason := video_unavailable(self):
            return reason
        if reason := float8_inference.skip_reason("encoders_float8", self.knob("encoders_float8"), self.device):
            return reason
        if self.knob("frozen_encoders") == "cached":
            in_step_only = ("encoders", "duplicate_vae_encode", "data", "encoders_compile", "vae_channels_last",
                            "trim_prompts", "encoders_float8")
            ignored = [f"{k}={self.knob(k)}" for k in in_step_only if self.knob(k) != self.knobs[k].default]
            if ignored:
                return f"frozen_encoders=cached runs no encoder in the step, so {', '.join(ignored)} has no effect"
        return None

    def build(self) -> ModelParts:
        kernels, official_syncs = KERNELS[self.knob("kernels")], self.knob("host_syncs") == "official"
        core = attention_core(self.knob("attention"), self.knob("cuda_graph") == "attention", self.layout)
        with torch.device(self.device):
            encoders = (HostSyncEncoders if official_syncs else FrozenEncoders)(self.preset)
            encoders = encoders.to(self._frozen_dtype()).requires_grad_(False).eval()
            model = CausalWanModel(self.preset.transformer, core, kernels)
        self.flow = (HostSyncFlowMatching if official_syncs else FlowMatching)(self.device)
        self.rope = kernels.rope(self.layout, self.preset.transformer, self.device)
        self.attention_mask = None  # blockwise: the core knows its blocks
        if self.knob("attention") == "flex":
            self.attention_mask = mask.block_mask(self.layout, self.device)
        elif self.knob("attention") == "sdpa":
            self.attention_mask = mask.dense_mask(self.layout, self.device)
            if self.knob("cuda_graph") == "attention":
                # a constant input of every graphed call: keep it in place rather than copy it per replay
                torch._dynamo.mark_static_address(self.attention_mask)
        if self.knob("data") == "video":
            self.feed = open_feed(self, DreamZeroFullClip, DroidCanvas(self.preset.sample))
        if self.knob("frozen_encoders") == "cached":
            g = self._generator(-1)
            self.cached = encoders.encode(self._video(g), *self._prompt(g), per_sample=False,
                                          duplicate_vae_encode=False)
            del encoders
            if self.device.type == "cuda":
                torch.cuda.empty_cache()
            return ModelParts(model=model, regions={"blocks": list(model.blocks)})
        if self.knob("vae_channels_last"):
            encoders.vae_channels_last()
        if self.knob("trim_prompts"):
            encoders.trim_prompts()
        facts = self._encoders_in_float8(encoders) if self.knob("encoders_float8") != "off" else {}
        if self.knob("encoders_compile"):
            encoders.compile_in_place()
        self.encoders = encoders
        return ModelParts(model=model, regions={"blocks": list(model.blocks)}, frozen=[encoders], facts=facts)

    def _encoders_in_float8(self, encoders: FrozenEncoders) -> dict[str, Any]:
        """Convert the encoders' linears to FP8 and say what it changed: their outputs on one batch of
        its own draws against theirs in bf16 just before, by compute fidelity's measures and thresholds
        (its reference runs the encoders the point has, so it cannot see them)."""
        g = self._generator(-2)
        inputs = (self._video(g), *self._prompt(g))

        def outputs() -> dict[str, torch.Tensor]:
            with torch.no_grad():
                cond = encoders.encode(*inputs, per_sample=False, duplicate_vae_encode=False)
            return {name: value.reshape(-1).float().clone() for name, value in vars(cond).items() if value is not None}

        before = outputs()
        counts = float8_inference.convert(encoders, self.knob("encoders_float8"))
        by_output, overall = compute_fidelity.compare(outputs(), before, {name: name for name in before})
        return {"encoders_float8_converted": counts["converted"], "encoders_float8_kept": counts["kept"],
                compute_fidelity.FROZEN_VERDICT: compute_fidelity.verdict(by_output, overall),
                "frozen_outputs_fidelity_by_output": by_output}

    def batch(self, step: int) -> dict[str, torch.Tensor]:
        """A micro-batch, deterministic from (seed, step), on the device. Keys:
        video (B, 3, 33, H, W) uint8 canvas, text_ids / text_mask (B, T) [in_step only];
        actions (B, 96, 32) in [-1, 1] zero-padded, action_mask (B, 96, 32), states (B, 4, 64);
        the flow-matching draws: frame_ids (B, 9), action_ids (B, 96), video_noise (B, z, 9, h, w),
        action_noise (B, 96, 32)."""
        g = self._generator(step)
        b, s, c = self.mbs, self.preset.sample, self.preset.transformer
        out: dict[str, torch.Tensor] = {}
        if self.knob("frozen_encoders") == "in_step":
            # data=video: the clip the loader decoded, pinned, copied while the GPU works
            out["video"] = self.feed.next().to(self.device, non_blocking=True) if self.feed else self._video(g)
            out["text_ids"], out["text_mask"] = self._prompt(g)
        valid_actions = torch.zeros(c.action_dim, device=self.device)
        valid_actions[: s.action_valid_dims] = 1
        out["action_mask"] = valid_actions.expand(b, s.actions, -1).contiguous()
        out["actions"] = (torch.rand(b, s.actions, c.action_dim, generator=g, device=self.device) * 2 - 1) \
            * out["action_mask"]
        states = torch.randn(b, s.states, c.state_dim, generator=g, device=self.device)
        states[..., s.state_valid_dims:] = 0
        out["states"] = states
        # drawn apart from the other tensors: host_syncs=official draws them on the CPU
        out["frame_ids"], out["action_ids"] = self.flow.sample_ids(
            b, self.layout.latent_frames, s.frames_per_block, self.layout.actions_per_block, self._seed(step) + 2**31)
        out["video_noise"] = torch.randn(b, self.preset.z_dim, self.layout.latent_frames, *self.preset.latent_hw,
                                         generator=g, device=self.device)
        out["action_noise"] = torch.randn(b, s.actions, c.action_dim, generator=g, device=self.device)
        return out

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        if self.knob("host_syncs") == "official":
            actions = batch["actions"]
            assert actions.min() >= -1.0 and actions.max() <= 1.0, "actions must be in [-1, 1]"
        with record_function("frozen_encoders"):
            cond = self._conditioning(batch)
        with record_function("forward"):
            noisy_video, video_target = self.flow.noise(cond.latents, batch["video_noise"], batch["frame_ids"], dim=2)
            noisy_actions, action_target = self.flow.noise(batch["actions"], batch["action_noise"],
                                                           batch["action_ids"], dim=1)
            video_pred, action_pred = model(
                noisy_video, cond.latents, self.flow.timesteps_of(batch["frame_ids"]), noisy_actions,
                self.flow.timesteps_of(batch["action_ids"]), batch["states"], cond.text, cond.image, self.rope,
                self.attention_mask, condition=cond.condition)
            dynamics = self.flow.video_loss(video_pred, video_target, batch["frame_ids"])
            actions = action_loss(action_pred, action_target, batch["action_mask"])
        return dynamics + actions, {"dynamics_loss": dynamics.detach(), "action_loss": actions.detach()}

    def optimizer(self, params: list[nn.Parameter]) -> torch.optim.Optimizer:
        # kernels=official: torch's default (foreach) AdamW, as the HF Trainer's adamw_torch; a CPU
        # optimizer (offload) is always the fused one, torch's vectorised CPU Adam
        on_cpu = bool(params) and all(p.device.type == "cpu" for p in params)
        fused = on_cpu or self.knob("kernels") == "fused"
        return torch.optim.AdamW(params, lr=1e-5, betas=(0.95, 0.999), eps=1e-8, weight_decay=1e-5, fused=fused)

    def block_linear_rows(self) -> dict[str, int]:
        """The sequence (video, action and state tokens) everywhere but the cross-attention's keys and
        values: the padded prompt's tokens (trimmed or not, umT5's output keeps its 512 rows) and CLIP's."""
        seq, text, image = self.layout.total, self.preset.sample.text_len, self.preset.clip_tokens
        return {**{f"self_attn.{n}": seq for n in "qkvo"}, "cross_attn.q": seq, "cross_attn.o": seq,
                "cross_attn.k": text, "cross_attn.v": text, "cross_attn.k_img": image, "cross_attn.v_img": image,
                "ffn.0": seq, "ffn.2": seq}

    def flops_per_sample(self) -> dict[str, float]:
        frozen = 0.0
        if self.knob("frozen_encoders") == "in_step":
            frozen = flops.frozen_forward_flops(self.preset, bool(self.knob("duplicate_vae_encode")),
                                                bool(self.knob("trim_prompts")))
        return {"train": 3 * flops.transformer_forward_flops(self.preset), "frozen": frozen}

    def extra_metrics(self) -> dict[str, Any]:
        video = self.feed.content() if self.feed else {}
        attention = self.encoders.attention() if self.encoders else None  # none with frozen_encoders=cached
        return {**video, "encoder_attention": attention, "preset": self.preset.name,
                "layers": self.preset.transformer.layers, "tokens_per_sample": self.layout.total,
                "attention_density": mask.allowed_pairs(self.layout) / self.layout.total ** 2}

    # --- helpers ------------------------------------------------------------------------------
    def _frozen_dtype(self) -> torch.dtype:
        # the encoders are inference-only: bf16 whenever training computes in bf16 (as the harness's
        # precision knob casts them too); built in it directly so cached encodes use it as well
        return torch.float32 if self.knob("precision") == "fp32" else torch.bfloat16

    def _seed(self, step: int) -> int:
        return int(self.knob("seed")) * 1_000_003 + step + 1

    def _generator(self, step: int) -> torch.Generator:
        return torch.Generator(self.device).manual_seed(self._seed(step))

    def _video(self, g: torch.Generator) -> torch.Tensor:
        """A random uint8 canvas clip (B, 3, frames, H, W)."""
        s = self.preset.sample
        return torch.randint(0, 256, (self.mbs, 3, s.frames, *s.canvas), generator=g, device=self.device,
                             dtype=torch.uint8)

    def _prompt(self, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """The padded prompt: token ids and attention mask (B, T)."""
        b, s = self.mbs, self.preset.sample
        lengths = torch.randint(*s.text_valid, (b, 1), generator=g, device=self.device)
        text_mask = (torch.arange(s.text_len, device=self.device) < lengths).long()
        text_ids = torch.randint(1, self.preset.t5["vocab_size"], (b, s.text_len), generator=g,
                                 device=self.device) * text_mask
        return text_ids, text_mask

    def _conditioning(self, batch: dict[str, torch.Tensor]) -> Conditioning:
        if self.knob("frozen_encoders") == "cached":
            return self.cached
        return self.encoders.encode(batch["video"], batch["text_ids"], batch["text_mask"],
                                    per_sample=self.knob("encoders") == "per_sample",
                                    duplicate_vae_encode=bool(self.knob("duplicate_vae_encode")))
