"""What an Adam-family optimizer's update is made of: the hyper-parameters of each parameter group,
read off any optimizer benchbay builds (the optimizer knob builds from them, update fidelity steps
its reference with them), and the local shard of a tensor that an update touches."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn


@dataclass(frozen=True)
class AdamHyper:
    lr: float
    beta1: float
    beta2: float
    eps: float
    weight_decay: float


def hyper_of(optimizer) -> list[tuple[list[nn.Parameter], AdamHyper]]:
    """The AdamW hyper-parameters of each of an optimizer's parameter groups."""
    groups = []
    for g in optimizer.param_groups:
        b1, b2 = g["betas"]
        groups.append((list(g["params"]), AdamHyper(float(g["lr"]), float(b1), float(b2), float(g["eps"]),
                                                    float(g["weight_decay"]))))
    return groups


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """The tensor this process holds (an FSDP2 parameter or gradient is a DTensor shard)."""
    return t.to_local() if hasattr(t, "to_local") else t
