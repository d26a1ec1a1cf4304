"""The generic knobs: one table of what a suite may set for any training workload.

Each knob's behaviour lives in its own module (precision.py, recompute.py, compile.py, ...);
``benchbay.launch.training.prepare`` applies them in one place, in torchtitan's order.
Workload-specific knobs are declared by the workload (``Workload.knobs``) and validated here too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from benchbay.knobs.optimizer import CHOICES as OPTIMIZERS


@dataclass(frozen=True)
class Choice:
    """A workload-specific knob: its allowed values (first is the default) and what it does."""

    values: tuple[Any, ...]
    help: str = ""

    @property
    def default(self) -> Any:
        return self.values[0]


@dataclass(frozen=True)
class Knob:
    """A generic knob: allowed values (None = any value of ``type``), default and meaning."""

    default: Any
    help: str
    values: tuple[Any, ...] | None = None
    type: type | None = None
    minimum: int = 1


GENERIC: dict[str, Knob] = {
    "mbs": Knob(1, "micro-batch size per process", type=int),
    "precision": Knob("bf16_mixed", "bf16_mixed: fp32 weights, gradients (4+4 B/param) + bf16 compute; bf16: bf16 "
                      "weights and gradients (2+2 B/param; the optimizer knob says how they are updated); fp32",
                      ("bf16_mixed", "bf16", "fp32")),
    "float8": Knob("off", "FP8 training (torchao) of the repeated blocks' linears: tensorwise (fastest), rowwise, "
                   "rowwise_with_gw_hp (weight gradients in bf16, most accurate); first and last layers, heads, adaLN "
                   "and small or odd shapes stay bf16 (docs/fp8.md); needs CUDA compute capability >= 8.9",
                   ("off", "tensorwise", "rowwise", "rowwise_with_gw_hp")),
    "float8_pad_rows": Knob(False, "float8=tensorwise or rowwise: a block linear whose rows in a batch are not a "
                            "multiple of 16 converts too, its input padded with zero rows that change no output "
                            "kept and no gradient (without it such a linear stays bf16)", (False, True)),
    "optimizer": Knob("adamw", "; ".join(f"{c.name}: {c.help}" for c in OPTIMIZERS.values()),
                      tuple(OPTIMIZERS)),
    "recompute": Knob("off", "activation checkpointing per block: full, selective (matmul and attention outputs "
                      "kept) or attention (only the attention outputs kept)",
                      ("off", "full", "selective", "attention")),
    "recompute_impl": Knob("non_reentrant", "how a checkpointed block is replayed: non_reentrant (torch's "
                           "recommended) or reentrant (RLinf's default: CUDA-graphed regions inside work; full only)",
                           ("non_reentrant", "reentrant")),
    "compile": Knob("off", "off | full (whole model) | <region>[+<region>] (regional compile of each block)"),
    "cuda_graph": Knob("off", "attention: the workload's attention helpers as CUDA graphs; "
                       "step: the compiled regions' forward+backward as CUDA graphs", ("off", "attention", "step")),
    "sharding": Knob("none", "data parallelism", ("none", "ddp", "fsdp2_full", "fsdp2_grad_op", "fsdp2_hybrid")),
    "replicate": Knob(1, "fsdp2_hybrid: replica groups (the rest of the world shards)", type=int),
    "offload": Knob("none", "optimizer: optimizer state and step on the CPU (the workload's optimizer over "
                    "CPU tensors: DreamZero's is torch's fused CPU AdamW)",
                    ("none", "optimizer")),
    "offload_shards": Knob(1, "offload=optimizer without sharding: ZeRO-2's split of the optimizer state over "
                           "this many ranks; this process steps its 1/N share (official DreamZero-5B: 4)", type=int),
    "alloc": Knob("default", "CUDA caching allocator setting", ("default", "expandable_segments")),
    "deterministic": Knob(False, "torch.use_deterministic_algorithms (strict: an op without a "
                          "deterministic kernel fails the point)", (False, True)),
    "cudnn_benchmark": Knob(False, "torch.backends.cudnn.benchmark: time cuDNN's convolution algorithms at each "
                            "new shape and keep the fastest (DreamZero's VAE conv3d, Qwen2.5-VL's patch embedding)",
                            (False, True)),
    "emulate_precision_casts": Knob(False, "torch._inductor.config.emulate_precision_casts: compiled code rounds "
                                    "to bf16 where eager does, so a compiled point does eager's arithmetic (to "
                                    "tell compile's rounding from a change of numerics); needs compile != off",
                                    (False, True)),
    "ddp_static_graph": Knob(False, "DDP static_graph", (False, True)),
    "ddp_gradient_as_bucket_view": Knob(False, "DDP gradient_as_bucket_view", (False, True)),
    "ddp_bucket_cap_mb": Knob(25, "DDP bucket_cap_mb", type=int),
    "ddp_find_unused_parameters": Knob(False, "DDP find_unused_parameters", (False, True)),
    "seed": Knob(0, "random seed of weights and batches", type=int, minimum=0),
}


def specs_for(workload_cls: type) -> dict[str, Knob | Choice]:
    """Every knob a point of this workload class may set: the generic ones it takes
    (``Workload.generic_knobs``: all of them for a training workload) and its own."""
    return {**{name: GENERIC[name] for name in workload_cls.generic_knobs}, **workload_cls.knobs}


def defaults_for(workload_cls: type) -> dict[str, Any]:
    return {name: spec.default for name, spec in specs_for(workload_cls).items()}


def check_value(workload_cls: type, name: str, value: Any) -> str | None:
    """None when ``value`` is allowed for knob ``name``, else what was expected."""
    spec = specs_for(workload_cls)[name]
    if name == "compile":
        return _check_compile(workload_cls, value)
    if spec.values is not None:
        if not any(type(value) is type(a) and value == a for a in spec.values):
            return f"one of {list(spec.values)}"
        return None
    if isinstance(spec, Knob) and spec.type is int:
        if not isinstance(value, int) or isinstance(value, bool) or value < spec.minimum:
            return "a positive integer" if spec.minimum == 1 else f"an integer >= {spec.minimum}"
    return None


def _check_compile(workload_cls: type, value: Any) -> str | None:
    regions = getattr(workload_cls, "regions", ())
    expected = f"'off', 'full' or regions joined by '+' from {list(regions)}"
    if not isinstance(value, str):
        return expected
    if value in ("off", "full"):
        return None
    parts = value.split("+")
    if all(p in regions for p in parts) and len(set(parts)) == len(parts):
        return None
    return expected
