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


def recipe_refusal(optimizer) -> str | None:
    """Why a workload's optimizer is not AdamW's update (None when it is): update fidelity's reference
    and every value of the optimizer knob but adamw apply AdamW's, so they would judge, or replace
    the recipe with, another optimizer than the one it trains with."""
    import torch

    if not isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW)):
        return f"the workload's optimizer is {type(optimizer).__name__}: benchbay models only Adam and AdamW"
    for i, g in enumerate(optimizer.param_groups):
        if g.get("amsgrad"):
            return f"the workload's {type(optimizer).__name__} has amsgrad=True (group {i}): benchbay models AdamW"
        if g.get("maximize"):
            return f"the workload's {type(optimizer).__name__} has maximize=True (group {i}): benchbay models AdamW"
        decoupled = isinstance(optimizer, torch.optim.AdamW) or g.get("decoupled_weight_decay", False)
        if g["weight_decay"] and not decoupled:  # L2 through the gradient, not AdamW's decay of the weights
            return (f"the workload's Adam couples weight_decay={g['weight_decay']} into the gradient (group {i}): "
                    "benchbay models AdamW's decoupled decay")
    return None


def hyper_of(optimizer) -> list[tuple[list[nn.Parameter], AdamHyper]]:
    """The AdamW hyper-parameters of each of an optimizer's parameter groups (of a workload's optimizer
    only where ``recipe_refusal`` finds none)."""
    groups = []
    for g in optimizer.param_groups:
        b1, b2 = g["betas"]
        groups.append((list(g["params"]), AdamHyper(float(g["lr"]), float(b1), float(b2), float(g["eps"]),
                                                    float(g["weight_decay"]))))
    return groups


def local_tensor(t: torch.Tensor) -> torch.Tensor:
    """The tensor this process holds (an FSDP2 parameter or gradient is a DTensor shard)."""
    return t.to_local() if hasattr(t, "to_local") else t
