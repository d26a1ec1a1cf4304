"""Video decoders behind one interface (``base``): ``Backend(settings).open(path) -> Handle``,
``Handle.get_frames(indices) -> uint8 tensor (N, H, W, 3)``; the libraries over FFmpeg in ``ffmpeg``,
NVIDIA's GPU decoders in ``nvidia``; here the backends by name, with what their users need of the
interface (``Settings``, ``MODES``, ``DecodeError``).

Libraries are imported in ``open`` only: a point runs one backend in its own process, and some
combinations crash when loaded together (decord2's FFmpeg before torchcodec's, on AV1).
"""

from __future__ import annotations

from benchbay.decode.backends.base import MODES, Backend, DecodeError, Settings
from benchbay.decode.backends.ffmpeg import Decord, Decord2, LeRobot, PyAV, TorchCodec
from benchbay.decode.backends.nvidia import Dali, PyNvVideoCodec

__all__ = ["BACKENDS", "MODES", "DecodeError", "Settings", "backend"]

BACKENDS: dict[str, type[Backend]] = {cls.name: cls for cls in (TorchCodec, Decord, Decord2, PyAV, LeRobot,
                                                                 PyNvVideoCodec, Dali)}


def backend(name: str, settings: Settings = Settings()) -> Backend:  # noqa: B008 (Settings is frozen)
    try:
        cls = BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown decode backend {name!r}; known: {sorted(BACKENDS)}") from None
    return cls(settings)
