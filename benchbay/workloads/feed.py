"""Video inside the training loop (``data: video`` on a training workload): a torch DataLoader over
a LeRobot-layout dataset (or a plain folder of video files) whose workers decode each sample's views
with the chosen backend (the decode package's own dataset and decoders) and turn them into what the
model's real loader hands over (``SamplePipeline``: DreamZero's tiled DROID canvas, Wall-X's Qwen2.5-VL image patches).

The step then waits for the batch like a real step does: the harness (``launch.harness.TrainingHarness``) times that
wait (``data_wait_s``), the system sampler the workers' CPU. The workers are asked for
``num_workers x prefetch_factor`` batches ahead (``backlog``), which they make while the first step
compiles: the harness warms up over that many more steps (``Workload.batches_ahead``), so that
every measured batch was asked for, and decoded, while the steps ran. Draining them before the
first step would not do: the workers refill the queue while it compiles (H200, DreamZero-5B mbs
24, 4 PyAV workers: 7 steps found a batch ready, then one waited 13 s).

Each batch also says what it cost the loader (``last_loader_s``: a worker's time to make it over
the workers; without workers, the time to make it here): the step cannot run faster than that on
average, and a loader slower than the step whose queue has not yet run dry is still being drained
(the harness warms up until it does, ``launch.worker``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from benchbay.decode.backends import BACKENDS, Settings
from benchbay.decode.clips import PRESETS, cached_dataset
from benchbay.decode.dataset import VideoDataset
from benchbay.decode.folder import open_videos
from benchbay.decode.loader import DecodeDataset, make_loader, next_batch
from benchbay.decode.patterns import Pattern
from benchbay.knobs.video import VIDEO_KNOBS
from benchbay.workloads.base import TrainingWorkload

#: one sample's decoded views (each camera's (frames, H, W, 3) uint8) -> the model's input tensor
SamplePipeline = Callable[[list[torch.Tensor]], torch.Tensor]


def video_unavailable(workload: TrainingWorkload) -> str | None:
    """Why ``data: video`` cannot run with this workload's knobs here, or why a video knob set with
    synthetic data would not act (None if all is well)."""
    knobs = {name: workload.knob(name) for name in VIDEO_KNOBS}
    if knobs["data"] != "video":
        ignored = [f"{name}={knobs[name]}" for name, choice in VIDEO_KNOBS.items() if knobs[name] != choice.default]
        return f"{', '.join(ignored)}: no effect with data=synthetic" if ignored else None
    backend, preset = knobs["video_backend"], dataset_preset(workload)  # an unknown preset: refused here
    reason = BACKENDS[backend].unavailable_reason(knobs["video_device"])
    if reason is None and backend == "decord" and "av1" in _codecs(workload.params, preset):
        reason = "decord 0.6 cannot open AV1 videos (this dataset's codec): use torchcodec or pyav"
    return f"data=video: {reason}" if reason else None


def dataset_preset(workload: TrainingWorkload) -> str:
    """The PRESETS name of the dataset generated without ``params.root``: ``params.video_preset``,
    else the workload's own; an unknown name is refused with the known ones."""
    if workload.params.get("root") and workload.params.get("video_preset"):
        raise ValueError("workload.params: root and video_preset both set; root is a dataset on disk, "
                         "video_preset one to generate: give one")
    preset = workload.params.get("video_preset") or workload.video_preset
    if preset not in PRESETS:
        raise ValueError(f"workload.params.video_preset: unknown dataset preset {preset!r}; known: {sorted(PRESETS)}")
    return preset


def _codecs(params: dict[str, Any], preset: str) -> set[str]:
    if params.get("root"):
        dataset = open_videos(params["root"])
        return {dataset.codec(camera) for camera in dataset.cameras}
    return {PRESETS[preset].codec}


class _Frames(torch.utils.data.Dataset):
    """Item i: the model input of sample i (the decoded views through the sample pipeline) and the
    seconds it took to make, in the worker that made it."""

    def __init__(self, decoded: DecodeDataset, pipeline: SamplePipeline):
        self.decoded, self.pipeline = decoded, pipeline

    def __len__(self) -> int:
        return len(self.decoded)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, float]:
        started = time.perf_counter()
        return self.pipeline(self.decoded[i]["frames"]), time.perf_counter() - started


class VideoFeed:
    """Model inputs of ``batch_size`` samples per ``next()``, decoded by DataLoader workers."""

    def __init__(self, dataset: VideoDataset, pattern: Pattern, pipeline: SamplePipeline, knobs: dict[str, Any],
                 batch_size: int):
        settings = Settings(mode="loader", device=knobs["video_device"])
        self.backlog = knobs["num_workers"] * knobs["prefetch_factor"]
        self.dataset = dataset
        self.loader = make_loader(_Frames(DecodeDataset(pattern, knobs["video_backend"], settings), pipeline),
                                  batch_size=batch_size, num_workers=knobs["num_workers"],
                                  prefetch_factor=knobs["prefetch_factor"], pin_memory=knobs["pin_memory"],
                                  collate_fn=None)
        self._batches = None
        self.last_loader_s: float | None = None  # what the last batch cost the loader (module docstring)

    def next(self) -> torch.Tensor:
        if self._batches is None:
            self._batches = iter(self.loader)
        batch, made_s = next_batch(self._batches, self.loader)  # one worker makes a batch's samples in turn
        self.last_loader_s = float(made_s.sum()) / max(self.loader.num_workers, 1)
        return batch

    def content(self) -> dict[str, float]:
        return self.dataset.content()


def open_feed(workload: TrainingWorkload, pattern: type[Pattern], pipeline: SamplePipeline) -> VideoFeed:
    """The feed of a ``data: video`` workload: its dataset (``params.root`` or ``dataset_preset``),
    ``pattern``'s samples drawn from its seed, through ``pipeline``, ``mbs`` samples per batch."""
    seed = int(workload.knob("seed"))
    dataset = open_dataset(workload.params, dataset_preset(workload), seed)
    return VideoFeed(dataset, pattern(dataset, seed), pipeline, workload.knob_values, workload.mbs)


def open_dataset(params: dict[str, Any], preset: str, seed: int) -> VideoDataset:
    """``params.root`` when given, else the generated ``preset`` dataset (decode.clips.PRESETS)."""
    if params.get("root"):
        return open_videos(params["root"])
    spec = PRESETS[preset].replace(episodes=params.get("episodes"), episode_frames=params.get("episode_frames"))
    return VideoDataset.open(cached_dataset(spec, seed))
