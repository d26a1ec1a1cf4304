"""compile (off | full | regions) and cuda_graph=step, which runs the compiled code as CUDA graphs
(inductor's cudagraph trees, ``mode="reduce-overhead"``; one ``cudagraph_mark_step_begin`` per step).

Regional compile uses ``Module.compile()``, in place, after recompute so that checkpointing sits
inside the compiled region (a CUDA-graphed region inside a checkpoint fails: PT #154306)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the workloads import the knobs' declarations, never the other way round
    from benchbay.knobs.parts import ModelParts


def apply(parts: ModelParts, value: str, cuda_graph: str) -> None:
    """Compile in place (``benchbay.launch.training.process_settings`` makes a recompile
    limit hit an error rather than a silent fall-back to eager)."""
    if value == "off":
        return
    mode = "reduce-overhead" if cuda_graph == "step" else None
    if value == "full":
        parts.model.compile(mode=mode)
        return
    for region in value.split("+"):
        for block in parts.regions[region]:
            block.compile(mode=mode)

