"""DreamZero (a World Action Model on a Wan video-diffusion transformer): its training step."""

from benchbay.workloads.dreamzero.workload import DreamZero

__all__ = ["DreamZero"]
