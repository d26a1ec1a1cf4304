"""Peak memory of a measured window: the torch allocator, the device as NVML sees it, host RSS."""

from __future__ import annotations

import resource

import psutil
import torch

from benchbay.collect import Collector, Figures, Window, nvml
from benchbay.record import (
    ALLOC_RETRIES,
    DEVICE_MEM_TOTAL_GIB,
    HOST_RSS_GIB,
    MEM_ALLOCATED_GIB,
    MEM_RESERVED_GIB,
    NVML_MEM_USED_GIB,
    PEAK_HOST_RSS_GIB,
    PEAK_MEM_ALLOCATED_GIB,
    PEAK_MEM_RESERVED_GIB,
)

GIB = 1024**3


def reset(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        torch.cuda.reset_accumulated_memory_stats(device)  # retries and OOMs of the window only


def peak(device: torch.device) -> dict[str, float | int | None]:
    """Peaks since the last ``reset`` (allocator counters miss the CUDA context: NVML shows it)."""
    out: dict[str, float | int | None] = {
        PEAK_MEM_ALLOCATED_GIB: None, PEAK_MEM_RESERVED_GIB: None, ALLOC_RETRIES: None,
        "num_ooms": None, DEVICE_MEM_TOTAL_GIB: None, NVML_MEM_USED_GIB: None,
        HOST_RSS_GIB: psutil.Process().memory_info().rss / GIB,
        # the process's peak since it started (the OS keeps no window): a CPU point's peak memory
        PEAK_HOST_RSS_GIB: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GIB,
    }
    if device.type == "cuda":
        stats = torch.cuda.memory_stats(device)
        out.update(
            peak_mem_allocated_gib=stats.get("allocated_bytes.all.peak", 0) / GIB,
            peak_mem_reserved_gib=stats.get("reserved_bytes.all.peak", 0) / GIB,
            alloc_retries=stats.get("num_alloc_retries", 0),
            num_ooms=stats.get("num_ooms", 0),
            device_mem_total_gib=torch.cuda.get_device_properties(device).total_memory / GIB,
            nvml_mem_used_gib=nvml.memory_used_gib(device.index or 0),
        )
    return out


def current(device: torch.device) -> dict[str, float | None]:
    """Memory in use right now (recorded with an OOM)."""
    if device.type != "cuda":
        return {MEM_ALLOCATED_GIB: None, MEM_RESERVED_GIB: None,
                HOST_RSS_GIB: psutil.Process().memory_info().rss / GIB}
    return {MEM_ALLOCATED_GIB: torch.cuda.memory_allocated(device) / GIB,
            MEM_RESERVED_GIB: torch.cuda.memory_reserved(device) / GIB,
            PEAK_MEM_ALLOCATED_GIB: torch.cuda.max_memory_allocated(device) / GIB,
            DEVICE_MEM_TOTAL_GIB: torch.cuda.get_device_properties(device).total_memory / GIB}


class PeakMemory(Collector):
    """The peaks of its window: reset at ``start``, read at ``stop``."""

    def __init__(self, device: torch.device):
        self.device = device
        self._peak: dict[str, float | int | None] = {}

    def start(self) -> None:
        reset(self.device)

    def stop(self) -> None:
        if not self._peak:
            self._peak = peak(self.device)

    def figures(self, window: Window) -> Figures:
        return Figures(metrics=dict(self._peak))
