"""What the decode benchmarks measure: per-view and per-sample latency, CPU time and utilisation
of the decoding processes, peak memory, and a fingerprint of the decoded frames.

Frame equality across backends: decoders may convert YUV to RGB slightly differently, so two
backends agree when the mean absolute difference of their frames is at most ``FRAME_TOLERANCE``
(on the 0-255 scale). The fingerprint keeps an exact hash and a 4x4-cell thumbnail per frame and
channel; the thumbnails' mean absolute difference never exceeds the frames', so comparing
thumbnails against the same tolerance is a (necessary) check two records can make without frames.
"""

from __future__ import annotations

import hashlib
import math
import resource
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import psutil
import torch

from benchbay.analysis.stats import coefficient_of_variation
from benchbay.collect.system import SystemSampler, tree_cpu_seconds
from benchbay.record import CPU_UTIL, CPU_UTIL_CV, CPU_UTIL_MEAN

FRAME_TOLERANCE = 1.0
THUMB_CELLS = 4


@dataclass(frozen=True)
class ViewTiming:
    """One camera's part of a sample, as the decoding process measured it around the backend's
    calls: wall seconds opening the file (None when a kept-open decoder was reused), decoding its
    frames and closing the file (0 when it stays open), and the CPU seconds the process spent
    meanwhile (the decoder's own threads included; nothing else runs in a decoding process)."""

    open_s: float | None
    decode_s: float
    close_s: float
    cpu_s: float
    frames: int

    @property
    def total_s(self) -> float:
        return (self.open_s or 0.0) + self.decode_s + self.close_s


def distribution(prefix: str, values: Sequence[float]) -> dict[str, float | None]:
    """Median, p90, p99 and mean of ``values`` as ``<prefix>_median`` ...; None when empty."""
    if not values:
        return {f"{prefix}_{stat}": None for stat in ("median", "p90", "p99", "mean")}
    arr = np.asarray(values, dtype=np.float64)
    return {f"{prefix}_median": float(np.median(arr)), f"{prefix}_p90": float(np.percentile(arr, 90)),
            f"{prefix}_p99": float(np.percentile(arr, 99)), f"{prefix}_mean": float(arr.mean())}


def sample_wall_s(views: Sequence[ViewTiming], parallel: bool = False) -> float:
    """A sample's decoding wall time: its views one after another, or with ``parallel`` views
    (a thread each) its slowest view."""
    return max(view.total_s for view in views) if parallel else sum(view.total_s for view in views)


def latency_summary(samples: Sequence[Sequence[ViewTiming]], parallel: bool = False) -> dict[str, float | int | None]:
    """Per-view and per-sample latency and CPU of the decoding calls, decoder-open cost
    (milliseconds) and decoding speed of ``samples`` (each a list of its views' timings;
    ``parallel``: each sample's views decoded in threads of their own)."""
    views = [view for sample in samples for view in sample]
    opens = [1e3 * view.open_s for view in views if view.open_s is not None]
    busy = sum(view.total_s for view in views)
    frames = sum(view.frames for view in views)
    cpu = sum(view.cpu_s for view in views)
    return {**distribution("view_latency_ms", [1e3 * view.total_s for view in views]),
            **distribution("view_cpu_ms", [1e3 * view.cpu_s for view in views]),
            **distribution("view_decode_ms", [1e3 * view.decode_s for view in views]),
            **distribution("open_ms", opens),
            **distribution("sample_latency_ms", [1e3 * sample_wall_s(sample, parallel) for sample in samples]),
            "opens": len(opens), "views": len(views), "frames": frames,
            # one decoding process's speed: frames over the time it spent opening and decoding
            "decode_frames_per_s": frames / busy if busy else None,
            # the figure to compare across machines: frames per second of one busy core
            "frames_per_cpu_s": frames / cpu if cpu else None,
            # a view that opened its file (a cache miss) against one that reused an open decoder (a hit)
            "view_latency_ms_opened_median": _median([1e3 * v.total_s for v in views if v.open_s is not None]),
            "view_latency_ms_reused_median": _median([1e3 * v.total_s for v in views if v.open_s is None]),
            "decode_cpu_s_per_sample": sum(view.cpu_s for view in views) / len(samples) if samples else None}


def _median(values: Sequence[float]) -> float | None:
    return float(np.median(values)) if values else None


class CpuWindow:
    """CPU seconds and sampled utilisation (percent of one core) of this process and its children
    (DataLoader workers) between ``start`` and ``stop``; CV of the samples = CPU stability."""

    def __init__(self, interval_s: float = 0.1):
        self._proc = psutil.Process()
        self._sampler = SystemSampler(gpu_index=None, interval_s=interval_s)
        self._begin: tuple[float, float] | None = None
        self._end: tuple[float, float] | None = None

    def _cpu_seconds(self) -> float:
        """This process to the nanosecond, as the decoding calls are timed (/proc counts 10 ms
        ticks), and its children (workers) from /proc."""
        total = time.process_time()
        for child in self._proc.children():
            try:
                total += tree_cpu_seconds(child)
            except psutil.Error:  # exited meanwhile
                pass
        return total

    def start(self) -> CpuWindow:
        self._begin = (time.perf_counter(), self._cpu_seconds())
        self._sampler.start()
        return self

    def stop(self) -> None:
        self._end = (time.perf_counter(), self._cpu_seconds())
        self._sampler.stop()

    def __enter__(self) -> CpuWindow:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def summary(self) -> dict[str, float | None]:
        assert self._begin is not None and self._end is not None, "summary() after start() and stop()"
        wall, cpu = self._end[0] - self._begin[0], self._end[1] - self._begin[1]
        util = self._sampler.series[CPU_UTIL]
        cv = coefficient_of_variation(util)
        return {"cpu_time_s": cpu, "cpu_wall_s": wall,
                # the mean from the CPU seconds themselves; the samples give the spread
                CPU_UTIL_MEAN: 100.0 * cpu / wall if wall > 0 else None,
                CPU_UTIL_CV: None if math.isnan(cv) else cv,
                "cpu_util_samples": len(util)}


def peak_rss() -> dict[str, float | None]:
    """Peak resident memory of this process and of its largest finished child (a joined worker)."""
    gib_per_kib = 1 / 1024**2
    child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return {"peak_rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * gib_per_kib,
            "worker_peak_rss_gib": child * gib_per_kib if child else None}


def fingerprint(frames: Sequence[torch.Tensor]) -> dict[str, Any]:
    """Exact hash and per-frame thumbnails of a request's frames (each uint8 N, H, W, 3)."""
    digest = hashlib.sha256()
    thumbs = []
    for batch in frames:
        batch = batch.detach().cpu().contiguous()
        digest.update(batch.numpy().tobytes())
        pooled = torch.nn.functional.adaptive_avg_pool2d(batch.permute(0, 3, 1, 2).float(), THUMB_CELLS)
        thumbs.extend(round(x, 2) for x in pooled.flatten().tolist())
    return {"sha256": digest.hexdigest(), "thumb": thumbs, "tolerance": FRAME_TOLERANCE}


def mean_abs_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.detach().cpu().float() - b.detach().cpu().float()).abs().mean())

