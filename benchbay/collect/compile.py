"""What torch.compile did in a point's process: graph breaks, recompiles, graphs, CUDA-graph skips,
and how many compiled graphs came from the compile cache (a first step with cache hits is not a
cold compile, so it says nothing of compile time)."""

from __future__ import annotations

import sys
from typing import Any

from benchbay.collect import Collector, Figures, Window

COUNTERS = ("graph_breaks", "recompiles", "compiled_graphs", "cudagraph_skips", "compile_cache_hits")
REASONS = 5  # distinct graph-break reasons a record keeps


def compile_counters() -> dict[str, Any]:
    """What torch.compile did in this process so far (None when it compiled nothing):
    ``graph_breaks``: places where a break split a compiled frame (dynamo resumes after each in a
    function of its own) plus frames dynamo gave up on and left eager (a break in a loop);
    ``recompiles``: compilations dynamo gave a recompile reason for (its metrics keep the last 64);
    ``compiled_graphs``: graphs compiled; ``cudagraph_skips``: graphs inductor did not run as CUDA
    graphs (an input on the CPU, a mutation...) although asked to; ``compile_cache_hits``: graphs
    inductor or AOTAutograd loaded from ``TORCHINDUCTOR_CACHE_DIR`` instead of compiling; and, where
    there were breaks, ``graph_break_reasons``: the first line of each distinct reason dynamo gave,
    with its count (a compiled region that breaks runs in part eager: the reason says why)."""
    none = dict.fromkeys(COUNTERS)
    if "torch._dynamo" not in sys.modules:
        return none
    from torch._dynamo.utils import counters, get_compilation_metrics

    frames = counters["frames"]
    if not frames["total"]:
        return none
    metrics = get_compilation_metrics()
    reasons = sorted(counters["graph_break"].items(), key=lambda kv: -kv[1])[:REASONS]
    return {"graph_breaks": len(counters["resumes"]) + frames["total"] - frames["ok"],
            "recompiles": sum(1 for m in metrics if m.recompile_reason),
            "compiled_graphs": counters["stats"]["unique_graphs"],
            "cudagraph_skips": sum(1 for m in metrics if getattr(m, "cudagraph_skip_reason", None)),
            "compile_cache_hits": counters["inductor"]["fxgraph_cache_hit"]
            + counters["aot_autograd"]["autograd_cache_hit"],
            **({"graph_break_reasons": [f"{reason.strip().splitlines()[0]} (x{n})" for reason, n in reasons]}
               if reasons else {})}


class CompileCounters(Collector):
    """What torch.compile did in this process up to the figures (``compile_counters``)."""

    def figures(self, window: Window) -> Figures:
        return Figures(extra=compile_counters())
