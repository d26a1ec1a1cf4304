"""The backends over FFmpeg's libraries: torchcodec (on the CPU or cuda), LeRobot's path over it,
decord and decord2, and PyAV.

``lerobot`` is not a library but LeRobot's own decoding path (lerobot's datasets/video_utils.py)
over torchcodec: its decoder cache, approximate seeking, ``get_frames_at`` and the timestamp check,
with a sample's cameras decoded in parallel threads (``view_threads``, applied by the sample decoder).

Upstream:
- RLinf: ``DreamZeroLeRobotDataset._decode_video_frames_torchcodec`` in
  RLinf/RLinf@a3816b596478:rlinf/data/datasets/dreamzero/lerobot_dataset.py
- DreamZero: ``get_frames_by_timestamps`` (decord ``VideoReader.get_batch``) in
  dreamzero0/dreamzero@ab790c198fbc:groot/vla/common/utils/misc/video_utils.py
- Wall-X: ``LeRobotDataset(..., video_backend="pyav")`` in
  X-Square-Robot/wall-x@17335bcc3dd8:wall_x/data/load_lerobot_dataset.py::load_lerobot_data
- LeRobot: ``decode_video_frames_torchcodec``, ``VideoDecoderCache`` (``DEFAULT_DECODER_CACHE_SIZE`` 100,
  ``seek_mode="approximate"``) and ``decode_video_frames_pyav`` in
  huggingface/lerobot@d0af05771fd4:src/lerobot/datasets/video_utils.py; the per-camera threads in
  huggingface/lerobot@d0af05771fd4:src/lerobot/datasets/dataset_reader.py::DatasetReader._query_videos;
  ``tolerance_s=1e-4``: ``LeRobotDataset.__init__`` in
  huggingface/lerobot@d0af05771fd4:src/lerobot/datasets/lerobot_dataset.py.
  The tolerance check here rejects an offset equal to ``tolerance_s``, as lerobot did at this commit
  (its comparison became ``<=`` in e081bbdebe77).
"""

from __future__ import annotations

import functools
import importlib.util
from bisect import bisect_right
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from benchbay.decode.backends.base import (
    MODES,
    Backend,
    BackendUnavailable,
    DecodeError,
    DecoderHandle,
    Handle,
    Settings,
)

if TYPE_CHECKING:  # torch is imported where frames are decoded: the decode workload is declared without it
    import torch


# ---- torchcodec ---------------------------------------------------------------------------------

class TorchCodec(Backend):
    name = "torchcodec"
    distribution = module = "torchcodec"
    devices = ("cpu", "cuda")
    # RLinf: a VideoDecoder per sample, approximate seek (no scan of the file), torchcodec's default
    # single FFmpeg thread; that is also its fastest way: FFmpeg's automatic threads took 1.0-1.7x
    # the time, exact seek 1.0-1.05x (DreamZero samples, GOP 12 / one keyframe / AV1 GOP 2)
    mode_options = {"loader": {"seek_mode": "approximate", "threads": 1},
                    "best": {"seek_mode": "approximate", "threads": 1}}
    seek_modes = ("approximate", "exact")

    def _open(self, path: Path) -> Handle:
        _load_bundled_ffmpeg()
        from torchcodec.decoders import VideoDecoder

        decoder = VideoDecoder(str(path), dimension_order="NHWC", seek_mode=self.options["seek_mode"],
                               num_ffmpeg_threads=self.options["threads"], device=self.settings.device)
        return _TorchCodecHandle(self.name, path, decoder)


@functools.cache  # once a process: _open runs per sample, and a search for an absent module walks sys.path
def _load_bundled_ffmpeg() -> None:
    """Load PyAV's bundled FFmpeg, where PyAV is installed, before torchcodec looks for one. On a
    host whose only FFmpeg is PyAV's (the GPU host, its libraries linked under their plain sonames)
    torchcodec's libraries find those by name, but each needs its siblings under their hashed names,
    which only an import of av has loaded: without it every training-loop torchcodec point on the
    H200 failed with "Could not load libtorchcodec" (libdrm-b0291a67.so.2.4.0 not found)."""
    if importlib.util.find_spec("av") is not None:
        import av  # noqa: F401


class LeRobot(TorchCodec):
    """LeRobot's path: one torchcodec decoder per file kept in an LRU cache (``decoder_cache``
    entries; lerobot's VideoDecoderCache), approximate seeking and torchcodec's default FFmpeg
    threads, query timestamps turned into indices on the file's average fps for ``get_frames_at``,
    and every frame's pts checked to lie within ``tolerance_s`` of its query (lerobot raises
    otherwise). Left out: lerobot's cast of the frames to float32 in [0, 1], so that this backend's
    frames compare with the others' uint8 ones."""

    name = "lerobot"
    mode_options = {mode: {"seek_mode": "approximate", "threads": 1, "decoder_cache": 100, "tolerance_s": 1e-4,
                           "view_threads": True} for mode in MODES}

    def _open(self, path: Path) -> Handle:
        handle = super()._open(path)
        return _LeRobotHandle(self.name, path, handle.decoder, self.options["tolerance_s"])


class _TorchCodecHandle(DecoderHandle):
    def _get_frames(self, indices: list[int]) -> torch.Tensor:
        return self.decoder.get_frames_at(indices).data

    def fallback(self) -> str | None:
        # torchcodec on cuda: CpuFallbackStatus (e.g. video_not_supported=True, is_fallback=True
        # for AV1 on an H200); its str names the fields. Older torchcodec: none
        status = getattr(self.decoder, "cpu_fallback", None)
        return None if status is None else str(status)


class _LeRobotHandle(_TorchCodecHandle):
    def __init__(self, backend: str, path: Path, decoder: Any, tolerance_s: float):
        super().__init__(backend, path, decoder)
        self.tolerance_s = tolerance_s
        self.fps = decoder.metadata.average_fps

    def _get_frames(self, indices: list[int]) -> torch.Tensor:
        import torch

        # lerobot asks for timestamps (the episode's from_timestamp + the frame's own) and rounds
        # them back to indices on the file's average fps
        query = torch.tensor(indices, dtype=torch.float64) / self.fps
        batch = self.decoder.get_frames_at([round(float(t) * self.fps) for t in query])
        off = (batch.pts_seconds.double() - query).abs()
        if (off >= self.tolerance_s).any():
            pairs = zip(query, batch.pts_seconds, off, strict=True)
            bad = [(round(float(q), 4), round(float(p), 4)) for q, p, o in pairs if o >= self.tolerance_s]
            raise DecodeError(self.backend, self.path, f"frames beyond tolerance_s={self.tolerance_s} of their "
                                                       f"query timestamps (query, loaded): {bad}")
        return batch.data


# ---- decord / decord2 ---------------------------------------------------------------------------

class Decord(Backend):
    name = "decord"
    distribution = "decord"
    module = "decord"
    # DreamZero's loader: VideoReader + get_batch with decord's automatic threads. get_batch is
    # decord's only batch path; best drives it with one thread, the least CPU a view (automatic
    # threads: 1.2x the time on the 2-core machine; on the 16-core H200 host 0.62x the wall at 1.5x the CPU)
    mode_options = {"loader": {"threads": 0}, "best": {"threads": 1}}

    @classmethod
    def _is_this_package(cls, version: str) -> bool:
        return int(version.split(".")[0]) < 1  # decord 0.x; decord2 counts from 3.x

    def _open(self, path: Path) -> Handle:
        import decord

        if not self._is_this_package(decord.__version__):
            raise BackendUnavailable(f"backend {self.name}: the module 'decord' here is version "
                                     f"{decord.__version__}, from another distribution")
        ctx = decord.gpu(0) if self.settings.device == "cuda" else decord.cpu(0)
        return _DecordHandle(self.name, path, decord.VideoReader(str(path), ctx=ctx,
                                                                num_threads=self.options["threads"]))


class Decord2(Decord):
    name = "decord2"
    distribution = "decord2"
    devices = ("cpu", "cuda")

    @classmethod
    def _is_this_package(cls, version: str) -> bool:
        return not Decord._is_this_package(version)


class _DecordHandle(DecoderHandle):
    """Over a decord ``VideoReader``."""

    def _get_frames(self, indices: list[int]) -> torch.Tensor:
        import torch

        return torch.from_dlpack(self.decoder.get_batch(indices).to_dlpack())


# ---- PyAV ---------------------------------------------------------------------------------------

class PyAV(Backend):
    """loader: LeRobot's PyAV path (FFmpeg's default slice threading, every decoded frame converted).
    best (the least CPU a view, as every backend's best): one thread, only the requested frames
    converted, frames found through the container's own index (``index``: read at open, no pass over the
    file): decode on from where the decoder stands unless a keyframe lies between, then seek. The other
    way, ``keyframe`` (seek to the keyframe before the first requested frame, decode on to the last), is
    best's where a stream's index cannot be read at open (reordered frames): a pass over the packets at
    every open cost 1.48x on GOP-12 H.264 with a decoder per sample. With one thread the index route
    took 0.66x the time of the keyframe route on GOP-2 AV1, 0.94-0.97x on GOP-12 H.264 and tied on one
    keyframe per episode; with FFmpeg's frame threads every seek flushes them and the keyframe route won
    (docs/decoders.md)."""

    name = "pyav"
    distribution = module = "av"
    mode_options = {"loader": {"thread_type": "SLICE", "threads": 0, "seek_mode": "keyframe"},
                    "best": {"thread_type": "AUTO", "threads": 1, "seek_mode": "index"}}
    seek_modes = ("keyframe", "index")

    @classmethod
    def seek_mode_reason(cls, settings: Settings) -> str | None:
        if settings.mode == "loader" and settings.seek_mode not in (None, "keyframe"):
            return "PyAV's loader mode is LeRobot's route (seek_mode keyframe); other seek modes are for best"
        return super().seek_mode_reason(settings)

    def _open(self, path: Path) -> Handle:
        import av

        container = av.open(str(path))
        if not container.streams.video:
            container.close()
            raise DecodeError(self.name, path, "no video stream")
        stream = container.streams.video[0]
        stream.thread_type = self.options["thread_type"]
        stream.codec_context.thread_count = self.options["threads"]
        if self.settings.mode == "loader":
            return _LeRobotPyAVHandle(self.name, path, container, stream)
        if self.options["seek_mode"] == "index":
            stamps = _container_index(stream)
            if stamps is not None or self.settings.seek_mode == "index":  # asked for: index by demuxing
                return _IndexedPyAVHandle(self.name, path, container, stream, stamps)
        return _KeyframePyAVHandle(self.name, path, container, stream)


def _container_index(stream: Any) -> list[tuple[int, bool]] | None:
    """(pts, keyframe) of every frame from the demuxer's own index (an mp4's sample table, read at
    open), or None when it cannot serve: incomplete, or frames reordered (its decode timestamps are
    then not the presentation ones)."""
    entries = stream.index_entries
    if stream.codec_context.has_b_frames or len(entries) != stream.frames:
        return None
    return [(entry.timestamp, entry.is_keyframe) for entry in entries]


class _PyAVHandle(Handle):
    def __init__(self, backend: str, path: Path, container: Any, stream: Any):
        super().__init__(backend, path)
        self.container, self.stream = container, stream
        self.fps = float(stream.average_rate)
        self.start = stream.start_time or 0  # in stream time base
        self.start_s = float(self.start * stream.time_base)

    @property
    def num_frames(self) -> int:
        return self.stream.frames

    def close(self) -> None:
        self.container.close()

    def _seek(self, pts: int) -> None:
        """To the keyframe at or before ``pts`` (the container flushes the decoder)."""
        self.container.seek(pts, backward=True, any_frame=False, stream=self.stream)

    def _frames_from_keyframe(self, first_s: float, last_s: float) -> Iterator[Any]:
        """Seek to the keyframe at or before ``first_s`` (seconds from the stream's start), then
        yield the decoded frames up to the first at or after ``last_s``."""
        self._seek(self.start + round(first_s / self.stream.time_base))
        for frame in self.container.decode(self.stream):
            yield frame
            if frame.time - self.start_s >= last_s - 1e-6:
                return


class _LeRobotPyAVHandle(_PyAVHandle):
    """LeRobot's pyav route: seek to the keyframe before the first requested timestamp, decode and
    convert every frame up to the last one, then take the frame nearest each timestamp."""

    def _get_frames(self, indices: list[int]) -> torch.Tensor:
        import torch

        wanted = np.asarray(indices, dtype=np.float64) / self.fps
        times, frames = [], []
        for frame in self._frames_from_keyframe(wanted.min(), wanted.max()):
            times.append(frame.time - self.start_s)
            frames.append(frame.to_ndarray(format="rgb24"))
        nearest = np.abs(np.asarray(times)[None, :] - wanted[:, None]).argmin(axis=1)
        return torch.from_numpy(np.stack([frames[i] for i in nearest]))


class _KeyframePyAVHandle(_PyAVHandle):
    """Seek to the keyframe before the first requested frame, decode on to the last one, convert
    only the requested frames (identified by their timestamps on the constant frame rate)."""

    def _get_frames(self, indices: list[int]) -> torch.Tensor:
        import torch

        wanted = set(indices)
        decoded: dict[int, np.ndarray] = {}
        for frame in self._frames_from_keyframe(min(indices) / self.fps, max(indices) / self.fps):
            index = round((frame.time - self.start_s) * self.fps)
            if index in wanted:
                decoded[index] = frame.to_ndarray(format="rgb24")
        missing = wanted - decoded.keys()
        if missing:
            raise DecodeError(self.backend, self.path, f"no frames with indices {sorted(missing)} decoded")
        return torch.from_numpy(np.stack([decoded[i] for i in indices]))


class _IndexedPyAVHandle(_PyAVHandle):
    """Index the frames at open (no decoding), then per request decode on from where the decoder
    stands when no keyframe lies between, else seek to the target's keyframe; convert only the
    requested frames. ``stamps``: (pts, keyframe) per frame from the container's index; None: index
    by a pass over the file's packets."""

    def __init__(self, backend: str, path: Path, container: Any, stream: Any,
                 stamps: list[tuple[int, bool]] | None = None):
        super().__init__(backend, path, container, stream)
        if stamps is None:
            stamps = [(packet.pts, packet.is_keyframe) for packet in container.demux(stream) if packet.pts is not None]
        keyframe_pts = [pts for pts, keyframe in stamps if keyframe]
        self.pts = sorted(pts for pts, _ in stamps)  # presentation order: index -> pts
        self.index_of = {pts: i for i, pts in enumerate(self.pts)}
        self.keyframes = sorted(self.index_of[p] for p in keyframe_pts)
        self._frames = None  # the running decode generator
        self._next = 0  # index of the frame it yields next
        self._seek_to(0)

    @property
    def num_frames(self) -> int:
        return len(self.pts)

    def _seek_to(self, index: int) -> None:
        self._seek(self.pts[index])
        self._frames = self.container.decode(self.stream)
        self._next = index

    def _get_frames(self, indices: list[int]) -> torch.Tensor:
        import torch

        decoded: dict[int, np.ndarray] = {}
        for target in sorted(set(indices)):
            keyframe = self.keyframes[bisect_right(self.keyframes, target) - 1]
            if not keyframe <= self._next <= target:
                self._seek_to(keyframe)
            for frame in self._frames:
                index = self.index_of.get(frame.pts)
                if index is None:
                    raise DecodeError(self.backend, self.path, f"a frame at pts {frame.pts} is not in the index")
                self._next = index + 1
                if index == target:
                    decoded[target] = frame.to_ndarray(format="rgb24")
                    break
            else:
                raise DecodeError(self.backend, self.path, f"the stream ended before frame {target}")
        return torch.from_numpy(np.stack([decoded[i] for i in indices]))
