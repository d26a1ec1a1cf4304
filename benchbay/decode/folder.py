"""One's own videos as a decode dataset: ``params.root`` names a LeRobot dataset (``meta/info.json``)
or a plain folder of video files, told apart here.

A plain folder is read as one camera whose episodes are its video files (``videos/ep0.mp4``,
``videos/ep1.mp4``), or, where its video files lie in subfolders, one camera per subfolder whose
episodes are the files of one name in every subfolder (``videos/wrist/ep0.mp4``,
``videos/front/ep0.mp4``). Each file is probed with PyAV (its header, and its packets where the
container keeps no frame count; nothing is decoded): its codec, size, frame rate and frames. An
episode is as long as its shortest view. One camera's files share a codec and a size: the dataset's
kB per frame and bits per pixel are per camera (``VideoDataset.content``).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from benchbay.decode.dataset import DatasetFormatError, EpisodeVideo, VideoDataset

#: what a video file is called (the containers FFmpeg, and so every backend, reads)
VIDEO_SUFFIXES = (".mp4", ".mkv", ".webm", ".mov", ".avi")
#: the one camera of a folder whose video files lie in it
CAMERA = "video"
#: ``info["codebase_version"]`` of a plain folder, which its records' ``layout`` says
FOLDER = "folder"
EXPECTED = (f"a LeRobot dataset (meta/info.json) or a folder of video files ({', '.join(VIDEO_SUFFIXES)}), "
            "in it or in one subfolder per camera")


def open_videos(root: str | Path) -> VideoDataset:
    """The dataset at ``root``: a LeRobot dataset where it has ``meta/info.json``, else its video
    files; DatasetFormatError naming the folder and what was expected otherwise."""
    root = Path(root)
    if not root.is_dir():
        raise DatasetFormatError(f"{root}: no such folder; params.root names {EXPECTED}")
    if (root / "meta" / "info.json").exists():
        return VideoDataset.open(root)
    cameras = _camera_files(root)
    if not cameras:
        raise DatasetFormatError(f"{root}: neither a LeRobot dataset (no meta/info.json) nor a folder of video "
                                 f"files ({', '.join(VIDEO_SUFFIXES)}, in it or in one subfolder per camera)")
    probes = {camera: [_probe(path) for path in files] for camera, files in cameras.items()}
    features = {camera: _feature(root, camera, cameras[camera], found) for camera, found in probes.items()}
    lengths = tuple(min(found[episode]["frames"] for found in probes.values())
                    for episode in range(len(next(iter(cameras.values())))))
    if not all(lengths):
        empty = next(files[i] for files in cameras.values() for i, n in enumerate(lengths) if not n)
        raise DatasetFormatError(f"{empty}: holds no video frames")
    # one frame rate stands for the dataset, as LeRobot's info.json has one: the most common
    fps = Counter(found["fps"] for views in probes.values() for found in views).most_common(1)[0][0]
    info: dict[str, Any] = {"codebase_version": FOLDER, "fps": fps, "features": features}
    videos = {camera: tuple(EpisodeVideo(path, 0) for path in files) for camera, files in cameras.items()}
    return VideoDataset(root, info, lengths, videos)


def _video_files(folder: Path) -> list[Path]:
    inside = folder.resolve()
    files = sorted(p for p in folder.iterdir() if p.suffix.lower() in VIDEO_SUFFIXES and p.is_file())
    for path in files:  # a dataset's files are its own: no link out of its folder
        if not path.resolve().is_relative_to(inside):
            raise DatasetFormatError(f"{path}: leads to {path.resolve()}, outside the folder {folder}")
    return files


def _camera_files(root: Path) -> dict[str, list[Path]]:
    """Each camera's episode files, in the order of their names (see the module docstring)."""
    files = _video_files(root)
    if files:
        return {CAMERA: files}
    cameras = {sub.name: found for sub in sorted(p for p in root.iterdir() if p.is_dir())
               if (found := _video_files(sub))}
    names = {camera: [p.name for p in found] for camera, found in cameras.items()}
    first, *others = names or [None]
    for camera in others:
        if names[camera] != names[first]:
            differ = sorted(set(names[camera]) ^ set(names[first]))
            raise DatasetFormatError(f"{root}: the cameras {first} and {camera} hold different episodes "
                                     f"({', '.join(differ[:5])}): each subfolder holds one file of each name")
    return cameras


def _probe(path: Path) -> dict[str, Any]:
    """A video file's codec, size, frame rate and frames, from its header (its packets counted
    where the container keeps no frame count)."""
    try:
        import av
    except ImportError:
        raise DatasetFormatError(f"{path}: a folder of video files is read with PyAV, which this Python lacks "
                                 "(pip install av)") from None
    try:
        with av.open(str(path)) as container:
            if not container.streams.video:
                raise DatasetFormatError(f"{path}: holds no video stream")
            stream = container.streams.video[0]
            frames = stream.frames or sum(1 for packet in container.demux(stream) if packet.size)
            return {"codec": stream.codec_context.codec.canonical_name, "shape": [stream.height, stream.width, 3],
                    "fps": float(stream.average_rate or 0) or None, "frames": frames}
    except av.FFmpegError as exc:
        raise DatasetFormatError(f"{path}: not a video PyAV can read ({exc})") from None


def _feature(root: Path, camera: str, files: list[Path], probes: list[dict[str, Any]]) -> dict[str, Any]:
    """A camera's feature as LeRobot's info.json gives it; its files must agree on codec and size."""
    first = probes[0]
    for path, found in zip(files, probes, strict=True):
        for key in ("codec", "shape"):
            if found[key] != first[key]:
                raise DatasetFormatError(f"{path}: {key} {found[key]}, but {files[0].name} of the same camera "
                                         f"({root / camera if camera != CAMERA else root}) has {first[key]}: one "
                                         "camera's videos share a codec and a size (give others a subfolder)")
    return {"dtype": "video", "shape": first["shape"], "info": {"video.codec": first["codec"]}}
