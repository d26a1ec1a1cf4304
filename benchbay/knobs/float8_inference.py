"""FP8 inference of frozen modules (DreamZero's ``encoders_float8``): torchao's dynamic float8
quantization (``quantize_`` with ``Float8DynamicActivationFloat8WeightConfig``: e4m3 weights and
activations, a scale a row or one a tensor, the activations' computed as each GEMM runs) of their
linears. The frozen encoders of DreamZero-5B are ~6B parameters (umT5-XXL, CLIP ViT-H, the Wan VAE)
run forward in every step; the trained blocks' FP8 is the ``float8`` knob (knobs/float8.py).

Which linears convert: every ``nn.Linear`` of the module whose in and out features are multiples of
16 (FP8 GEMMs need them); the rest stay bf16 and are counted. Convolutions (the VAE's conv3d, CLIP's
patch embedding) stay bf16: torchao's float8 inference covers linears. What it changes, the workload
measures: its encoders' outputs on one batch against themselves in bf16 (workloads/dreamzero).
Refused on a CPU and below compute capability 8.9 (no FP8 tensor cores).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from benchbay.knobs.float8 import MIN_CAPABILITY, below_capability


def skip_reason(name: str, recipe: str, device: torch.device) -> str | None:
    """Why knob ``name`` at ``recipe`` cannot run on ``device`` (None if it can)."""
    if recipe != "off" and device.type != "cuda":
        return (f"{name}={recipe} runs its GEMMs on FP8 tensor cores: it needs a CUDA GPU of compute capability "
                f"{MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]} or newer (running on {device.type})")
    return below_capability(name, recipe, device)


def plan(module: nn.Module) -> tuple[list[str], list[str]]:
    """The FQNs of ``module``'s linears that convert, and of those that stay bf16 (a side not a
    multiple of 16)."""
    converted, kept = [], []
    for fqn, child in module.named_modules():
        if isinstance(child, nn.Linear):
            out_features, in_features = child.weight.shape
            (kept if in_features % 16 or out_features % 16 else converted).append(fqn)
    return converted, kept


def convert(module: nn.Module, recipe: str) -> dict[str, Any]:
    """Quantize the planned linears in place; the counts a record keeps."""
    from torchao.quantization import Float8DynamicActivationFloat8WeightConfig, PerRow, PerTensor, quantize_

    converted, kept = plan(module)
    chosen = set(converted)
    granularity = PerRow() if recipe == "rowwise" else PerTensor()
    # set_inductor_config would switch on inductor's exhaustive coordinate-descent tuning for the whole
    # process, so the trained blocks' compile would benchmark every kernel in every direction: a first step
    # with the FP8 encoders did not end in 390 s on an H200; without it, warm-up was over in 225 s
    config = Float8DynamicActivationFloat8WeightConfig(granularity=granularity, set_inductor_config=False)
    quantize_(module, config, filter_fn=lambda _, fqn: fqn in chosen)
    return {"converted": len(converted), "kept": len(kept)}
