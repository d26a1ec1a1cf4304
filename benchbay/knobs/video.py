"""The video knobs and params of a training workload that can be fed decoded video (``data: video``,
benchbay.workloads.feed): declarations, which suites, the analysis and the workloads read without the
decoders."""

from __future__ import annotations

from benchbay.knobs import Choice

#: the knobs of a training workload that can be fed decoded video (its first value is the default)
VIDEO_KNOBS = {
    "data": Choice(("synthetic", "video"), "synthetic: batches made on the device; video: decoded from a "
                   "LeRobot-layout dataset by a DataLoader, as the real loader does, the rest synthetic"),
    "video_backend": Choice(("torchcodec", "decord", "pyav", "lerobot"),
                            "data=video: the decoding library, or lerobot: LeRobot's own path over torchcodec"),
    "video_device": Choice(("cpu", "cuda"), "data=video: where frames are decoded (cuda: NVDEC, torchcodec)"),
    "num_workers": Choice((0, 2, 4, 8, 16), "data=video: DataLoader worker processes"),
    "prefetch_factor": Choice((2, 4, 8), "data=video: batches each worker prepares ahead"),
    "pin_memory": Choice((True, False), "data=video: DataLoader pin_memory (with a GPU)"),
}
#: workload params of a video-fed workload: ``root`` an existing dataset, else one is generated from
#: ``video_preset`` (a decode.clips.PRESETS name; None: the workload's own, e.g. lerobot for v3.0 AV1)
VIDEO_PARAMS = {"root": None, "video_preset": None, "episodes": 4, "episode_frames": 240}
