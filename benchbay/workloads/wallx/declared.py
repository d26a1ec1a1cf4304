"""Wall-X's declaration: the knobs, params and regions a suite may set (read without torch)."""

from __future__ import annotations

from benchbay.decode.clips import PRESETS as DATASET_PRESETS
from benchbay.knobs import Choice
from benchbay.knobs.video import VIDEO_KNOBS, VIDEO_PARAMS
from benchbay.workloads.base import TrainingWorkload


class WallXDeclaration(TrainingWorkload):
    """What a suite may set for wallx (its knobs, params and regions), without its model code."""

    name = "wallx"
    regions = ("backbone", "vision")   # the 36 decoder layers; the 32 vision blocks
    knobs = {
        "attention": Choice(("sdpa", "eager", "flash", "flex"),
                            "language model attention: sdpa/eager with a 4-D mask, flash = torch varlen_attn "
                            "(FlashAttention-2; CUDA, bf16), flex = FlexAttention with a BlockMask (always compiled)"),
        "vision_attention": Choice(("sdpa", "eager", "flash"),
                                   "vision tower windowed attention: sdpa/eager issue one call per window "
                                   "(host sync per layer); flash packs all windows into one varlen call"),
        "lm_head": Choice(("all", "text", "chunked"),
                          "all: lm_head over every token, as the official step; text: over the text tokens only; "
                          "chunked: text tokens, 1024 rows at a time, fp32 logits recomputed in backward"),
        "loss_compile": Choice((False, True),
                               "compile the text cross-entropy (lm_head, fp32 log-softmax; per chunk when "
                               "chunked): the fp32 logits are never written"),
        **VIDEO_KNOBS,
    }
    params = {"preset": "wallx-3b", "action_horizon": 32, "layers": None, **VIDEO_PARAMS}
    param_values = {"video_preset": tuple(DATASET_PRESETS)}  # its model presets need transformers to list
    video_preset = "libero"
