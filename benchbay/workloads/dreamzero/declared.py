"""DreamZero's declaration: the knobs, params and regions a suite may set (read without torch)."""

from __future__ import annotations

from benchbay.decode.clips import PRESETS as DATASET_PRESETS
from benchbay.knobs import Choice
from benchbay.knobs.video import VIDEO_KNOBS, VIDEO_PARAMS
from benchbay.workloads.base import TrainingWorkload
from benchbay.workloads.dreamzero.config import PRESETS


class DreamZeroDeclaration(TrainingWorkload):
    """What a suite may set for dreamzero (its knobs, params and regions), without its model code."""

    name = "dreamzero"
    regions = ("blocks",)
    params = {"preset": "dreamzero-5b", "layers": None, **VIDEO_PARAMS}
    param_values = {"preset": tuple(PRESETS), "video_preset": tuple(DATASET_PRESETS)}
    video_preset = "droid"
    graphs = ("off", "attention", "step")
    knobs = {
        "attention": Choice(("flex", "sdpa", "blockwise"),
                            "self-attention: flex = compiled FlexAttention with a BlockMask; sdpa = one SDPA call "
                            "with the dense boolean mask; blockwise = the official loop, one unmasked SDPA call per "
                            "block over its keys (18 per layer)"),
        "host_syncs": Choice(("none", "official"), "official: the official step's host synchronisations (schedule "
                             "drawn on the CPU, sigma and loss-weight look-ups through the CPU, range asserts, "
                             "prompt zeroing per sample); none: everything stays on the device"),
        "kernels": Choice(("fused", "official"), "official: element-wise work as the official code writes it "
                          "(WanRMSNorm unfused, complex128 RoPE per half, per-token float64 time embedding, "
                          "contiguous attention outputs, foreach AdamW); fused: benchbay's fused versions and AdamW"),
        "encoders": Choice(("batched", "per_sample"), "run the VAE and CLIP over the micro-batch at once, or one "
                           "sample at a time as the official code does (umT5 is batched in both)"),
        "duplicate_vae_encode": Choice((False, True), "also VAE-encode the first-frame-plus-zeros clip where the "
                                       "model does not use it (5B), as the official code does"),
        "frozen_encoders": Choice(("in_step", "cached"), "in_step: encoders run inside every step; cached: their "
                                  "outputs are computed once in build (offline caching), the encoders are dropped"),
        "encoders_compile": Choice((False, True), "compile the frozen encoders in place (the VAE's encoder, umT5, "
                                   "CLIP's vision tower): fused kernels instead of a Python call per layer"),
        "vae_channels_last": Choice((False, True), "the VAE's conv3d weights and input video in channels-last "
                                    "(NDHWC) memory format, the layout cuDNN's fastest bf16 convolutions use"),
        "trim_prompts": Choice((False, True), "run umT5 over the longest prompt's tokens (48) instead of the "
                               "512 the prompts are padded to, zeros after: the same text condition, ~10x less "
                               "umT5 work (upstream encodes all 512)"),
        "encoders_float8": Choice(("off", "rowwise", "tensorwise"), "FP8 inference (torchao, dynamic scales) of "
                                  "the frozen encoders' linears; their outputs on one batch against bf16 join compute "
                                  "fidelity (docs/fp8.md); needs CUDA compute capability >= 8.9"),
        # upstream pads to 512 (DefaultDataCollator's max_length) and encodes them all (WANPolicyHead.encode_prompt):
        # dreamzero0/dreamzero@ab790c198fbc:groot/vla/model/dreamzero/transform/dreamzero_cotrain.py
        # dreamzero0/dreamzero@ab790c198fbc:groot/vla/model/dreamzero/action_head/wan_flow_matching_action_tf.py
        **VIDEO_KNOBS,
    }
