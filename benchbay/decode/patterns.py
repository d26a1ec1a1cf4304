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

from benchbay.decode.clips import VideoDataset


@dataclass(frozen=True)
class ViewRequest:
    """Frames of one camera's video, in the order the sample wants them."""

    camera: str
    episode: int
    path: Path
    indices: tuple[int, ...]


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
        return [ViewRequest(camera, episode, self.dataset.video_path(camera, episode), indices)
                for camera in self.dataset.cameras]

    @abstractmethod
    def _indices(self, rng: np.random.Generator, length: int) -> tuple[int, ...]: ...


class DreamZeroClip(Pattern):
    name = "dreamzero"
    help = "a random anchor, frames at offsets 0,3,...,21 (8 frames) from every camera"
    stride, frames = 3, 8

    def _indices(self, rng: np.random.Generator, length: int) -> tuple[int, ...]:
        span = self.stride * (self.frames - 1) + 1
        if length < span:
            raise ValueError(f"episodes of {length} frames are shorter than a {span}-frame DreamZero clip")
        anchor = int(rng.integers(length - span + 1))
        return tuple(anchor + self.stride * k for k in range(self.frames))


class CurrentFrame(Pattern):
    name = "wallx"
    help = "one random current frame from every camera (Wall-X through LeRobotDataset)"

    def _indices(self, rng: np.random.Generator, length: int) -> tuple[int, ...]:
        return (int(rng.integers(length)),)


class WholeEpisode(Pattern):
    name = "sequential"
    help = "every frame of a random episode from every camera"

    def _indices(self, rng: np.random.Generator, length: int) -> tuple[int, ...]:
        return tuple(range(length))


PATTERNS: dict[str, type[Pattern]] = {cls.name: cls for cls in (DreamZeroClip, CurrentFrame, WholeEpisode)}
