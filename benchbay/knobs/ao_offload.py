"""optimizer=ao_cpu_offload: torchao's ``CPUOffloadOptimizer`` (torch's fused AdamW on the CPU over a
pinned host copy of each parameter) with the step's gradient clipping applied to what it steps.

Its hooks copy each gradient to the host as backward makes it, before the step clips the device's
gradients, so stepping those copies as they are would skip the clip whenever the norm exceeds it.
``clip_grad_norm_`` clips on the device (torch's rule, whose norm the record keeps), waits for the
copies and scales them by the same coefficient."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from torch import nn

    from benchbay.knobs.adam import AdamHyper


class ClippedCPUOffload:
    def __init__(self, params: list[nn.Parameter], hyper: AdamHyper):
        from torchao.optim import CPUOffloadOptimizer

        adam = dict(lr=hyper.lr, betas=(hyper.beta1, hyper.beta2), eps=hyper.eps, weight_decay=hyper.weight_decay)
        self.inner = CPUOffloadOptimizer(list(params), torch.optim.AdamW, offload_gradients=False, fused=True, **adam)
        # the device parameters the model trains (torchao's own groups name the host copies)
        self.param_groups = [{"params": list(params), **adam}]

    def clip_grad_norm_(self, params: list[nn.Parameter], max_norm: float) -> torch.Tensor:
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        coefficient = float(torch.clamp(max_norm / (norm + 1e-6), max=1.0))
        if coefficient < 1.0:
            for event in self.inner.queue.values():  # the copies of this backward have landed
                event.synchronize()
            for host in self.inner.param_d2h_map.values():
                host.grad.mul_(coefficient)
        return norm

    def step(self) -> None:
        self.inner.step()

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.inner.zero_grad(set_to_none=set_to_none)
