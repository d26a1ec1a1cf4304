"""optimizer: which AdamW steps the trainable parameters, and what it keeps per parameter.

Every value takes the workload's hyper-parameters (lr, betas, eps, weight decay: DreamZero's lr
1e-5, Wall-X's 1e-4) and differs only in how it stores and rounds. Whether it trains like fp32
AdamW is measured on every record (benchbay.collect.fidelity), not assumed.

Bytes per parameter beside the weights (bf16_mixed: 4 B fp32 weights + 4 B fp32 gradients;
bf16: 2 + 2): the optimizer's own state below.
"""

from __future__ import annotations

import importlib
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


class FlatChoice(OptimizerChoice):
    """bf16 weights stochastically rounded by torchao's AdamW update, stepped a flattened bucket at a
    time (compiled once on CUDA): the real models have hundreds of tensors, many small, and torchao's
    per-tensor loop cost Wall-X 0.5 s a step on the H200. Subclasses say how m and v are kept."""

    def skip_reason(self, knobs, device):
        if knobs["precision"] != "bf16":
            return f"optimizer={self.name} rounds bf16 weights: it needs precision=bf16 (now {knobs['precision']})"
        return super().skip_reason(knobs, device)

    def build(self, params, hyper, workload_optimizer, knobs):
        return FlatSRAdamW(params, hyper, self.state, compiled=bool(params) and params[0].device.type == "cuda")

    def state(self, n: int, signed: bool, device: torch.device) -> torch.Tensor:
        raise NotImplementedError


class StochasticRoundingAdamW(FlatChoice):
    name, state_bytes = "adamw_sr", 8
    help = "bf16 weights stochastically rounded, fp32 AdamW state, flattened buckets: 8 B/param; needs precision=bf16"

    def state(self, n, signed, device):
        return torch.zeros(n, device=device)


class StochasticRoundingQuantised(FlatChoice):
    """m and v kept as one of torchao's block-wise quantised state subclasses."""

    subclass: ClassVar[str]  # module.Class under torchao.optim
    block: ClassVar[int]

    def state(self, n, signed, device):
        module, cls = self.subclass.split(".")
        subclass = getattr(importlib.import_module(f"torchao.optim.{module}"), cls)
        return subclass.zeros(n, signed, block_size=self.block, device=device)


class StochasticRounding8bit(StochasticRoundingQuantised):
    name, state_bytes, subclass, block = "adamw_sr_8bit", 2, "subclass_8bit.OptimState8bit", 256
    help = ("bf16 weights stochastically rounded, torchao's block-wise 8-bit state, flattened buckets: "
            "2 B/param; needs precision=bf16")


class StochasticRounding4bit(StochasticRoundingQuantised):
    name, state_bytes, subclass, block = "adamw_sr_4bit", 1, "subclass_4bit.OptimState4bit", 128
    help = ("bf16 weights stochastically rounded, torchao's block-wise 4-bit state, flattened buckets: "
            "1 B/param; needs precision=bf16")


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


CHOICES: dict[str, OptimizerChoice] = {c.name: c() for c in (
    TorchAdamW, StochasticRoundingAdamW, StochasticRounding8bit, StochasticRounding4bit, TorchaoSR, Torchao8bit,
    Torchao4bit, TorchaoFp8)}


def skip_reason(knobs: dict[str, Any], device: torch.device) -> str | None:
    return CHOICES[knobs["optimizer"]].skip_reason(knobs, device)


def build(name: str, params: list[nn.Parameter], workload_optimizer, knobs: dict[str, Any]):
    """The optimizer of this point, with the hyper-parameters of the workload's own AdamW."""
    (_, hyper), *others = hyper_of(workload_optimizer)
    if any(h != hyper for _, h in others):
        raise ValueError(f"optimizer={name}: the workload's parameter groups differ; only adamw keeps them")
    return CHOICES[name].build(params, hyper, workload_optimizer, knobs)


# --- the flattened step ----------------------------------------------------------------------------

#: elements per flattened bucket: the step's scratch is a few bytes an element of one bucket
BUCKET = 1 << 26
#: each tensor starts on a quantisation block of its own (8-bit: 256, 4-bit: 128), so no block mixes
#: two tensors' scales
BLOCK = 256


@dataclass
class _Segment:
    """Elements [start, start + length) of one parameter, at ``offset`` in its bucket."""

    param: nn.Parameter
    start: int
    length: int
    offset: int

    def of(self, tensor: torch.Tensor) -> torch.Tensor:
        return _local(tensor).view(-1)[self.start:self.start + self.length]

    def at(self, flat: torch.Tensor) -> torch.Tensor:
        return flat[self.offset:self.offset + self.length]


@dataclass
class _Bucket:
    segments: list[_Segment]
    m: torch.Tensor
    v: torch.Tensor


class FlatSRAdamW(torch.optim.Optimizer):
    """AdamW over bf16 weights, stochastically rounded, stepping each bucket of parameters as one flat
    tensor through torchao's own update (``single_param_adam``). Every bucket has the same size (a
    large tensor is split over buckets), so a compiled update compiles once and no state is padding;
    the scratch (weights and gradients of one bucket) is shared."""

    def __init__(self, params: list[nn.Parameter], hyper: AdamHyper, state, compiled: bool = False):
        from torchao.optim.adam import single_param_adam

        super().__init__(params, dict(lr=hyper.lr, betas=(hyper.beta1, hyper.beta2), eps=hyper.eps,
                                      weight_decay=hyper.weight_decay))
        self.hyper, self.step_count = hyper, torch.tensor(0.0)
        self.lr = torch.tensor(hyper.lr)
        self.update = torch.compile(single_param_adam, fullgraph=True, dynamic=False) if compiled else single_param_adam
        params = self.param_groups[0]["params"]
        if any(p.dtype != torch.bfloat16 for p in params):
            raise ValueError("optimizer=adamw_sr steps bf16 weights; a parameter is not bf16")
        size = min(BUCKET, sum(_aligned(_local(p).numel()) for p in params)) or BLOCK
        device = _local(params[0]).device if params else torch.device("cpu")
        self.buckets = [_Bucket(segments, state(size, True, device), state(size, False, device))
                        for segments in _layout(params, size)]
        self.w = torch.zeros(size, dtype=torch.bfloat16, device=device)
        self.g = torch.zeros(size, dtype=torch.bfloat16, device=device)

    @torch.no_grad()
    def step(self, closure=None) -> None:
        h = self.hyper
        self.step_count += 1
        for b in self.buckets:
            # a parameter without a gradient keeps its weight, as in torch's AdamW
            stepped = [s for s in b.segments if s.param.grad is not None]
            if not stepped:
                continue
            weights, w = [s.of(s.param) for s in stepped], [s.at(self.w) for s in stepped]
            self.g.zero_()  # the padding between tensors (and absent gradients) stay zero
            torch._foreach_copy_(w, weights)
            torch._foreach_copy_([s.at(self.g) for s in stepped], [s.of(s.param.grad) for s in stepped])
            self.update(self.w, self.g, self.step_count, b.m, b.v, None, self.lr, h.beta1, h.beta2,
                        h.weight_decay, h.eps, True, True)
            torch._foreach_copy_(weights, w)


def _layout(params: list[nn.Parameter], size: int) -> list[list[_Segment]]:
    """Parameters packed in order into buckets of ``size`` elements, each starting on a block."""
    buckets: list[list[_Segment]] = [[]]
    fill = 0
    for p in params:
        start, n = 0, _local(p).numel()
        while start < n:
            if fill == size:
                buckets.append([])
                fill = 0
            length = min(n - start, size - fill)  # a split falls on a block: fill and size are whole blocks
            buckets[-1].append(_Segment(p, start, length, fill))
            start, fill = start + length, min(size, fill + _aligned(length))
    return [b for b in buckets if b]


def _aligned(n: int) -> int:
    return -(-n // BLOCK) * BLOCK
