"""The interface every video decoder is behind: ``Backend(settings).open(path) -> Handle``,
``Handle.get_frames(indices) -> uint8 tensor (N, H, W, 3)``, the ``Settings`` that drive a backend
and the errors it raises.

Each backend is driven two ways (``mode``):
- ``loader``: as the real training loaders drive it (RLinf: torchcodec, approximate seek, one
  FFmpeg thread; DreamZero: decord ``get_batch``; Wall-X through LeRobotDataset: PyAV, seeking to
  the keyframe before the first timestamp and converting every frame up to the last one).
- ``best``: the fastest way this library offers for the same request, as measured (docs/decoders.md): one
  decoder thread for each library (a file opened per sample and decoded over a short span pays for
  threads more than they return), and for PyAV frames found through the container's index.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

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


class DecoderHandle(Handle):
    """A handle over a library decoder object whose ``len`` is its frame count."""

    def __init__(self, backend: str, path: Path, decoder: Any):
        super().__init__(backend, path)
        self.decoder = decoder

    @property
    def num_frames(self) -> int:
        return len(self.decoder)

    def close(self) -> None:
        self.decoder = None
