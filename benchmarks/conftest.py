"""Micro-benchmarks (pytest-benchmark), kept out of the unit tests: run them with
``pytest --benchmark-only benchmarks/``."""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable

import pytest

from benchbay.decode.clips import PRESETS, cached_dataset
from benchbay.decode.dataset import VideoDataset

#: frames per episode of the benchmark datasets (the presets' resolution, codec and GOP)
EPISODE_FRAMES = 120


def pytest_ignore_collect(collection_path, config: pytest.Config) -> bool | None:
    """Leave the benchmarks out of any run that is not ``--benchmark-only``."""
    if collection_path.suffix == ".py" and not config.getoption("benchmark_only", default=False):
        return True
    return None


def pytest_configure(config: pytest.Config) -> None:
    # decord2's FFmpeg crashes torchcodec on AV1 when it is loaded first; load torchcodec first
    if importlib.util.find_spec("torchcodec") is not None:
        import torchcodec.decoders  # noqa: F401


@pytest.fixture(scope="session")
def decode_dataset() -> Callable[[str], VideoDataset]:
    """The synthetic dataset of a preset, generated once into benchbay's decode cache."""

    @functools.cache
    def of(preset: str) -> VideoDataset:
        return VideoDataset.open(cached_dataset(PRESETS[preset].replace(episode_frames=EPISODE_FRAMES)))

    return of
