"""The decode workload's declaration: the knobs and params a suite may set (read without torch)."""

from __future__ import annotations

from benchbay.decode.backends import BACKENDS
from benchbay.decode.clips import PRESETS
from benchbay.decode.patterns import PATTERNS
from benchbay.knobs import Choice
from benchbay.workloads.base import StepWorkload


class DecodeDeclaration(StepWorkload):
    """What a suite may set for decode (its knobs and params), without the decoding code."""

    name = "decode"
    knobs = {
        "preset": Choice(tuple(PRESETS), "synthetic dataset: " + "; ".join(
            f"{n}: {len(c.cameras)} views {c.codec} {c.height}x{c.width} {c.fps} fps" for n, c in PRESETS.items())),
        "backend": Choice(tuple(BACKENDS), "video decoding library"),
        "mode": Choice(("loader", "best"), "loader: as real loaders drive the backend; best: its fastest way"),
        "pattern": Choice(tuple(PATTERNS), "; ".join(f"{n}: {p.help}" for n, p in PATTERNS.items())),
        "threads": Choice(("mode", 0, 1, 2, 4, 8), "decoder threads; mode: as the mode prescribes, 0: automatic"),
        "seek_mode": Choice(("mode", "approximate", "exact", "keyframe", "index"),
                            "how frames are found; mode: as the mode prescribes; torchcodec: approximate | exact; "
                            "pyav (best): keyframe (seek, decode on) | index (demux the file at open)"),
        "device": Choice(("cpu", "cuda"), "where frames are decoded (cuda: NVDEC)"),
        "keep_open": Choice((False, True), "reuse each file's decoder across samples (else open per sample)"),
        "decoder_cache": Choice(("mode", 0, 100), "lerobot: its LRU of open decoders (mode: lerobot's 100; "
                                                  "0: a decoder per view, every view a cache miss)"),
        "num_workers": Choice((0, 1, 2, 4, 8), "DataLoader worker processes (0: decode in the main process)"),
        "prefetch_factor": Choice((2, 4, 8), "batches each worker prepares ahead"),
        "pin_memory": Choice((False, True), "DataLoader pin_memory (only with CUDA)"),
        "interference": Choice(("off", "on"), "on: time a fixed foreground step (tiny CUDA kernels on GPU, "
                                              "matmuls on CPU) between samples, against it alone"),
    }
    params = {
        "root": None,  # an existing LeRobot-layout dataset instead of the synthetic one
        # overrides of the preset's clip spec (None keeps the preset's value)
        "episode_frames": None, "episodes": None, "height": None, "width": None,
        "codec": None, "gop": None, "crf": None, "encoder_preset": None,
        # content: fine texture and per-frame noise amplitudes (0-255); more noise, more kB per frame
        "grain": None, "noise": None,
        # LeRobot layout written: v2.1 (a file per episode) | v3.0 (episodes_per_file episodes a file)
        "layout": None, "episodes_per_file": None,
        "warmup_samples": 2,  # first samples left out of the latency statistics
    }
