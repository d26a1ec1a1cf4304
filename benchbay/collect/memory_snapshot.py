"""CUDA allocator snapshots of a point's steps: every allocation and free with its Python stack,
the segments and the out-of-memory event if one came (drag the pickle onto
https://pytorch.org/memory_viz). Recording slows every allocation, so a snapshot is taken in a run
of its own (spec ``memory_snapshot: true`` and ``memory_snapshot_dir``), never in a measured one."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

MAX_ENTRIES = 100_000  # alloc/free events kept (a ring buffer): several steps of a large model


class MemorySnapshot:
    """Context manager around the step loop: records the allocator's history from entry and dumps
    it on exit, also when a step raised (the OOM of a too-large batch is what one wants to see).
    Not requested (``out_dir`` None): does nothing. On a CPU device: does nothing, says why."""

    def __init__(self, out_dir: Path | None, device: torch.device, max_entries: int = MAX_ENTRIES):
        self.max_entries = max_entries
        self.path = None
        self.reason = None
        if out_dir is not None:
            rank = os.environ.get("RANK", "0")
            self.path = Path(out_dir) / ("snapshot.pickle" if os.environ.get("WORLD_SIZE", "1") == "1"
                                         else f"snapshot.rank{rank}.pickle")
            if device.type != "cuda":
                self.reason = f"memory snapshots need a CUDA device (running on {device.type})"

    @property
    def recording(self) -> bool:
        return self.path is not None and self.reason is None

    def __enter__(self) -> MemorySnapshot:
        if self.recording:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # Python frames only: symbolising C++ frames makes a dump take minutes. The stacks of
            # allocations only: taking a free's stack inside a checkpoint's recompute in backward fails
            # (H200, torch 2.11, Wall-X's chunked cross-entropy: SystemError from run_backward)
            torch.cuda.memory._record_memory_history(max_entries=self.max_entries, context="alloc",
                                                     stacks="python")
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if self.recording:
            try:
                torch.cuda.memory._dump_snapshot(str(self.path))
            finally:
                torch.cuda.memory._record_memory_history(enabled=None)
        return False

    def summary(self) -> dict[str, Any]:
        if self.path is None:
            return {}
        return {"memory_snapshot": str(self.path) if self.path.exists() else None,
                "memory_snapshot_reason": self.reason}
