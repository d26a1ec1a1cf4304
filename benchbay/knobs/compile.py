"""compile (off | full | regions) and cuda_graph=step, which runs the compiled code as CUDA graphs
(inductor's cudagraph trees, ``mode="reduce-overhead"``; one ``cudagraph_mark_step_begin`` per step).

Regional compile uses ``Module.compile()``, in place, after recompute so that checkpointing sits
inside the compiled region (a CUDA-graphed region inside a checkpoint fails: PT #154306)."""

from __future__ import annotations

import torch

from benchbay.workloads.base import ModelParts


def configure() -> None:
    # a silent fall-back to eager after too many recompiles would make a compiled point lie
    torch._dynamo.config.fail_on_recompile_limit_hit = True


def apply(parts: ModelParts, value: str, cuda_graph: str) -> None:
    if value == "off":
        return
    configure()
    mode = "reduce-overhead" if cuda_graph == "step" else None
    if value == "full":
        parts.model.compile(mode=mode)
        return
    for region in value.split("+"):
        for block in parts.regions[region]:
            block.compile(mode=mode)

