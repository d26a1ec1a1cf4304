"""precision: bf16_mixed (fp32 master weights, bf16 compute), bf16 (pure bf16), fp32.

Frozen encoders run in bf16 whenever training computes in bf16, as the real pipelines do."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:  # the workloads import the knobs' declarations, never the other way round
    from benchbay.knobs.parts import ModelParts


def apply(parts: ModelParts, precision: str) -> None:
    if precision == "fp32":
        return
    for module in parts.frozen:
        module.to(torch.bfloat16)
    if precision == "bf16":
        parts.model.to(torch.bfloat16)


def autocast(precision: str, device: torch.device):
    """The context around the forward: bf16 autocast whenever training computes in bf16 (pure bf16
    too, so that fp32 inputs meet bf16 weights; under FSDP2's MixedPrecisionPolicy too, whose bf16
    parameters would otherwise meet fp32 inputs, tables and targets inside the model and the loss)."""
    if precision in ("bf16", "bf16_mixed"):
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()
