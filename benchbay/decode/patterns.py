"""Access patterns: which frames of which videos one training sample asks for.

Sample ``i`` is a pure function of (pattern, dataset, seed, i), so every backend is asked for
exactly the same frames and their outputs can be compared.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from benchbay.decode.dataset import VideoDataset


@dataclass(frozen=True)
class ViewRequest:
    """Frames of one camera's episode, in the order the sample wants them: ``indices`` counted from
    the episode's start, ``first_frame`` where it starts in ``path`` (v3.0: after earlier episodes)."""

    camera: str
    episode: int
    path: Path
    indices: tuple[int, ...]
    first_frame: int = 0

    @property
    def file_indices(self) -> tuple[int, ...]:
        """The frames' indices in the file, what a decoder is asked for."""
        return tuple(self.first_frame + i for i in self.indices)


class Pattern(ABC):
    name: ClassVar[str]
    help: ClassVar[str]

    def __init__(self, dataset: VideoDataset, seed: int = 0):
        self.dataset, self.seed = dataset, seed

    def sample(self, i: int) -> list[ViewRequest]:
        """One request per camera for sample ``i``."""
        rng = np.random.default_rng([self.seed, i])
        episode = int(rng.integers(self.dataset.episodes))
        indices = self._indices(rng, self.dataset.lengths[episode])
        return [ViewRequest(camera, episode, self.dataset.video_path(camera, episode), indices,
                            self.dataset.first_frame(camera, episode)) for camera in self.dataset.cameras]

    @abstractmethod
    def _indices(self, rng: np.random.Generator, length: int) -> tuple[int, ...]: ...


class DreamZeroClip(Pattern):
    """The frames one DreamZero-5B training sample takes from each view. Upstream
    (dreamzero0/dreamzero@ab790c198fbc:groot/vla/data/dataset/lerobot_sharded.py,
    ShardedLeRobotSubLangSingleActionChunkDatasetDROID, ``_uniform_sample_from_language_ranges``)
    draws a step, then takes chunks of 8 frames (offsets 0, 3, ..., 21) from anchors 24 frames
    apart: the step's own, then alternately one further back and one further forward (while the
    task's language stays the same: one task here), each anchor needing its 24-frame action chunk
    inside the episode, up to ``max_chunk_size`` chunks (4 in scripts/train/droid_training_wan22.sh;
    the data config's 5 is overridden there), and adds the frame 3 after the last (or drops the last
    chunk's 7 when that lies past the end): 8n+1 frames,
    33 = 9 latent frames for the 5B's Wan2.2 VAE. Upstream decodes whole episodes into a shard cache
    and indexes it; this pattern decodes just those frames, as a per-step loader (RLinf's) does.

    The script: dreamzero0/dreamzero@ab790c198fbc:scripts/train/droid_training_wan22.sh;
    the data config's 5:
    dreamzero0/dreamzero@ab790c198fbc:groot/vla/configs/data/dreamzero/droid_relative_wan22.yaml;
    the shard cache: the same class's ``start_cache_shard`` / ``get_shard``, decoding with decord's
    ``get_batch`` (``video_backend: decord``) through ``get_frames_by_timestamps`` in
    dreamzero0/dreamzero@ab790c198fbc:groot/vla/common/utils/misc/video_utils.py;
    RLinf's per-sample decode: ``DreamZeroLeRobotDataset._decode_video_frames_torchcodec`` in
    RLinf/RLinf@a3816b596478:rlinf/data/datasets/dreamzero/lerobot_dataset.py."""

    name = "dreamzero"
    help = ("one DreamZero-5B training sample as upstream's groot/vla/data/dataset/lerobot_sharded.py "
            "(ShardedLeRobotSubLangSingleActionChunkDatasetDROID) takes it: 4 chunks of frames 0,3,...,21 "
            "from anchors 24 apart around a random step, plus one: 33 frames at stride 3 from every camera "
            "(fewer near an episode's end)")
    chunks = 4  # max_chunk_size of the 5B training scripts
    anchor_stride = 24  # frames between chunk anchors, and each anchor's action chunk
    offsets = tuple(range(0, 22, 3))  # a chunk's frames from its anchor
    last_offset = 3  # the frame added after the last chunk

    def _indices(self, rng: np.random.Generator, length: int) -> tuple[int, ...]:
        # upstream steps (ShardedLeRobotMixtureDataset.__iter__, lerobot_sharded.py above):
        # 0 .. length - the largest delta index (24); a step whose chunks leave
        # fewer than 9 frames yields no video there: draw another (step 0 always has 9 or more)
        if length <= self.anchor_stride:
            raise ValueError(f"episodes of {length} frames are shorter than the {self.anchor_stride + 1} "
                             f"frames a DreamZero sample needs")
        while not (frames := self.frames_for_step(int(rng.integers(length - self.anchor_stride + 1)), length)):
            pass
        return frames

    @classmethod
    def frames_for_step(cls, step: int, length: int) -> tuple[int, ...]:
        """The frame indices upstream takes for ``step`` of an episode of ``length`` frames (one
        language annotation throughout); empty when it takes none."""
        def fits(anchor: int) -> bool:
            return 0 <= anchor and anchor + cls.anchor_stride - 1 < length

        anchors = [step] if fits(step) else []
        back, forward = step - cls.anchor_stride, step + cls.anchor_stride
        while len(anchors) < cls.chunks and (back >= 0 or forward < length):
            if back >= 0:
                anchors.append(back)
                back -= cls.anchor_stride
            if len(anchors) < cls.chunks and forward < length:
                if fits(forward):
                    anchors.append(forward)
                forward += cls.anchor_stride
        frames = sorted({anchor + offset for anchor in anchors for offset in cls.offsets})
        if frames and frames[-1] + cls.last_offset < length:
            return (*frames, frames[-1] + cls.last_offset)
        if len(frames) > len(cls.offsets):
            return tuple(frames[:1 - len(cls.offsets)])
        return ()


class DreamZeroFullClip(DreamZeroClip):
    """As ``dreamzero``, from steps that yield the whole clip only: the 5B model's fixed 33 frames
    (9 latent frames) that a training step at its real shapes takes."""

    name = "dreamzero_full"
    help = "as dreamzero, only steps whose sample has all 33 frames (the model's fixed clip)"
    frames = 1 + len(DreamZeroClip.offsets) * DreamZeroClip.chunks

    def _indices(self, rng: np.random.Generator, length: int) -> tuple[int, ...]:
        if length < self.anchor_stride * self.chunks + 1:
            raise ValueError(f"episodes of {length} frames are shorter than a whole {self.frames}-frame "
                             f"DreamZero clip ({self.anchor_stride * self.chunks + 1} frames)")
        while len(frames := super()._indices(rng, length)) != self.frames:
            pass
        return frames


class CurrentFrame(Pattern):
    """Wall-X's sample: ``LeRobotDataset`` with ``delta_timestamps`` for the action chunk only, so each
    camera yields its current frame (``load_lerobot_data`` in
    X-Square-Robot/wall-x@17335bcc3dd8:wall_x/data/load_lerobot_dataset.py)."""

    name = "wallx"
    help = "one random current frame from every camera (Wall-X through LeRobotDataset)"

    def _indices(self, rng: np.random.Generator, length: int) -> tuple[int, ...]:
        return (int(rng.integers(length)),)


class WholeEpisode(Pattern):
    name = "sequential"
    help = "every frame of a random episode from every camera"

    def _indices(self, rng: np.random.Generator, length: int) -> tuple[int, ...]:
        return tuple(range(length))


PATTERNS: dict[str, type[Pattern]] = {cls.name: cls for cls in (DreamZeroClip, DreamZeroFullClip, CurrentFrame,
                                                                 WholeEpisode)}
