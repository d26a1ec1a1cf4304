"""offload=optimizer without sharding: fp32 master weights and the optimizer step on the CPU,
as the official DreamZero baseline (DeepSpeed ZeRO-2 with CPU optimizer offload) runs it.
Under FSDP2 the same knob uses CPUOffloadPolicy instead (sharding.py)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


class CPUOffloadedOptimizer:
    """Gradients go to CPU master copies, the optimizer steps there, weights come back."""

    def __init__(self, params: list[nn.Parameter], make: Callable[[list[nn.Parameter]], torch.optim.Optimizer]):
        self.params = params
        self.master = [nn.Parameter(p.detach().to("cpu", torch.float32, copy=True)) for p in params]
        self.inner = make(self.master)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        for p, m in zip(self.params, self.master, strict=True):
            m.grad = None if p.grad is None else p.grad.detach().to("cpu", torch.float32)
        self.inner.step()
        with torch.no_grad():
            for p, m in zip(self.params, self.master, strict=True):
                p.copy_(m, non_blocking=True)
