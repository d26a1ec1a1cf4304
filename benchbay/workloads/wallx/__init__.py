"""Wall-X (WALL-OSS): a VLA on Qwen2.5-VL-3B with a per-token action expert and flow matching."""

from benchbay.workloads.wallx.workload import WallX

__all__ = ["WallX"]
