"""offload=optimizer without sharding: fp32 master weights and the optimizer step on the CPU, as
DeepSpeed ZeRO-2 with CPU optimizer offload runs the official DreamZero baseline. The step is
torch's fused (vectorised) CPU AdamW, the workload's optimizer over CPU tensors.

ZeRO-2 splits the optimizer state over the ranks (``offload_shards``): each rank holds and steps
its 1/N share of the parameters and takes only that share's gradients; the other shares come
back from the other ranks' all-gather. One process here stands for one such rank: it steps its
share, the rest of the weights stay as they are. Under FSDP2 the same knob uses
CPUOffloadPolicy instead (sharding.py).

The baseline: ``DEEPSPEED_CFG`` (default ``zero2_offload``) in
dreamzero0/dreamzero@ab790c198fbc:scripts/train/droid_training_full_finetune_wan22.sh and
dreamzero0/dreamzero@ab790c198fbc:groot/vla/configs/deepspeed/zero2_offload.json."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


def shard(params: list[nn.Parameter], shards: int, index: int) -> list[nn.Parameter]:
    """The ``index``-th of ``shards`` contiguous groups of ``params`` of about equal size."""
    total = sum(p.numel() for p in params)
    out, seen = [], 0
    for p in params:
        if index * total <= seen * shards < (index + 1) * total:  # assigned by where it starts
            out.append(p)
        seen += p.numel()
    return out


class CPUOffloadedOptimizer:
    """Gradients of this rank's share go to pinned CPU fp32 master copies, the optimizer steps
    there, the updated weights come back."""

    def __init__(self, params: list[nn.Parameter], make: Callable[[list[nn.Parameter]], torch.optim.Optimizer],
                 shards: int = 1, rank: int = 0):
        self.params = params
        self.owned = shard(params, shards, rank % shards)
        pin = torch.cuda.is_available() and any(p.is_cuda for p in params)
        self.master = [nn.Parameter(torch.empty(p.shape, dtype=torch.float32, pin_memory=pin)) for p in self.owned]
        for m, p in zip(self.master, self.owned, strict=True):
            m.data.copy_(p.detach())
            m.grad = torch.empty_like(m.data, pin_memory=pin)
        self.inner = make(self.master)
        self.share = sum(p.numel() for p in self.owned) / max(sum(p.numel() for p in params), 1)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        for p, m in zip(self.owned, self.master, strict=True):
            if p.grad is None:
                m.grad.zero_()
            else:
                m.grad.copy_(p.grad, non_blocking=True)
        if torch.cuda.is_available():
            torch.cuda.synchronize()  # the pinned copies must land before the CPU reads them
        self.inner.step()
        with torch.no_grad():
            for p, m in zip(self.owned, self.master, strict=True):
                p.copy_(m, non_blocking=True)
