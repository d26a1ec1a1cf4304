"""The decoder comparison as a workload: one step = one training sample (``mbs`` samples) decoded
by one backend, driven as a real loader drives it (``mode: loader``) or its best way
(``mode: best``), through a torch DataLoader with ``num_workers`` workers, optionally while a
foreground loop stands in for the training step (``interference: on``).

The dataset is synthetic (generated once per spec and seed into a cache, see
``benchbay.decode.clips``; ``params.layout`` v2.1 or v3.0) unless ``params.root`` points at a LeRobot
v2.1 or v3.0 dataset on disk (told by its meta/info.json) or at a plain folder of video files
(``benchbay.decode.folder``); either is read, and a bad one refused, before any step.

What a record's figures hold: per view, the wall and CPU time of the backend's own calls (open,
decode, close; ``view_latency_ms_*``, ``view_cpu_ms_*``), measured in a decoding process set up as a
DataLoader worker (torch with one intra-op thread; the main process too with ``num_workers`` 0);
``loader_overhead_*``, what the sample pipeline costs beyond those calls (collation, conversions,
queueing, the harness); ``cpu_s_per_sample``, everything the decoding processes spent; and the
dataset's ``kb_per_frame`` and ``bits_per_pixel``, which decoding speed depends on.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Any

import torch

from benchbay.decode.backends import BACKENDS, DecodeError, Settings, backend
from benchbay.decode.backends.ffmpeg import TorchCodec
from benchbay.decode.backends.nvidia import nvdec_codec_reason
from benchbay.decode.clips import PRESETS, ClipSpec, cached_dataset, source_frame
from benchbay.decode.folder import open_videos
from benchbay.decode.loader import DecodeDataset, Foreground, make_loader, next_batch
from benchbay.decode.measure import (
    CpuWindow,
    ViewTiming,
    fingerprint,
    latency_summary,
    mean_abs_diff,
    peak_rss,
    sample_wall_s,
)
from benchbay.decode.patterns import PATTERNS
from benchbay.record import DELIVERED_RATE
from benchbay.workloads.decode_declared import DecodeDeclaration

#: foreground steps timed alone before the loader starts and after it stops (the interference baseline)
BASELINE_STEPS = 20


@dataclass(frozen=True)
class Window:
    """Where the measured window starts: step and sample indices, and the time it began."""

    first_step: int
    first_sample: int
    start: float


class Decode(DecodeDeclaration):
    def __init__(self, params: dict[str, Any], knobs: dict[str, Any], device: torch.device):
        super().__init__(params, knobs, device)
        k = self.knob_values
        self.backend_name = k["backend"]
        self.settings = Settings(mode=k["mode"], threads=None if k["threads"] == "mode" else k["threads"],
                                 device=k["device"], seek_mode=None if k["seek_mode"] == "mode" else k["seek_mode"],
                                 keep_open=k["keep_open"],
                                 decoder_cache=None if k["decoder_cache"] == "mode" else k["decoder_cache"])
        self.seed = int(k["seed"])

    # ---- protocol -------------------------------------------------------------------------------
    def skip_reason(self) -> str | None:
        cls = BACKENDS[self.backend_name]
        reason = (cls.unavailable_reason(self.settings.device) or cls.seek_mode_reason(self.settings)
                  or cls.decoder_cache_reason(self.settings))
        if reason is None and self.settings.device == "cuda" and not issubclass(cls, TorchCodec):
            # torchcodec hands such a file to the CPU and says so (the record's cuda_fallback); the
            # others would fail, or be measured under a GPU label for a CPU decode
            reason = next(filter(None, map(nvdec_codec_reason, self._codecs())), None)
        return reason

    def _codecs(self) -> set[str]:
        if self.params["root"]:
            dataset = open_videos(self.params["root"])
            return {dataset.codec(camera) for camera in dataset.cameras}
        return {self.clip_spec().codec}

    def clip_spec(self) -> ClipSpec:
        p = self.params
        return PRESETS[self.knob_values["preset"]].replace(
            episode_frames=p["episode_frames"], episodes=p["episodes"], height=p["height"], width=p["width"],
            codec=p["codec"], gop=p["gop"], crf=p["crf"], preset=p["encoder_preset"], grain=p["grain"],
            noise=p["noise"], layout=p["layout"], episodes_per_file=p["episodes_per_file"])

    def setup(self) -> None:
        k = self.knob_values
        self.dataset = open_videos(self.params["root"] or cached_dataset(self.clip_spec(), self.seed))
        self.pattern = PATTERNS[k["pattern"]](self.dataset, self.seed)
        self.decoder = backend(self.backend_name, self.settings)
        self._parallel_views = bool(self.decoder.options.get("view_threads"))
        self._probe()
        self.foreground = Foreground(self.device) if k["interference"] == "on" else None
        data = DecodeDataset(self.pattern, self.backend_name, self.settings)
        self.loader = make_loader(data, batch_size=self.mbs, num_workers=k["num_workers"],
                                  prefetch_factor=k["prefetch_factor"], pin_memory=k["pin_memory"])
        self.foreground_alone = self._foreground_alone()
        self.foreground_loaded: list[float] = []
        self.data_wait: list[float] = []
        self.pipeline_wait: list[float] = []  # num_workers 0: per step, the wait beyond the decoding calls
        self.samples: list[list[ViewTiming]] = []  # per delivered sample, its views
        self.first_frames: list[torch.Tensor] | None = None
        self.cpu = CpuWindow()
        self.window: Window | None = None
        self._batches = None

    def _probe(self) -> None:
        """Open every camera's first video once, so a codec the backend cannot read fails here with
        the file and codec named, before any worker starts; on cuda, keep what the library says of
        a CPU fallback per camera (``cuda_fallback``)."""
        self.cuda_fallback: dict[str, str | None] = {}
        for camera in self.dataset.cameras:
            path = self.dataset.video_path(camera, 0)
            try:
                handle = self.decoder.open(path)
            except DecodeError as exc:
                raise DecodeError(exc.backend, path, f"{self.dataset.codec(camera)} video: {exc.reason}") from exc
            if self.settings.device == "cuda":
                self.cuda_fallback[camera] = handle.fallback()
            handle.close()

    def _foreground_alone(self) -> list[float]:
        if self.foreground is None:
            return []
        for _ in range(3):
            self.foreground.step()
        return [self.foreground.step() for _ in range(BASELINE_STEPS)]

    def _backlog(self) -> int:
        """Samples the workers can hold ready (prefetch_factor batches each): delivered from the
        queue at once, they would pass for decoding speed."""
        return self.knob_values["num_workers"] * self.knob_values["prefetch_factor"] * self.mbs

    def _warm_samples(self) -> int:
        """Samples left out of every figure: the configured warm-up, and at least each worker's
        first sample (it pays for the worker's start and imports) plus the workers' backlog."""
        first = self.knob_values["num_workers"] * self.mbs
        return max(int(self.params["warmup_samples"]), first + self._backlog())

    def step(self, index: int) -> float | None:
        if self._batches is None:
            self._batches = iter(self.loader)
        if self.foreground is not None:
            self.foreground_loaded.append(self.foreground.step())
        start = time.perf_counter()
        batch = next_batch(self._batches, self.loader)
        self.last_step_end = time.perf_counter()
        self.data_wait.append(self.last_step_end - start)
        if not self.loader.num_workers:
            decoding = sum(sample_wall_s(sample, self._parallel_views) for sample in batch["timings"])
            self.pipeline_wait.append(self.data_wait[-1] - decoding)
        if self.first_frames is None:
            self.first_frames = [views[0] for views in batch["frames"]]
        self.samples.extend(batch["timings"])
        if self.window is None and len(self.samples) >= self._warm_samples():
            # the measured window: from the next step on
            self.window = Window(len(self.data_wait), len(self.samples), self.last_step_end)
            self.cpu.start()
        return None

    def extra_metrics(self) -> dict[str, Any]:
        if self.window is None:
            raise RuntimeError(f"decode: {len(self.samples)} samples do not get past the warm-up of "
                               f"{self._warm_samples()} samples (num_workers x (prefetch_factor + 1) x mbs); "
                               f"measure more steps")
        self.cpu.stop()
        self._batches = None  # joins the workers, so their peak RSS is known
        measured = self.samples[self.window.first_sample:]
        wall = self.last_step_end - self.window.start
        # a window shorter than the backlog the workers can hold still drains a filling queue
        # faster than they decode (H200, 8 workers: 213 "samples/s" over 21 samples); no rate then
        backlog = self._backlog()
        rated = bool(measured) and len(measured) >= backlog
        frames = sum(view.frames for sample in measured for view in sample)
        cpu = self.cpu.summary()
        decoding = latency_summary(measured, self._parallel_views)
        camera = self.dataset.cameras[0]
        out: dict[str, Any] = {
            # backend and mode flat, as the report's decoder table reads them
            "backend": self.backend_name, "mode": self.settings.mode, "pattern": self.knob_values["pattern"],
            "backend_settings": self.decoder.describe(), "codec": self.dataset.codec(camera),
            "cuda_fallback": self.cuda_fallback or None,
            "resolution": "x".join(map(str, self.dataset.info["features"][camera]["shape"][:2])),
            "layout": self.dataset.layout, "cameras": len(self.dataset.cameras),
            "samples": len(self.samples), "measured_samples": len(measured),
            **self.dataset.content(), **decoding,
            DELIVERED_RATE: len(measured) / wall if rated else None,
            "frames_per_s": frames / wall if rated else None,
            "loader_rate_note": None if rated else (f"{len(measured)} measured samples, fewer than the workers' "
                                                    f"backlog of {backlog}: measure more steps for a rate"),
            # workers may have decoded up to num_workers * prefetch_factor samples more than delivered
            **cpu, "cpu_s_per_sample": cpu["cpu_time_s"] / len(measured) if measured else None,
            **self._overhead(cpu["cpu_time_s"], measured, decoding["decode_cpu_s_per_sample"]),
            **peak_rss(),
            "frame_fingerprint": fingerprint(self.first_frames),
            "source_mad": self._source_mad(),
            "data_wait_s_median": statistics.median(self.data_wait[self.window.first_step:] or self.data_wait),
        }
        if self.foreground is not None:
            # alone: before the loader started and after its workers stopped, to bracket any drift
            alone = statistics.median(self.foreground_alone + self._foreground_alone())
            loaded = statistics.median(self.foreground_loaded[self.window.first_step:] or self.foreground_loaded)
            out.update(foreground_step_s_alone=alone, foreground_step_s_loaded=loaded,
                       foreground_inflation=loaded / alone)
        return out

    def _overhead(self, cpu_s: float, measured: list[list[ViewTiming]],
                  decode_cpu_s_per_sample: float | None) -> dict[str, float | None]:
        """What the sample pipeline cost beyond the decoding calls, per sample: CPU of the decoding
        processes (and the main one) over the window less the calls' CPU; wall, with num_workers 0,
        the wait for a batch less its decoding calls (with workers the wait is the queue's). None
        with interference: the foreground's CPU is the main process's too."""
        cpu = None
        if measured and self.foreground is None:
            cpu = 1e3 * (cpu_s / len(measured) - decode_cpu_s_per_sample)
        waits = self.pipeline_wait[self.window.first_step:]
        return {"loader_overhead_cpu_ms_per_sample": cpu,
                "loader_overhead_ms_per_sample": 1e3 * statistics.median(waits) / self.mbs if waits else None}

    def _source_mad(self) -> float | None:
        """Mean absolute difference between sample 0's frames and what went into the encoder: a
        few units is codec loss, tens means the wrong frames came back. None for a real dataset."""
        if self.params["root"]:
            return None
        spec = self.clip_spec()
        diffs = []
        for request, frames in zip(self.pattern.sample(0), self.first_frames, strict=True):
            camera_index = self.dataset.cameras.index(request.camera)
            truth = torch.stack([torch.from_numpy(source_frame(spec, camera_index, self.seed, t, request.episode))
                                 for t in request.indices])
            diffs.append(mean_abs_diff(frames, truth))
        return statistics.fmean(diffs)
