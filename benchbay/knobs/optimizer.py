"""optimizer: which AdamW steps the trainable parameters, and what it keeps per parameter.

Every value takes the workload's hyper-parameters (lr, betas, eps, weight decay: DreamZero's lr
1e-5, Wall-X's 1e-4) and differs only in how it stores and rounds. Whether it trains like fp32
AdamW is measured on every record (benchbay.collect.fidelity), not assumed.

Bytes per parameter beside the weights (bf16_mixed: 4 B fp32 weights + 4 B fp32 gradients;
bf16: 2 + 2): the optimizer's own state below.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from benchbay.collect.fidelity import AdamHyper, hyper_of
from benchbay.collect.fidelity import local_tensor as _local


class OptimizerChoice:
    """One value of the knob: builds the optimizer, or says why it cannot here."""

    name: ClassVar[str]
    state_bytes: ClassVar[float]  # optimizer state per parameter
    help: ClassVar[str]

    def skip_reason(self, knobs: dict[str, Any], device: torch.device) -> str | None:
        if knobs["offload"] != "none":
            return f"optimizer={self.name}: offload=optimizer steps the workload's own AdamW on the CPU (use adamw)"
        return None

    def build(self, params: list[nn.Parameter], hyper: AdamHyper, workload_optimizer, knobs: dict[str, Any]):
        raise NotImplementedError


class TorchAdamW(OptimizerChoice):
    name, state_bytes = "adamw", 8
    help = ("the workload's torch AdamW, state in the weights' dtype (bf16_mixed: fp32 master weights, faithful; "
            "bf16: pure bf16 rounded to nearest, lossy at small lr): 8 B/param (bf16_mixed), 4 B (bf16)")

    def skip_reason(self, knobs, device):
        return None

    def build(self, params, hyper, workload_optimizer, knobs):
        return workload_optimizer


class StochasticRoundingAdamW(OptimizerChoice):
    name, state_bytes = "adamw_sr", 8
    help = ("bf16 weights updated with stochastic rounding, fp32 AdamW state, one flattened step per bucket "
            "(benchbay's; compiled on CUDA): 8 B/param; needs precision=bf16")

    def skip_reason(self, knobs, device):
        if knobs["precision"] != "bf16":
            return f"optimizer={self.name} rounds bf16 weights: it needs precision=bf16 (now {knobs['precision']})"
        return super().skip_reason(knobs, device)

    def build(self, params, hyper, workload_optimizer, knobs):
        return FlatSRAdamW(params, hyper, compiled=bool(params) and params[0].device.type == "cuda")


class TorchaoChoice(OptimizerChoice):
    """torchao.optim's AdamW variants; bf16 weights are stochastically rounded (fp32 ones are not)."""

    cls_name: ClassVar[str]
    needs_bf16: ClassVar[bool] = False

    def skip_reason(self, knobs, device):
        if self.needs_bf16 and knobs["precision"] != "bf16":
            return f"optimizer={self.name} rounds bf16 weights: it needs precision=bf16 (now {knobs['precision']})"
        return super().skip_reason(knobs, device)

    def build(self, params, hyper, workload_optimizer, knobs):
        import torchao.optim

        cls = getattr(torchao.optim, self.cls_name)
        return cls(params, lr=hyper.lr, betas=(hyper.beta1, hyper.beta2), eps=hyper.eps,
                   weight_decay=hyper.weight_decay, bf16_stochastic_round=knobs["precision"] == "bf16")


class TorchaoSR(TorchaoChoice):
    name, state_bytes, cls_name, needs_bf16 = "ao_adamw_sr", 4, "_AdamW", True
    help = "torchao _AdamW(bf16_stochastic_round=True): bf16 weights and bf16 state, 4 B/param; needs precision=bf16"


class Torchao8bit(TorchaoChoice):
    name, state_bytes, cls_name = "ao_adamw8bit", 2, "AdamW8bit"
    help = "torchao AdamW8bit (block-wise 8-bit state), stochastic rounding over bf16 weights: 2 B/param"


class Torchao4bit(TorchaoChoice):
    name, state_bytes, cls_name = "ao_adamw4bit", 1, "AdamW4bit"
    help = "torchao AdamW4bit (block-wise 4-bit state), stochastic rounding over bf16 weights: 1 B/param"


class TorchaoFp8(TorchaoChoice):
    name, state_bytes, cls_name = "ao_adamw_fp8", 2, "AdamWFp8"
    help = "torchao AdamWFp8 (fp8 e4m3 state, CUDA compute capability >= 8.9): 2 B/param"

    def skip_reason(self, knobs, device):
        if device.type != "cuda" or torch.cuda.get_device_capability(device) < (8, 9):
            return f"optimizer={self.name} needs a CUDA GPU of compute capability 8.9 or newer (fp8)"
        return super().skip_reason(knobs, device)


CHOICES: dict[str, OptimizerChoice] = {c.name: c() for c in (TorchAdamW, StochasticRoundingAdamW, TorchaoSR,
                                                              Torchao8bit, Torchao4bit, TorchaoFp8)}


def skip_reason(knobs: dict[str, Any], device: torch.device) -> str | None:
    return CHOICES[knobs["optimizer"]].skip_reason(knobs, device)


def build(name: str, params: list[nn.Parameter], workload_optimizer, knobs: dict[str, Any]):
    """The optimizer of this point, with the hyper-parameters of the workload's own AdamW."""
    (_, hyper), *others = hyper_of(workload_optimizer)
    if any(h != hyper for _, h in others):
        raise ValueError(f"optimizer={name}: the workload's parameter groups differ; only adamw keeps them")
    return CHOICES[name].build(params, hyper, workload_optimizer, knobs)


# --- benchbay's stochastic-rounding AdamW ------------------------------------------------------------

#: elements per flattened bucket: the step's scratch is ~20 bytes an element of the largest bucket
BUCKET = 1 << 26


def _adamw_sr(w: torch.Tensor, g: torch.Tensor, m: torch.Tensor, v: torch.Tensor, noise: torch.Tensor,
              lr: float, beta1: float, beta2: float, eps: float, weight_decay: float, bc1: torch.Tensor,
              bc2: torch.Tensor
              ) -> torch.Tensor:
    """One AdamW update of flat bf16 weights ``w`` with fp32 state (updated in place), rounded
    stochastically back to bf16: 16 random low bits added to the fp32 result before truncation
    make each weight round up with the probability of its distance to the lower bf16 value."""
    g = g.float()
    m.lerp_(g, 1 - beta1)
    v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
    x = w.float() * (1 - lr * weight_decay) - (lr / bc1) * m / (v.sqrt() / bc2.sqrt() + eps)
    bits = (x.view(torch.int32) + noise) & -65536
    return bits.view(torch.float32).to(torch.bfloat16)


@dataclass
class _Bucket:
    params: list[nn.Parameter]
    m: torch.Tensor
    v: torch.Tensor


class FlatSRAdamW(torch.optim.Optimizer):
    """AdamW over bf16 weights with fp32 state and stochastic rounding, stepping each bucket of
    parameters as one flat tensor: the real models have hundreds of tensors, many small, and a
    per-tensor step (torchao's _AdamW) cost DreamZero-5B 0.33 s a step on the H200."""

    def __init__(self, params: list[nn.Parameter], hyper: AdamHyper, compiled: bool = False):
        super().__init__(params, dict(lr=hyper.lr, betas=(hyper.beta1, hyper.beta2), eps=hyper.eps,
                                      weight_decay=hyper.weight_decay))
        self.hyper, self.step_count = hyper, 0
        self.update = torch.compile(_adamw_sr, dynamic=True) if compiled else _adamw_sr
        self.buckets: list[_Bucket] = []
        current: list[nn.Parameter] = []
        for p in self.param_groups[0]["params"]:
            if p.dtype != torch.bfloat16:
                raise ValueError(f"optimizer=adamw_sr steps bf16 weights; a parameter is {p.dtype}")
            if current and sum(_local(q).numel() for q in current) + _local(p).numel() > BUCKET:
                self._add(current)
                current = []
            current.append(p)
        if current:
            self._add(current)

    def _add(self, params: list[nn.Parameter]) -> None:
        n = sum(_local(p).numel() for p in params)
        device = _local(params[0]).device
        self.buckets.append(_Bucket(params, torch.zeros(n, device=device), torch.zeros(n, device=device)))

    @torch.no_grad()
    def step(self, closure=None) -> None:
        h = self.hyper
        self.step_count += 1
        for b in self.buckets:
            # tensors, not floats: a compiled update would recompile for every new float
            bc1, bc2 = (torch.tensor(1 - beta ** self.step_count, device=b.m.device) for beta in (h.beta1, h.beta2))
            locals_ = [_local(p) for p in b.params]
            w = torch.cat([t.reshape(-1) for t in locals_])
            g = torch.cat([(_local(p.grad) if p.grad is not None else torch.zeros_like(t)).reshape(-1)
                           for p, t in zip(b.params, locals_, strict=True)])
            noise = torch.randint(0, 1 << 16, w.shape, dtype=torch.int32, device=w.device)
            out = self.update(w, g, b.m, b.v, noise, h.lr, h.beta1, h.beta2, h.eps, h.weight_decay, bc1, bc2)
            torch._foreach_copy_(locals_, [x.view_as(t) for x, t in
                                           zip(out.split([t.numel() for t in locals_]), locals_, strict=True)])
