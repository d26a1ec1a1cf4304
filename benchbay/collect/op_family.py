"""The op family of a kernel's or operator's name (gemm, attention, elementwise...): the profile
records each family's time over every kernel of its steps, and ``benchbay diff`` aligns two
profiles by it. Plain names and regular expressions only: the worker imports it."""

from __future__ import annotations

import re

#: op family by the first pattern a kernel's or operator's name matches (lower case); else "other"
FAMILIES = (
    ("communication", r"nccl|all_reduce|allgather|reduce_scatter|c10d"),
    ("attention", r"flash|fmha|attention|sdpa"),
    ("gemm", r"gemm|cutlass|nvjet|matmul|aten::mm|aten::addmm|aten::bmm|aten::linear|cublas"),
    ("memory", r"memcpy|memset|aten::copy_|aten::to\b|aten::contiguous"),
    ("norm", r"norm"),
    ("softmax / cross-entropy", r"softmax|cross_entropy|nll_loss|logsumexp"),
    ("optimizer", r"adam|foreach|multi_tensor|fused_sgd"),
    ("triton (fused)", r"triton"),
    ("elementwise", r"elementwise|vectorized|aten::(add|mul|sub|div|gelu|silu|relu)"),
)


def family(name: str) -> str:
    low = name.lower()
    return next((f for f, pattern in FAMILIES if re.search(pattern, low)), "other")
