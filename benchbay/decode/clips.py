"""Synthetic robot-video datasets in LeRobot's layouts, written with PyAV (read by ``benchbay.decode.dataset``).

v2.1 (``layout: v2.1``), one file per episode and camera:

    <root>/meta/info.json                                  fps, features (with each video's codec)
    <root>/meta/episodes.jsonl, meta/tasks.jsonl
    <root>/data/chunk-000/episode_000000.parquet           state, action, timestamp, frame_index...
    <root>/videos/chunk-000/<camera key>/episode_000000.mp4  one per camera

v3.0 (``layout: v3.0``, current lerobot), ``episodes_per_file`` episodes per file:

    <root>/meta/info.json                                  as above, plus data/video_files_size_in_mb
    <root>/meta/episodes/chunk-000/file-000.parquet        per episode: length, its data file, and per
                                                           camera its video file and from/to_timestamp
    <root>/meta/tasks.parquet
    <root>/meta/stats.json                                 per feature: min, max, mean, std, count and
                                                           quantiles (what a policy normalises with)
    <root>/data/chunk-000/file-000.parquet
    <root>/videos/<camera key>/chunk-000/file-000.mp4      episodes one after another

A v3.0 video is its episodes encoded alone and joined without re-encoding, as LeRobot's writer joins
them (stream copy), so an episode's frames in it are those of the same episode written alone.

The pictures are a textured background that pans and wobbles, a moving block and per-frame sensor
noise, different enough frame to frame that decoding the wrong index shows. Everything follows from
the seed, and any frame can be regenerated alone (``source_frame``) to check a decoder against the
truth. How hard they are to compress, and so to decode (the decoder's work grows with the bits it
reads), is set by the texture's fine ``grain`` and the per-frame ``noise``; ``VideoDataset.content``
gives the resulting kB per frame and bits per pixel, which every decode record carries.

Upstream layouts: v2.1's paths (``DEFAULT_PARQUET_PATH``, ``DEFAULT_VIDEO_PATH``, ``EPISODES_PATH``,
``TASKS_PATH``) in huggingface/lerobot@d602e8169cba:src/lerobot/datasets/utils.py (the commit before
v3.0's, f55c6e89f01a); v3.0's (``DEFAULT_DATA_PATH``, ``DEFAULT_VIDEO_PATH``, ``DEFAULT_EPISODES_PATH``,
``DEFAULT_TASKS_PATH``) in huggingface/lerobot@d0af05771fd4:src/lerobot/datasets/utils.py; the join by stream copy in
huggingface/lerobot@d0af05771fd4:src/lerobot/datasets/video_utils.py::concatenate_video_files.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # parquet is written and read where datasets are: the decode workload is declared without it
    import pandas as pd

CHUNK_SIZE = 1000
DATA_PATH = "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet"
VIDEO_PATH = "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4"
DATA_PATH_V3 = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH_V3 = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
EPISODES_PATH_V3 = "meta/episodes/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
LAYOUTS = ("v2.1", "v3.0")
#: the quantiles in a v3.0 stats.json (DEFAULT_QUANTILES in lerobot's datasets/compute_stats.py)
QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)
#: every how many frames a camera's stats sample an episode
STATS_FRAME_STRIDE = 10

#: encoders tried for each codec, in order; the first one this PyAV build has is used
ENCODERS = {"h264": ("libx264",), "av1": ("libsvtav1", "libaom-av1", "librav1e"), "hevc": ("libx265",)}


class EncoderUnavailable(RuntimeError):
    """No encoder for the requested codec in this PyAV build."""


@dataclass(frozen=True)
class ClipSpec:
    """How a dataset's videos are made. ``gop`` None = the encoder's default keyframe interval;
    ``preset`` None = the encoder's default speed preset. Content: ``grain`` = amplitude (0-255
    scale, +-) of the background's fine per-pixel texture, ``noise`` = amplitude of the sensor noise
    drawn anew for every frame (what inter-frame prediction cannot remove: it sets the bitrate)."""

    cameras: tuple[str, ...]
    codec: str
    height: int
    width: int
    fps: int
    crf: int
    gop: int | None = None
    preset: str | None = None
    episode_frames: int = 150
    episodes: int = 1
    pix_fmt: str = "yuv420p"
    grain: int = 25
    noise: int = 3
    state_dim: int = 8
    action_dim: int = 7
    layout: str = "v2.1"
    episodes_per_file: int = 4  # v3.0 only

    def __post_init__(self) -> None:
        if self.layout not in LAYOUTS:
            raise ValueError(f"clip layout must be one of {LAYOUTS}, got {self.layout!r}")
        if self.episodes_per_file < 1:
            raise ValueError(f"episodes_per_file must be >= 1, got {self.episodes_per_file!r}")
        for name in ("grain", "noise"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"clip {name} must be an integer >= 0 (an amplitude on the 0-255 scale), "
                                 f"got {value!r}")

    def replace(self, **changes: Any) -> ClipSpec:
        """A copy with the non-None ``changes`` applied (suite params left unset keep the preset)."""
        return dataclasses.replace(self, **{k: v for k, v in changes.items() if v is not None})


PRESETS: dict[str, ClipSpec] = {
    # DROID as DreamZero reads it: 3 views (two exterior, one wrist), H.264 ultrafast CRF 23, 15 Hz
    # (encode_video and convert_droid_dataset in dreamzero0/dreamzero@ab790c198fbc:scripts/data/convert_droid.py)
    "droid": ClipSpec(cameras=("observation.images.exterior_image_1_left", "observation.images.exterior_image_2_left",
                               "observation.images.wrist_image_left"),
                      codec="h264", height=180, width=320, fps=15, crf=23, preset="ultrafast", episode_frames=240),
    # LeRobot's encoder defaults on a LIBERO export: AV1 (SVT-AV1), GOP 2, CRF 30, 2 views at 10 Hz
    "libero": ClipSpec(cameras=("observation.images.image", "observation.images.wrist_image"),
                       codec="av1", height=256, width=256, fps=10, crf=30, gop=2, episode_frames=150),
    # what current lerobot writes (configs/video.py, video_utils.py): v3.0 files of several episodes,
    # libsvtav1 with a keyframe every 2 frames, CRF 30, yuv420p; DROID's 3 views at 15 Hz
    # (huggingface/lerobot@d0af05771fd4:src/lerobot/configs/video.py::VideoEncoderConfig)
    "lerobot": ClipSpec(cameras=("observation.images.exterior_image_1_left", "observation.images.exterior_image_2_left",
                                 "observation.images.wrist_image_left"),
                        codec="av1", height=180, width=320, fps=15, crf=30, gop=2, episode_frames=240,
                        episodes=4, layout="v3.0"),
    # LIBERO's 2 views as current lerobot writes them: the libero encoding in v3.0 files
    "lerobot-libero": ClipSpec(cameras=("observation.images.image", "observation.images.wrist_image"),
                               codec="av1", height=256, width=256, fps=10, crf=30, gop=2, episode_frames=150,
                               episodes=4, layout="v3.0"),
}


def pick_encoder(codec: str) -> str:
    """The first encoder of ``ENCODERS[codec]`` that PyAV has; warns when it is not the first."""
    candidates = ENCODERS.get(codec)
    if candidates is None:
        raise ValueError(f"unknown codec {codec!r}; known: {sorted(ENCODERS)}")
    import av  # where clips are written: training workloads import this module without PyAV (GPU host)

    for name in candidates:
        try:
            av.codec.Codec(name, "w")
        except av.codec.codec.UnknownCodecError:
            continue
        if name != candidates[0]:
            warnings.warn(f"PyAV {av.__version__} has no {candidates[0]}; encoding {codec} with {name}", stacklevel=2)
        return name
    raise EncoderUnavailable(f"PyAV {av.__version__} has no {codec} encoder (tried {', '.join(candidates)}); "
                             f"install a PyAV build with one of them or choose another codec")


def _encoder_options(encoder: str, spec: ClipSpec) -> dict[str, str]:
    options = {"crf": str(spec.crf)}
    if spec.gop is not None:
        options["g"] = str(spec.gop)
    if spec.preset is not None:
        options["cpu-used" if encoder == "libaom-av1" else "preset"] = spec.preset
    return options


# ---- picture content ----------------------------------------------------------------------------

def _background(spec: ClipSpec, camera_index: int, seed: int) -> np.ndarray:
    """A periodic texture (coarse blobs + fine grain) the frames pan across, as int16 (H, W, 3)."""
    rng = np.random.default_rng([seed, camera_index])
    cell = 16
    coarse = rng.integers(30, 226, size=(-(-spec.height // cell), -(-spec.width // cell), 3))
    blobs = np.repeat(np.repeat(coarse, cell, axis=0), cell, axis=1)[: spec.height, : spec.width]
    grain = rng.integers(-spec.grain, spec.grain + 1, size=(spec.height, spec.width, 1))  # luminance detail
    return (blobs + grain).astype(np.int16)


def _render(background: np.ndarray, spec: ClipSpec, camera_index: int, seed: int, t: int) -> np.ndarray:
    height, width = background.shape[:2]
    shift_x = 2 * t + 5 * camera_index
    shift_y = int(round(6 * np.sin(t / 7.0)))
    frame = np.roll(background, (shift_y, -shift_x), axis=(0, 1))
    side = max(height // 5, 4)
    top = int((height - side) * (0.5 + 0.4 * np.sin(t / 11.0 + camera_index)))
    left = int((width - side) * (0.5 + 0.4 * np.cos(t / 9.0)))
    frame[top:top + side, left:left + side] = (240, 40 + 60 * camera_index, 40)
    noise = np.random.default_rng([seed, camera_index, t]).integers(-spec.noise, spec.noise + 1, size=frame.shape)
    return np.clip(frame + noise, 0, 255).astype(np.uint8)


def source_frame(spec: ClipSpec, camera_index: int, seed: int, t: int, episode: int = 0) -> np.ndarray:
    """Frame ``t`` of a camera's episode as it went into the encoder (uint8 H, W, 3)."""
    background = _background(spec, camera_index, _episode_seed(seed, episode))
    return _render(background, spec, camera_index, _episode_seed(seed, episode), t)


def _episode_seed(seed: int, episode: int) -> int:
    return seed * 100_003 + episode


# ---- writing ------------------------------------------------------------------------------------

def write_video(path: Path, spec: ClipSpec, camera_index: int, seed: int, encoder: str) -> None:
    import av  # see pick_encoder

    path.parent.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1 prints its whole configuration per file otherwise
    background = _background(spec, camera_index, seed)
    with av.open(str(path), "w") as container:
        stream = container.add_stream(encoder, rate=spec.fps, options=_encoder_options(encoder, spec))
        stream.width, stream.height, stream.pix_fmt = spec.width, spec.height, spec.pix_fmt
        for t in range(spec.episode_frames):
            frame = av.VideoFrame.from_ndarray(_render(background, spec, camera_index, seed, t), format="rgb24")
            frame.pts, frame.time_base = t, Fraction(1, spec.fps)
            container.mux(stream.encode(frame))
        container.mux(stream.encode(None))


def _lowdim(spec: ClipSpec, episode: int, seed: int) -> pd.DataFrame:
    import pandas as pd

    rng = np.random.default_rng([seed, episode, 7])
    n = spec.episode_frames
    state = np.cumsum(rng.normal(0, 0.02, size=(n, spec.state_dim)), axis=0).astype(np.float32)
    action = rng.normal(0, 1, size=(n, spec.action_dim)).astype(np.float32)
    return pd.DataFrame({
        "observation.state": list(state), "action": list(action),
        "timestamp": (np.arange(n) / spec.fps).astype(np.float32), "frame_index": np.arange(n, dtype=np.int64),
        "episode_index": np.full(n, episode, dtype=np.int64),
        "index": np.arange(episode * n, (episode + 1) * n, dtype=np.int64),
        "task_index": np.zeros(n, dtype=np.int64),
    })


def _info(spec: ClipSpec, encoder: str) -> dict[str, Any]:
    import av  # see pick_encoder

    video_info = {"video.fps": spec.fps, "video.height": spec.height, "video.width": spec.width,
                  "video.channels": 3, "video.codec": spec.codec, "video.pix_fmt": spec.pix_fmt,
                  "video.is_depth_map": False, "has_audio": False,
                  # not in LeRobot's schema: how the synthetic videos were made
                  "video.encoder": encoder, "video.encoder_library": f"PyAV {av.__version__}",
                  "video.crf": spec.crf, "video.g": spec.gop}
    features: dict[str, Any] = {
        key: {"dtype": "video", "shape": [spec.height, spec.width, 3], "names": ["height", "width", "channels"],
              "info": video_info} for key in spec.cameras}
    features.update({
        "observation.state": {"dtype": "float32", "shape": [spec.state_dim], "names": None},
        "action": {"dtype": "float32", "shape": [spec.action_dim], "names": None},
        **{name: {"dtype": dtype, "shape": [1], "names": None} for name, dtype in (
            ("timestamp", "float32"), ("frame_index", "int64"), ("episode_index", "int64"), ("index", "int64"),
            ("task_index", "int64"))},
    })
    return {"codebase_version": "v2.1", "robot_type": "synthetic", "total_episodes": spec.episodes,
            "total_frames": spec.episodes * spec.episode_frames, "total_tasks": 1,
            "total_videos": spec.episodes * len(spec.cameras), "total_chunks": -(-spec.episodes // CHUNK_SIZE),
            "chunks_size": CHUNK_SIZE, "fps": spec.fps, "splits": {"train": f"0:{spec.episodes}"},
            "data_path": DATA_PATH, "video_path": VIDEO_PATH, "features": features}


def write_dataset(root: Path, spec: ClipSpec, seed: int = 0) -> Path:
    """Write a whole dataset in ``spec.layout`` under ``root`` (which must not exist yet); returns ``root``."""
    root = Path(root)
    encoder = pick_encoder(spec.codec)
    (root / "meta").mkdir(parents=True)
    if spec.layout == "v3.0":
        _write_v3(root, spec, seed, encoder)
        return root
    for episode in range(spec.episodes):
        names = {"episode_chunk": episode // CHUNK_SIZE, "episode_index": episode}
        data_path = root / DATA_PATH.format(**names)
        data_path.parent.mkdir(parents=True, exist_ok=True)
        _lowdim(spec, episode, seed).to_parquet(data_path, index=False)
        for camera_index, key in enumerate(spec.cameras):
            write_video(root / VIDEO_PATH.format(video_key=key, **names), spec, camera_index,
                        _episode_seed(seed, episode), encoder)
    with open(root / "meta" / "episodes.jsonl", "w") as f:
        for episode in range(spec.episodes):
            f.write(json.dumps({"episode_index": episode, "tasks": ["synthetic task"],
                                "length": spec.episode_frames}) + "\n")
    (root / "meta" / "tasks.jsonl").write_text(json.dumps({"task_index": 0, "task": "synthetic task"}) + "\n")
    (root / "meta" / "info.json").write_text(json.dumps(_info(spec, encoder), indent=2))
    return root


def _write_v3(root: Path, spec: ClipSpec, seed: int, encoder: str) -> None:
    """The v3.0 layout: file ``f`` holds episodes ``f * episodes_per_file ...``; each episode is
    encoded alone into a scratch file, then the files are joined by stream copy."""
    import pandas as pd

    rows = []
    for file in range(-(-spec.episodes // spec.episodes_per_file)):
        names = {"chunk_index": file // CHUNK_SIZE, "file_index": file % CHUNK_SIZE}
        episodes = range(file * spec.episodes_per_file, min((file + 1) * spec.episodes_per_file, spec.episodes))
        data_path = root / DATA_PATH_V3.format(**names)
        data_path.parent.mkdir(parents=True, exist_ok=True)
        pd.concat([_lowdim(spec, episode, seed) for episode in episodes]).to_parquet(data_path, index=False)
        for episode in episodes:
            row = {"episode_index": episode, "tasks": ["synthetic task"], "length": spec.episode_frames,
                   "meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0,
                   "data/chunk_index": names["chunk_index"], "data/file_index": names["file_index"],
                   "dataset_from_index": episode * spec.episode_frames,
                   "dataset_to_index": (episode + 1) * spec.episode_frames}
            start = (episode - episodes[0]) * spec.episode_frames / spec.fps
            for key in spec.cameras:
                row.update({f"videos/{key}/chunk_index": names["chunk_index"],
                            f"videos/{key}/file_index": names["file_index"],
                            f"videos/{key}/from_timestamp": start,
                            f"videos/{key}/to_timestamp": start + spec.episode_frames / spec.fps})
            rows.append(row)
        for camera_index, key in enumerate(spec.cameras):
            with tempfile.TemporaryDirectory(dir=root) as scratch:
                parts = [Path(scratch) / f"{episode}.mp4" for episode in episodes]
                for episode, part in zip(episodes, parts, strict=True):
                    write_video(part, spec, camera_index, _episode_seed(seed, episode), encoder)
                join_videos(parts, root / VIDEO_PATH_V3.format(video_key=key, **names))
    episodes_path = root / EPISODES_PATH_V3.format(chunk_index=0, file_index=0)
    episodes_path.parent.mkdir(parents=True)
    pd.DataFrame(rows).to_parquet(episodes_path, index=False)
    pd.DataFrame({"task_index": [0]}, index=pd.Index(["synthetic task"], name="task")).to_parquet(
        root / "meta" / "tasks.parquet")
    (root / "meta" / "stats.json").write_text(json.dumps(_stats(spec, seed), indent=2))
    info = _info(spec, encoder)
    for key in ("total_videos", "total_chunks"):  # not in v3.0's info.json
        del info[key]
    for feature in info["features"].values():  # v3.0 keeps each feature's fps
        feature["fps"] = spec.fps
    info.update(codebase_version="v3.0", data_path=DATA_PATH_V3, video_path=VIDEO_PATH_V3,
                data_files_size_in_mb=100, video_files_size_in_mb=500)  # lerobot's defaults as v3.0 came
    # (DEFAULT_*_FILE_SIZE_IN_MB, huggingface/lerobot@f55c6e89f01a:src/lerobot/datasets/utils.py; video files
    # are 200 MB since 18b32dced982)
    (root / "meta" / "info.json").write_text(json.dumps(info, indent=2))


def _stats(spec: ClipSpec, seed: int) -> dict[str, dict[str, Any]]:
    """v3.0's meta/stats.json, from what was written: the low-dimensional columns exactly, each camera
    per channel over every ``STATS_FRAME_STRIDE``-th source frame scaled to [0, 1] (shape (3, 1, 1), as
    lerobot keeps an image's stats)."""
    import pandas as pd

    def summary(values: np.ndarray, axis: tuple[int, ...]) -> dict[str, Any]:
        keep = values.ndim > 2  # an image's stats keep their reduced axes
        figures = {"min": values.min(axis, keepdims=keep), "max": values.max(axis, keepdims=keep),
                   "mean": values.mean(axis, keepdims=keep), "std": values.std(axis, keepdims=keep),
                   **{f"q{round(q * 100):02d}": np.quantile(values, q, axis=axis, keepdims=keep) for q in QUANTILES}}
        if keep:
            figures = {k: v[0] for k, v in figures.items()}  # (1, 3, 1, 1) -> (3, 1, 1)
        return {**{k: np.asarray(v, dtype=np.float64).tolist() for k, v in figures.items()}, "count": [len(values)]}

    table = pd.concat([_lowdim(spec, episode, seed) for episode in range(spec.episodes)])
    stats = {name: summary(np.stack(table[name].to_numpy()) if table[name].dtype == object
                           else table[name].to_numpy()[:, None], (0,)) for name in table.columns}
    for camera_index, key in enumerate(spec.cameras):
        frames = np.stack([source_frame(spec, camera_index, seed, t, episode) for episode in range(spec.episodes)
                           for t in range(0, spec.episode_frames, STATS_FRAME_STRIDE)])
        stats[key] = summary(frames.transpose(0, 3, 1, 2) / 255.0, (0, 2, 3))
    return stats


def join_videos(parts: list[Path], path: Path) -> None:
    """Concatenate same-settings videos by stream copy, each part's timestamps shifted to follow the
    previous part's last frame (as lerobot joins episodes into a v3.0 file: concatenate_video_files in
    huggingface/lerobot@d0af05771fd4:src/lerobot/datasets/video_utils.py)."""
    import av  # see pick_encoder

    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w") as out:
        stream, offset = None, 0
        for part in parts:
            with av.open(str(part)) as source:
                video = source.streams.video[0]
                if stream is None:
                    stream = out.add_stream_from_template(video, opaque=True)  # no codec: packets are copied
                # frames x frame duration, in the part's time base: where the next part starts
                duration = round(video.frames / video.average_rate / video.time_base)
                for packet in source.demux(video):
                    if packet.dts is None:  # the demuxer's end-of-stream packet
                        continue
                    packet.pts += offset
                    packet.dts += offset
                    packet.stream = stream
                    out.mux(packet)
                offset += duration


def cached_dataset(spec: ClipSpec, seed: int = 0, cache_dir: Path | None = None) -> Path:
    """The dataset for (spec, seed) under the cache, written once; concurrent writers are safe
    (each writes a private folder and renames it into place). Finding a written one needs no PyAV,
    so a cache made elsewhere serves a host without it (the GPU host); its info.json says which
    PyAV wrote it."""
    cache_dir = Path(cache_dir or os.environ.get("BENCHBAY_DECODE_CACHE") or Path.home() / ".cache/benchbay/decode")
    fields = dataclasses.asdict(spec)
    if spec.layout == "v2.1":  # the key a v2.1 dataset had before the layout fields: caches stay valid
        del fields["layout"], fields["episodes_per_file"]
    else:  # v3.0 datasets gained meta/stats.json: a cache written before has none
        fields["stats"] = True
    key = hashlib.sha1(json.dumps([fields, seed]).encode()).hexdigest()[:12]
    root = cache_dir / key
    if (root / "meta" / "info.json").exists():
        return root
    try:
        import av  # noqa: F401  (see pick_encoder)
    except ImportError as e:
        raise ModuleNotFoundError(
            f"no generated dataset for this clip spec under {cache_dir} (key {key}), and writing one needs PyAV: "
            "install av, point BENCHBAY_DECODE_CACHE at a cache written where it is installed, "
            "or give params.root a LeRobot dataset") from e
    cache_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=cache_dir))
    write_dataset(staging / "dataset", spec, seed)
    try:
        (staging / "dataset").rename(root)
    except OSError:  # another process got there first
        if not (root / "meta" / "info.json").exists():
            raise
    shutil.rmtree(staging, ignore_errors=True)
    return root
