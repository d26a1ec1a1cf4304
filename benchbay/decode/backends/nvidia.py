"""NVIDIA's GPU decoders: PyNvVideoCodec and DALI, and whether this machine's NVDEC decodes a codec."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from benchbay.decode.backends.base import MODES, Backend, DecoderHandle, Handle, Settings

if TYPE_CHECKING:  # torch is imported where frames are decoded: the decode workload is declared without it
    import torch


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


class _NvcHandle(DecoderHandle):
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

    def __init__(self, settings: Settings = Settings()):  # noqa: B008 (Settings is frozen)
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
