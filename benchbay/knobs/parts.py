"""What the knobs act on: a workload's model and its named parts (``Workload.build`` returns it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # read without torch: a suite's declarations import the knobs
    from torch import nn


@dataclass
class ModelParts:
    """model:   the trained module; the root for whole-model compile, DDP and the last fully_shard.
    regions: named lists of repeated blocks (e.g. {"blocks": [...]}) that recompute, regional
             compile and per-block fully_shard act on; ``compile: a+b`` names regions.
    frozen:  modules run without grad inside the step (encoders); never optimised or sharded
             by the harness.
    facts:   what the build changed of the computation that compute fidelity's reference cannot
             see (DreamZero's FP8 encoders: their outputs' fidelity), kept in the record beside it.
    """

    model: nn.Module
    regions: dict[str, list[nn.Module]] = field(default_factory=dict)
    frozen: list[nn.Module] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)
