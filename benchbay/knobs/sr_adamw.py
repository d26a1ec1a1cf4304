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
    w: torch.Tensor  # its weights: a window of the flat storage the parameters are views of, or the scratch


class FlatSRAdamW(torch.optim.Optimizer):
    """AdamW over bf16 weights, stochastically rounded, stepping each bucket of parameters as one flat
    tensor through torchao's own update (``single_param_adam``). Every bucket has the same size (a
    large tensor is split over buckets), so a compiled update compiles once and no state is padding;
    the gradients' scratch is shared. Plain parameters become views of one flat storage, the buckets
    its windows, so that the update steps them in place: copying weights into a scratch and back
    moved 8 of the ~30 bytes a parameter that a step moves. A sharded parameter (a DTensor, whose
    shard FSDP2 keeps in its own storage) is copied in and out through a shared weights' scratch."""

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
        layout = _layout(params, size)
        self.in_place = _steps_in_place(params)
        # one scratch serves every bucket where the weights are copied
        windows = (_flat_weights(layout, size, device) if self.in_place
                   else [torch.zeros(size, dtype=torch.bfloat16, device=device)] * len(layout))
        self.buckets = [_Bucket(segments, state(size, True, device), state(size, False, device), w)
                        for segments, w in zip(layout, windows, strict=True)]
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
            # in place, the update moves the whole window: the absent gradients' weights go back after it
            kept = [(s.at(b.w), s.at(b.w).clone()) for s in b.segments if s.param.grad is None] if self.in_place else []
            if not self.in_place:
                torch._foreach_copy_([s.at(b.w) for s in stepped], [s.of(s.param) for s in stepped])
            self.g.zero_()  # the padding between tensors (and absent gradients) stay zero
            torch._foreach_copy_([s.at(self.g) for s in stepped], [s.of(s.param.grad) for s in stepped])
            self.update(b.w, self.g, self.step_count, b.m, b.v, None, self.lr, h.beta1, h.beta2,
                        h.weight_decay, h.eps, True, True)
            for window, weight in kept:
                window.copy_(weight)
            if not self.in_place:
                torch._foreach_copy_([s.of(s.param) for s in stepped], [s.at(b.w) for s in stepped])


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


def _steps_in_place(params: list[nn.Parameter]) -> bool:
    """Whether every parameter can become a view of the flat weights: none is a DTensor shard."""
    return not any(hasattr(p, "to_local") for p in params)


def _flat_weights(layout: list[list[_Segment]], size: int, device: torch.device) -> list[torch.Tensor]:
    """The buckets' windows of one storage of ``len(layout) * size`` bf16 elements holding every
    parameter at its place in the layout, each parameter made a view of it. A parameter split over
    buckets stays contiguous: its split falls on the end of one bucket and it goes on at the start of
    the next."""
    flat = torch.zeros(len(layout) * size, dtype=torch.bfloat16, device=device)
    for k, segments in enumerate(layout):
        for s in segments:
            if s.start == 0:
                at = k * size + s.offset
                view = flat[at:at + s.param.numel()].view_as(s.param)
                view.copy_(s.param.detach())
                s.param.data = view
    return list(flat.split(size))


def _aligned(n: int) -> int:
    return -(-n // BLOCK) * BLOCK
