"""Video decoders behind one interface: ``Backend(settings).open(path) -> Handle``,
``Handle.get_frames(indices) -> uint8 tensor (N, H, W, 3)``.

Each backend is driven two ways (``mode``):
- ``loader``: as the real training loaders drive it (RLinf: torchcodec, approximate seek, one
  FFmpeg thread; DreamZero: decord ``get_batch``; Wall-X through LeRobotDataset: PyAV, seeking to
  the keyframe before the first timestamp and converting every frame up to the last one).
- ``best``: the fastest way this library offers for the same request, as measured (docs/decoders.md): one
  decoder thread for each library (a file opened per sample and decoded over a short span pays for
  threads more than they return), and for PyAV frames found through the container's index.

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

Libraries are imported in ``open`` only: a point runs one backend in its own process, and some
combinations crash when loaded together (decord2's FFmpeg before torchcodec's, on AV1).
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
from abc import ABC, abstractmethod
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

if TYPE_CHECKING:  # torch is imported where frames are decoded: the decode workload is declared without it
    import torch

MODES = ("loader", "best")


class BackendUnavailable(RuntimeError):
    """The backend cannot run here: not installed, or not on the requested device."""


class DecodeError(RuntimeError):
    """A backend could not open or decode a file; the message names the backend, file and cause."""

    def __init__(self, backend: str, path: Path | str, reason: str):
        self.backend, self.path, self.reason = backend, Path(path), reason
        super().__init__(f"{backend} cannot decode {path}: {reason}")


@dataclass(frozen=True)
class Settings:
    """How to drive a backend. ``threads`` None = what the mode prescribes, 0 = the library's
    automatic choice; ``seek_mode`` None = what the mode prescribes (each backend's own values,
    ``Backend.seek_modes``); ``keep_open``: one decoder per file reused across samples, else a
    decoder opened per sample (as the real loaders do); ``decoder_cache`` None = the backend's own
    cache of open decoders (LeRobot's: 100), 0 = none, a decoder per view (every view a miss)."""

    mode: str = "loader"
    threads: int | None = None
    device: str = "cpu"
    seek_mode: str | None = None
    keep_open: bool = False
    decoder_cache: int | None = None

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")


class Handle(ABC):
    """One open video. ``get_frames`` returns frames in the order asked (repeats allowed)."""

    def __init__(self, backend: str, path: Path):
        self.backend, self.path = backend, path

    @property
    @abstractmethod
    def num_frames(self) -> int: ...

    def get_frames(self, indices: Sequence[int]) -> torch.Tensor:
        bad = [i for i in indices if not 0 <= i < self.num_frames]
        if bad:
            raise IndexError(f"{self.path}: frame indices {bad} outside [0, {self.num_frames})")
        try:
            return self._get_frames(list(indices))
        except DecodeError:
            raise
        except Exception as exc:  # each library raises its own types; name the file for all
            raise DecodeError(self.backend, self.path, f"{type(exc).__name__}: {exc}") from exc

    @abstractmethod
    def _get_frames(self, indices: list[int]) -> torch.Tensor: ...

    def fallback(self) -> str | None:
        """The library's own word on whether its GPU decoder handed this file to the CPU (None: it
        has none to give)."""
        return None

    @abstractmethod
    def close(self) -> None:
        """Release the file and the decoder now, not whenever garbage collection gets to them."""


class Backend(ABC):
    name: ClassVar[str]
    #: pip distribution and import name (decord and decord2 both install the module ``decord``)
    distribution: ClassVar[str]
    module: ClassVar[str]
    devices: ClassVar[tuple[str, ...]] = ("cpu",)
    #: effective options per mode; ``Settings`` fields that are set override them
    mode_options: ClassVar[dict[str, dict[str, Any]]]
    #: the ``seek_mode`` values this backend understands (none: it has one way to find frames)
    seek_modes: ClassVar[tuple[str, ...]] = ()

    def __init__(self, settings: Settings = Settings()):
        self.settings = settings
        self.options = dict(self.mode_options[settings.mode])
        if settings.threads is not None:
            self.options["threads"] = settings.threads
        if settings.seek_mode is not None:
            reason = self.seek_mode_reason(settings)
            if reason:
                raise ValueError(reason)
            self.options["seek_mode"] = settings.seek_mode
        if settings.decoder_cache is not None:
            reason = self.decoder_cache_reason(settings)
            if reason:
                raise ValueError(reason)
            self.options["decoder_cache"] = settings.decoder_cache

    @classmethod
    def decoder_cache_reason(cls, settings: Settings) -> str | None:
        """Why ``settings.decoder_cache`` does not apply to this backend (None if it does)."""
        if settings.decoder_cache is None or "decoder_cache" in cls.mode_options[settings.mode]:
            return None
        return (f"decoder_cache applies to backends with a cache of their own (lerobot), not {cls.name}: "
                "keep_open reuses its decoders")

    @classmethod
    def seek_mode_reason(cls, settings: Settings) -> str | None:
        """Why ``settings.seek_mode`` does not apply to this backend (None if it does)."""
        if settings.seek_mode is None or settings.seek_mode in cls.seek_modes:
            return None
        known = f"one of {', '.join(cls.seek_modes)}" if cls.seek_modes else "none: it has one way to find frames"
        return f"seek_mode {settings.seek_mode!r} does not apply to {cls.name} ({known})"

    @classmethod
    def unavailable_reason(cls, device: str = "cpu") -> str | None:
        """Why this backend cannot run here, found without importing it (None if it can)."""
        import torch

        try:
            dist = importlib.metadata.distribution(cls.distribution)
        except importlib.metadata.PackageNotFoundError:
            return f"backend {cls.name} not installed (pip install {cls.distribution})"
        spec = importlib.util.find_spec(cls.module)
        if spec is None or spec.origin is None:
            return f"backend {cls.name} not installed (no module {cls.module!r})"
        package_init = dist.locate_file(f"{cls.module.replace('.', '/')}/__init__.py")
        if Path(spec.origin).resolve() != Path(package_init).resolve():
            return (f"backend {cls.name}: the module {cls.module!r} imported here ({spec.origin}) is not "
                    f"{cls.distribution}'s (another distribution installs the same module)")
        if device not in cls.devices:
            return f"backend {cls.name} decodes on {'/'.join(cls.devices)} only, not {device}"
        if device == "cuda" and not torch.cuda.is_available():
            return "device cuda: no CUDA device here"
        return None

    def describe(self) -> dict[str, Any]:
        """The effective settings, for the record."""
        return {"backend": self.name, "mode": self.settings.mode, "device": self.settings.device,
                "keep_open": self.settings.keep_open, **self.options}

    def open(self, path: Path | str) -> Handle:
        path = Path(path)
        if not path.is_file():
            raise DecodeError(self.name, path, "no such file")
        try:
            return self._open(path)
        except (DecodeError, BackendUnavailable):
            raise
        except ImportError as exc:
            raise BackendUnavailable(f"backend {self.name} not installed: {exc}") from exc
        except Exception as exc:
            raise DecodeError(self.name, path, f"{type(exc).__name__}: {exc}") from exc

    @abstractmethod
    def _open(self, path: Path) -> Handle: ...


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


class _DecoderHandle(Handle):
    """A handle over a library decoder object whose ``len`` is its frame count."""

    def __init__(self, backend: str, path: Path, decoder: Any):
        super().__init__(backend, path)
        self.decoder = decoder

    @property
    def num_frames(self) -> int:
        return len(self.decoder)

    def close(self) -> None:
        self.decoder = None


class _TorchCodecHandle(_DecoderHandle):
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


class _DecordHandle(Handle):
    def __init__(self, backend: str, path: Path, reader: Any):
        super().__init__(backend, path)
        self.reader = reader

    @property
    def num_frames(self) -> int:
        return len(self.reader)

    def _get_frames(self, indices: list[int]) -> torch.Tensor:
        import torch

        return torch.from_dlpack(self.reader.get_batch(indices).to_dlpack())

    def close(self) -> None:
        self.reader = None


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


# ---- PyNvVideoCodec -----------------------------------------------------------------------------

class PyNvVideoCodec(Backend):
    """NVIDIA's PyNvVideoCodec (2.x): its ``SimpleDecoder`` (random access through the container's
    index) decoding on NVDEC to RGB in device memory. One way to drive it, so both modes are the
    same. No CPU fallback: a codec the GPU's NVDEC lacks fails (see ``nvdec_codec_reason``)."""

    name = "pynvvideocodec"
    distribution = module = "PyNvVideoCodec"
    devices = ("cuda",)
    mode_options = {mode: {"output_color_type": "RGB"} for mode in MODES}

    def _open(self, path: Path) -> Handle:
        import PyNvVideoCodec as nvc
        import torch

        decoder = nvc.SimpleDecoder(str(path), gpu_id=torch.cuda.current_device(), use_device_memory=True,
                                    output_color_type=nvc.OutputColorType.RGB)
        return _NvcHandle(self.name, path, decoder)


class _NvcHandle(_DecoderHandle):
    def _get_frames(self, indices: list[int]) -> torch.Tensor:
        import torch

        unique = sorted(set(indices))  # ascending and once each: what a forward decode serves
        frames = dict(zip(unique, self.decoder.get_batch_frames_by_index(unique), strict=True))
        return torch.stack([torch.from_dlpack(frames[i]) for i in indices])


# ---- DALI -----------------------------------------------------------------------------------------

class Dali(Backend):
    """NVIDIA DALI's ``fn.decoders.video`` on its mixed backend (FFmpeg demuxes on the CPU, NVDEC
    decodes): one pipeline per process, fed each request's file bytes and the frame indices it
    wants (its ``frames`` argument). DALI reads a file per request, so open only reads the frame
    count from the container header (PyAV); that read is part of its figures, and on v3.0 files of
    many episodes (lerobot writes up to 500 MB a file) it is the whole file for a few frames. Run on
    an H200 with DALI 2.4 (the pipeline's settings below); its colour conversion differs from
    FFmpeg's by 4.9 levels of 255 on average (tests/test_lerobot_v3.py's clips)."""

    name = "dali"
    distribution = "nvidia-dali-cuda130"
    module = "nvidia.dali"
    devices = ("cuda",)
    mode_options = {mode: {"dali_device": "mixed"} for mode in MODES}

    def __init__(self, settings: Settings = Settings()):
        super().__init__(settings)
        self._pipeline: Any = None  # built at the first open, in the process that decodes

    def _open(self, path: Path) -> Handle:
        import av
        import torch

        if self._pipeline is None:
            self._pipeline = _dali_pipeline(torch.cuda.current_device())
        with av.open(str(path)) as container:
            frames = container.streams.video[0].frames
        return _DaliHandle(self.name, path, self._pipeline, frames)


def _dali_pipeline(device_id: int) -> Any:
    from nvidia.dali import fn, pipeline_def, types

    # one request in, its frames out: DALI's default prefetch (2 iterations, pipelined, async) makes
    # run() want a second fed request and then return each request's frames one call late (seen on
    # the H200 with DALI 2.4: "Attempted to peek the data batch that doesn't exist", then the frames
    # of the previous file and indices)
    @pipeline_def(batch_size=1, num_threads=1, device_id=device_id, prefetch_queue_depth=1,
                  exec_async=False, exec_pipelined=False)
    def decode() -> Any:
        encoded = fn.external_source(name="encoded", dtype=types.UINT8, ndim=1)
        frames = fn.external_source(name="frames", dtype=types.INT32, ndim=1)
        return fn.decoders.video(encoded, device="mixed", frames=frames)

    pipeline = decode()
    pipeline.build()
    return pipeline


class _DaliHandle(Handle):
    def __init__(self, backend: str, path: Path, pipeline: Any, frames: int):
        super().__init__(backend, path)
        self.pipeline, self.frames = pipeline, frames

    @property
    def num_frames(self) -> int:
        return self.frames

    def _get_frames(self, indices: list[int]) -> torch.Tensor:
        import torch
        from nvidia.dali.plugin.pytorch import feed_ndarray

        unique = sorted(set(indices))
        self.pipeline.feed_input("encoded", [np.fromfile(self.path, dtype=np.uint8)])
        self.pipeline.feed_input("frames", [np.asarray(unique, dtype=np.int32)])
        (video,) = self.pipeline.run()
        decoded = video.as_tensor()  # (1, F, H, W, 3) on the GPU
        out = torch.empty(decoded.shape(), dtype=torch.uint8, device="cuda")
        feed_ndarray(decoded, out, cuda_stream=torch.cuda.current_stream())
        position = {index: i for i, index in enumerate(unique)}
        return out[0][[position[i] for i in indices]]

    def close(self) -> None:
        self.pipeline = None  # the backend's, shared by its handles


def nvdec_codec_reason(codec: str) -> str | None:
    """Why this machine's GPU cannot decode ``codec`` on NVDEC (None if it can, or there is no GPU
    to ask). AV1: NVIDIA's Video Codec SDK lists no AV1 decoder before GA10x, on GA100 or on Hopper."""
    import torch

    if codec != "av1" or not torch.cuda.is_available():
        return None
    capability = torch.cuda.get_device_capability()
    if capability < (8, 6) or capability == (9, 0):
        name = torch.cuda.get_device_name()
        return f"{name} (compute capability {capability[0]}.{capability[1]}) has no AV1 decoder on NVDEC"
    return None


BACKENDS: dict[str, type[Backend]] = {cls.name: cls for cls in (TorchCodec, Decord, Decord2, PyAV, LeRobot,
                                                                 PyNvVideoCodec, Dali)}


def backend(name: str, settings: Settings = Settings()) -> Backend:
    try:
        cls = BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown decode backend {name!r}; known: {sorted(BACKENDS)}") from None
    return cls(settings)
