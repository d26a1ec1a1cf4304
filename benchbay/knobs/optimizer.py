"""optimizer: which AdamW steps the trainable parameters, and what it keeps per parameter.

Every value takes the workload's hyper-parameters (lr, betas, eps, weight decay: DreamZero's lr
1e-5, Wall-X's 1e-4) and differs only in how it stores and rounds. Whether it trains like fp32
AdamW is measured on every record (benchbay.collect.fidelity), not assumed.

Bytes per parameter beside the weights (bf16_mixed: 4 B fp32 weights + 4 B fp32 gradients;
bf16: 2 + 2): the optimizer's own state below.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:  # the knob's values are declarations (a suite is validated without torch)
    import torch
    from torch import nn

    from benchbay.knobs.adam import AdamHyper


class OptimizerChoice:
    """One value of the knob: builds the optimizer, or says why it cannot here."""

    name: ClassVar[str]
    state_bytes: ClassVar[float]  # optimizer state per parameter
    help: ClassVar[str]
    #: rounds bf16 weights: precision=bf16 only (benchbay.knobs.rules, known before a point's process)
    needs_bf16: ClassVar[bool] = False

    def state_bytes_under(self, precision: str) -> float:
        """The state it keeps per parameter under ``precision`` (the tune's memory estimate reads it)."""
        return self.state_bytes

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

    def state_bytes_under(self, precision: str) -> float:
        return self.state_bytes / 2 if precision == "bf16" else self.state_bytes

    def skip_reason(self, knobs, device):
        return None

    def build(self, params, hyper, workload_optimizer, knobs):
        return workload_optimizer


class FlatChoice(OptimizerChoice):
    """bf16 weights stochastically rounded by torchao's AdamW update, stepped a flattened bucket at a
    time (compiled once on CUDA): the real models have hundreds of tensors, many small, and torchao's
    per-tensor loop cost Wall-X 0.5 s a step on the H200. Subclasses say how m and v are kept."""

    needs_bf16 = True

    def build(self, params, hyper, workload_optimizer, knobs):
        from benchbay.knobs.sr_adamw import FlatSRAdamW

        return FlatSRAdamW(params, hyper, self.state, compiled=bool(params) and params[0].device.type == "cuda")

    def state(self, n: int, signed: bool, device: torch.device) -> torch.Tensor:
        raise NotImplementedError


class StochasticRoundingAdamW(FlatChoice):
    name, state_bytes = "adamw_sr", 8
    help = "bf16 weights stochastically rounded, fp32 AdamW state, flattened buckets: 8 B/param; needs precision=bf16"

    def state(self, n, signed, device):
        import torch

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
        import torch

        if device.type != "cuda" or torch.cuda.get_device_capability(device) < (8, 9):
            return f"optimizer={self.name} needs a CUDA GPU of compute capability 8.9 or newer (fp8)"
        return super().skip_reason(knobs, device)


class TorchaoCPUOffload(OptimizerChoice):
    name, state_bytes = "ao_cpu_offload", 0
    help = ("torchao CPUOffloadOptimizer: torch's fused AdamW on the CPU over a pinned fp32 host copy of each "
            "parameter, its gradient and state (16 B/param of host memory, 0 on the GPU), the clip applied to "
            "the copies; needs CUDA, precision=bf16_mixed or fp32 and sharding=none")

    def skip_reason(self, knobs, device):
        if device.type != "cuda":
            return f"optimizer={self.name}: torchao's CPUOffloadOptimizer needs a CUDA device (now {device.type})"
        if knobs["precision"] not in ("bf16_mixed", "fp32"):
            # its host copy takes the weights' dtype: bf16 weights would be stepped rounded to nearest
            return f"optimizer={self.name} steps fp32 host copies: it needs precision=bf16_mixed or fp32"
        if knobs["sharding"] != "none":
            return f"optimizer={self.name} steps whole parameters of one GPU: it needs sharding=none"
        return super().skip_reason(knobs, device)

    def build(self, params, hyper, workload_optimizer, knobs):
        from benchbay.knobs.ao_offload import ClippedCPUOffload

        return ClippedCPUOffload(params, hyper)


CHOICES: dict[str, OptimizerChoice] = {c.name: c() for c in (
    TorchAdamW, StochasticRoundingAdamW, StochasticRounding8bit, StochasticRounding4bit, TorchaoSR, Torchao8bit,
    Torchao4bit, TorchaoFp8, TorchaoCPUOffload)}


def skip_reason(knobs: dict[str, Any], device: torch.device) -> str | None:
    return CHOICES[knobs["optimizer"]].skip_reason(knobs, device)


def build(name: str, params: list[nn.Parameter], workload_optimizer, knobs: dict[str, Any]):
    """The optimizer of this point, with the hyper-parameters of the workload's own AdamW."""
    from benchbay.knobs.adam import hyper_of

    (_, hyper), *others = hyper_of(workload_optimizer)
    if any(h != hyper for _, h in others):
        raise ValueError(f"optimizer={name}: the workload's parameter groups differ; only adamw keeps them")
    return CHOICES[name].build(params, hyper, workload_optimizer, knobs)
