"""CUDA allocator snapshots of a point's steps: every allocation and free with its Python stack,
the segments and the out-of-memory event if one came (drag the pickle onto
https://pytorch.org/memory_viz). Recording slows every allocation, so a snapshot is taken in a run
of its own (spec ``memory_snapshot: true`` and ``memory_snapshot_dir``), never in a measured one."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from benchbay.collect import Collector, Figures, Window

MAX_ENTRIES = 100_000  # alloc/free events kept (a ring buffer): several steps of a large model


class MemorySnapshot(Collector):
    """A collector around the whole step loop: records the allocator's history from entry and dumps
    it on exit, also when a step raised (the OOM of a too-large batch is what one wants to see).
    Not requested (``out_dir`` None): does nothing. On a CPU device: does nothing, says why."""

    def __init__(self, out_dir: Path | None, device: torch.device, max_entries: int = MAX_ENTRIES):
        self.max_entries = max_entries
        self.path = None
        self.reason = None
        self._started = False
        if out_dir is not None:
            rank = os.environ.get("RANK", "0")
            self.path = Path(out_dir) / ("snapshot.pickle" if os.environ.get("WORLD_SIZE", "1") == "1"
                                         else f"snapshot.rank{rank}.pickle")
            if device.type != "cuda":
                self.reason = f"memory snapshots need a CUDA device (running on {device.type})"

    @property
    def recording(self) -> bool:
        return self.path is not None and self.reason is None

    def start(self) -> None:
        if self.recording and not self._started:
            self._started = True
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # Python frames only: symbolising C++ frames makes a dump take minutes. The stacks of
            # allocations only: taking a free's stack inside a checkpoint's recompute in backward fails
            # (H200, torch 2.11, Wall-X's chunked cross-entropy: SystemError from run_backward)
            torch.cuda.memory._record_memory_history(max_entries=self.max_entries, context="alloc",
                                                     stacks="python")

    def stop(self) -> None:
        if self._started:
            self._started = False
            try:
                torch.cuda.memory._dump_snapshot(str(self.path))
            finally:
                torch.cuda.memory._record_memory_history(enabled=None)

    def figures(self, window: Window) -> Figures:
        if self.path is None:
            return Figures()
        return Figures(extra={"memory_snapshot": str(self.path) if self.path.exists() else None,
                              "memory_snapshot_reason": self.reason})
