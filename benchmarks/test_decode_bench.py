"""One view of a DreamZero-5B sample (33 frames at stride 3), opened and decoded, per preset,
backend and mode: the smallest unit the decode workload repeats. The parameters are named like the
decode workload's knobs, so an imported pytest-benchmark run lines up with it."""

from __future__ import annotations

import pytest

from benchbay.decode import backends
from benchbay.decode.clips import PRESETS
from benchbay.decode.patterns import DreamZeroClip


@pytest.mark.parametrize("mode", backends.MODES)
@pytest.mark.parametrize("backend", sorted(backends.BACKENDS))
@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_dreamzero_view(benchmark, decode_dataset, preset, backend, mode):
    reason = backends.BACKENDS[backend].unavailable_reason()
    if reason:
        pytest.skip(reason)
    dataset = decode_dataset(preset)
    view = DreamZeroClip(dataset, seed=0).sample(0)[0]
    decoder = backends.backend(backend, backends.Settings(mode=mode))
    try:
        decoder.open(view.path).close()
    except backends.DecodeError as exc:  # e.g. decord cannot open AV1
        pytest.skip(str(exc))

    def open_and_decode():
        handle = decoder.open(view.path)
        frames = handle.get_frames(view.indices)
        handle.close()
        return frames

    frames = benchmark(open_and_decode)
    benchmark.extra_info.update(decoder.describe(), codec=dataset.codec(view.camera), frames=len(view.indices))
    assert frames.shape[0] == len(view.indices)
