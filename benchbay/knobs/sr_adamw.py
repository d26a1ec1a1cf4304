"""benchbay's flattened stochastic-rounding AdamW (``optimizer: adamw_sr``, ``adamw_sr_8bit``,
``adamw_sr_4bit``): torchao's AdamW update over buckets of one size."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from benchbay.knobs.adam import AdamHyper
from benchbay.knobs.adam import local_tensor as _local

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
