"""A LeRobot dataset on disk, v2.1 or v3.0 (the layouts: ``benchbay.decode.clips``), as the decode
benchmarks read it: info.json checked key by key, and per camera and episode the video file and the
index in it of the episode's first frame."""

from __future__ import annotations

import json
import re
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class DatasetFormatError(ValueError):
    """A dataset's metadata is missing, unreadable or not a LeRobot layout; names the file and key."""


#: the info.json keys the reader needs, per codebase_version it reads (v2.0 is v2.1's layout)
INFO_KEYS = {"v2.0": ("fps", "features", "video_path", "chunks_size"),
             "v2.1": ("fps", "features", "video_path", "chunks_size"),
             "v3.0": ("fps", "features", "video_path", "chunks_size")}


@dataclass(frozen=True)
class EpisodeVideo:
    """Where an episode of one camera lies: its file and the file's frame index of its first frame."""

    path: Path
    first_frame: int


@dataclass(frozen=True)
class VideoDataset:
    """A LeRobot dataset on disk (v2.1 or v3.0, told by info.json), as the decode benchmarks read it
    (a plain folder of video files too: ``benchbay.decode.folder.open_videos``)."""

    root: Path
    info: dict[str, Any]
    lengths: tuple[int, ...]  # frames per episode
    videos: dict[str, tuple[EpisodeVideo, ...]]  # per camera, per episode

    @classmethod
    def open(cls, root: Path | str) -> VideoDataset:
        root = Path(root)
        info_path = root / "meta" / "info.json"
        try:
            info = json.loads(info_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise DatasetFormatError(f"{root} is not a LeRobot dataset: no {info_path}") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise DatasetFormatError(f"{info_path}: not JSON ({exc})") from None
        cameras = _checked_info(info_path, info)
        read = _episodes_v3 if info["codebase_version"] == "v3.0" else _episodes_v2
        lengths, videos = read(root, info, cameras)
        inside = root.resolve()
        for camera, episodes in videos.items():  # a dataset's files are its own: no path out of its folder
            for video in episodes:
                if not video.path.resolve().is_relative_to(inside):
                    raise DatasetFormatError(f"{info_path}: key 'video_path' leads {camera} to {video.path}, "
                                             f"outside the dataset {root}")
        return cls(root, info, lengths, videos)

    @property
    def layout(self) -> str:
        """v2.1 (v2.0 is its layout), v3.0, or a plain folder's (``benchbay.decode.folder``)."""
        version = self.info["codebase_version"]
        return "v2.1" if version == "v2.0" else version

    @property
    def cameras(self) -> list[str]:
        return list(self.videos)

    @property
    def fps(self) -> int:
        return self.info["fps"]

    @property
    def episodes(self) -> int:
        return len(self.lengths)

    def content(self) -> dict[str, float]:
        """How much the videos hold: mean encoded kB (1000 bytes) per frame and bits per pixel over
        every video file of the dataset (file sizes, container included)."""
        size = frames = pixels = 0
        for camera in self.cameras:
            height, width = self.info["features"][camera]["shape"][:2]
            for episode, length in enumerate(self.lengths):
                path = self.video_path(camera, episode)
                if not path.is_file():
                    raise FileNotFoundError(f"{self.root}: the episode metadata lists episode {episode}, "
                                            f"but its {camera} video {path} is missing")
                frames += length
                pixels += length * height * width
            size += sum(path.stat().st_size for path in {video.path for video in self.videos[camera]})
        return {"kb_per_frame": size / frames / 1e3, "bits_per_pixel": 8 * size / pixels}

    def codec(self, camera: str) -> str:
        return self.info["features"][camera]["info"]["video.codec"]

    def video_path(self, camera: str, episode: int) -> Path:
        return self.videos[camera][episode].path

    def first_frame(self, camera: str, episode: int) -> int:
        """The index, in its file, of the episode's first frame (0 in v2.1)."""
        return self.videos[camera][episode].first_frame


#: the placeholders a video_path may hold per layout (LeRobot's own), each with at most a width: no
#: attribute or index access (str.format would evaluate "{video_key.__class__}" from a dataset's file)
PATH_FIELDS = {"v2.0": ("episode_chunk", "video_key", "episode_index"),
               "v2.1": ("episode_chunk", "video_key", "episode_index"),
               "v3.0": ("video_key", "chunk_index", "file_index")}
_FORMAT_SPEC = re.compile(r"0?\d{0,2}d?")
MAX_FPS, MAX_SIDE = 1000, 16384


def _checked_info(path: Path, info: Any) -> list[str]:
    """info.json's keys the reader uses, each of the type and range it needs; the video cameras.
    DatasetFormatError naming the file and key otherwise."""
    def bad(key: str, expected: str, value: Any) -> DatasetFormatError:
        return DatasetFormatError(f"{path}: key {key!r}: expected {expected}, got {json.dumps(value)[:80]}")

    if not isinstance(info, dict):
        raise DatasetFormatError(f"{path}: expected a JSON object of LeRobot's info keys")
    version = info.get("codebase_version")
    if version not in INFO_KEYS:
        raise DatasetFormatError(f"{path}: key 'codebase_version' is {version!r}; this reader knows "
                                 f"{', '.join(INFO_KEYS)}")
    missing = [key for key in INFO_KEYS[version] if key not in info]
    if missing:
        raise DatasetFormatError(f"{path}: codebase_version {version} needs key(s) {', '.join(missing)}")
    fps, chunks = info["fps"], info["chunks_size"]
    if not (isinstance(fps, (int, float)) and not isinstance(fps, bool) and 0 < fps <= MAX_FPS):
        raise bad("fps", f"frames per second, a number in (0, {MAX_FPS}]", fps)
    if not (isinstance(chunks, int) and not isinstance(chunks, bool) and chunks >= 1):
        raise bad("chunks_size", "an integer >= 1", chunks)
    template = info["video_path"]
    if not isinstance(template, str) or Path(template).is_absolute() or ".." in Path(template).parts:
        raise bad("video_path", "a path template inside the dataset", template)
    try:
        fields = [(name, spec, conv) for _, name, spec, conv in string.Formatter().parse(template) if name is not None]
    except ValueError:
        raise bad("video_path", "a path template with balanced braces", template) from None
    for name, spec, conversion in fields:
        if name not in PATH_FIELDS[version] or conversion or not _FORMAT_SPEC.fullmatch(spec or ""):
            raise bad("video_path", f"placeholders of {list(PATH_FIELDS[version])} (a width at most)", template)
    features = info["features"]
    if not isinstance(features, dict) or not all(isinstance(f, dict) for f in features.values()):
        raise bad("features", "a mapping of feature names to mappings", features)
    cameras = [key for key, feature in features.items() if feature.get("dtype") == "video"]
    if not cameras:
        raise DatasetFormatError(f"{path}: key 'features' has no feature of dtype 'video'")
    for camera in cameras:
        shape = features[camera].get("shape")
        if not (isinstance(shape, list) and len(shape) >= 2 and all(
                isinstance(n, int) and not isinstance(n, bool) and 0 < n <= MAX_SIDE for n in shape[:2])):
            raise bad(f"features.{camera}.shape", f"[height, width, ...] of integers in 1..{MAX_SIDE}", shape)
        codec = (features[camera].get("info") or {}).get("video.codec") \
            if isinstance(features[camera].get("info") or {}, dict) else None
        if not isinstance(codec, str):
            raise bad(f"features.{camera}.info.video.codec", "the codec's name", codec)
    return cameras


def _episodes_v2(root: Path, info: dict[str, Any], cameras: list[str]):
    path = root / "meta" / "episodes.jsonl"
    try:
        with open(path) as f:
            episodes = sorted((json.loads(line) for line in f if line.strip()), key=lambda e: e["episode_index"])
        lengths = tuple(e["length"] for e in episodes)
        if not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in lengths):
            raise DatasetFormatError(f"{path}: key 'length': expected an integer number of frames in each episode")
    except (json.JSONDecodeError, UnicodeDecodeError, TypeError, AttributeError) as exc:
        raise DatasetFormatError(f"{path}: each line a JSON object of an episode ({exc})") from None
    except FileNotFoundError:
        raise DatasetFormatError(f"{root}: codebase_version {info['codebase_version']} needs {path}") from None
    except KeyError as exc:
        raise DatasetFormatError(f"{path}: an episode has no key {exc}") from None
    chunk = info["chunks_size"]
    videos = {camera: tuple(EpisodeVideo(root / info["video_path"].format(
        episode_chunk=e // chunk, video_key=camera, episode_index=e), 0) for e in range(len(lengths)))
        for camera in cameras}
    return lengths, videos


def _episodes_v3(root: Path, info: dict[str, Any], cameras: list[str]):
    """Per episode its length and, per camera, its file and first frame: the from_timestamp that
    shifts every query into the file, as a frame index on the dataset's frame rate."""
    import pandas as pd

    files = sorted((root / "meta" / "episodes").glob("chunk-*/file-*.parquet"))
    if not files:
        raise DatasetFormatError(f"{root}: codebase_version v3.0 needs meta/episodes/chunk-*/file-*.parquet")
    columns = ["episode_index", "length"] + [f"videos/{camera}/{name}" for camera in cameras
                                             for name in ("chunk_index", "file_index", "from_timestamp")]
    frames = []
    for path in files:
        frame = pd.read_parquet(path)
        missing = [column for column in columns if column not in frame.columns]
        if missing:
            raise DatasetFormatError(f"{path}: no column(s) {', '.join(missing)}")
        frames.append(frame[columns])
    episodes = pd.concat(frames).sort_values("episode_index")
    if list(episodes["episode_index"]) != list(range(len(episodes))):
        raise DatasetFormatError(f"{root}/meta/episodes: key 'episode_index' is not 0..{len(episodes) - 1}")
    fps = info["fps"]

    def video(camera: str, row: pd.Series) -> EpisodeVideo:
        path = info["video_path"].format(video_key=camera, chunk_index=int(row[f"videos/{camera}/chunk_index"]),
                                         file_index=int(row[f"videos/{camera}/file_index"]))
        return EpisodeVideo(root / path, round(row[f"videos/{camera}/from_timestamp"] * fps))

    videos = {camera: tuple(video(camera, row) for _, row in episodes.iterrows()) for camera in cameras}
    return tuple(int(n) for n in episodes["length"]), videos
