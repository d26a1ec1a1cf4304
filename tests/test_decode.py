"""The decoder comparison on tiny clips: dataset layout, frame agreement across backends, failures
that are recorded rather than fatal, and the ``decode`` workload end to end."""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import av
import numpy as np
import pandas as pd
import pytest
import torch

from benchbay.decode import clips
from benchbay.decode.backends import BACKENDS, MODES, DecodeError, Settings, backend
from benchbay.decode.backends.ffmpeg import Decord2
from benchbay.decode.clips import PRESETS, source_frame, write_dataset
from benchbay.decode.dataset import DatasetFormatError, VideoDataset
from benchbay.decode.folder import open_videos
from benchbay.decode.loader import SampleDecoder
from benchbay.decode.measure import FRAME_TOLERANCE, fingerprint, mean_abs_diff
from benchbay.decode.patterns import PATTERNS, DreamZeroClip
from benchbay.launch.base import PointSpec
from benchbay.suite import Steps
from benchbay.workloads.decode import Decode
from tests.conftest import InProcessLauncher

REPO = Path(__file__).resolve().parents[1]
TINY = {
    "droid": PRESETS["droid"].replace(height=64, width=96, episode_frames=30, episodes=2),
    "libero": PRESETS["libero"].replace(height=64, width=64, episode_frames=24),
}
CODEC = {"droid": "h264", "libero": "av1"}
INDICES = (23, 2, 5, 5, 11)  # unsorted, repeated, spanning keyframes
# decord2 installs the module `decord` too, and its FFmpeg crashes torchcodec on AV1 when loaded first:
# it is only ever run in a subprocess
IN_PROCESS = [name for name in ("torchcodec", "decord", "pyav") if BACKENDS[name].unavailable_reason() is None]


@pytest.fixture(scope="module")
def datasets(tmp_path_factory) -> dict[str, VideoDataset]:
    root = tmp_path_factory.mktemp("decode")
    return {name: VideoDataset.open(write_dataset(root / name, spec, seed=3)) for name, spec in TINY.items()}


def _can_decode(name: str, preset: str) -> bool:
    return not (name == "decord" and CODEC[preset] == "av1")  # decord 0.6 cannot open AV1


# ---- datasets -----------------------------------------------------------------------------------

@pytest.mark.parametrize("preset", sorted(TINY))
def test_dataset_layout_codec_size_and_frame_count(datasets, preset):
    ds, spec = datasets[preset], TINY[preset]
    assert ds.fps == spec.fps and ds.lengths == (spec.episode_frames,) * spec.episodes
    assert len(ds.cameras) == len(spec.cameras) == {"droid": 3, "libero": 2}[preset]
    for episode in range(spec.episodes):
        table = pd.read_parquet(ds.root / f"data/chunk-000/episode_{episode:06d}.parquet")
        assert len(table) == spec.episode_frames
        assert {"observation.state", "action", "timestamp", "frame_index"} <= set(table.columns)
        assert table["frame_index"].tolist() == list(range(spec.episode_frames))
        assert np.allclose(table["timestamp"], np.arange(spec.episode_frames) / spec.fps)
        for camera in ds.cameras:
            path = ds.root / f"videos/chunk-000/{camera}/episode_{episode:06d}.mp4"
            assert ds.video_path(camera, episode) == path
            with av.open(str(path)) as container:
                stream = container.streams.video[0]
                keyframes = [p.is_keyframe for p in container.demux(stream) if p.pts is not None]
                assert stream.codec_context.codec.canonical_name == CODEC[preset] == ds.codec(camera)
                assert (stream.width, stream.height) == (spec.width, spec.height)
                assert stream.codec_context.pix_fmt == "yuv420p"
            assert len(keyframes) == spec.episode_frames
            if spec.gop:
                assert sum(keyframes) == -(-spec.episode_frames // spec.gop)
    feature = ds.info["features"][ds.cameras[0]]
    assert feature["dtype"] == "video" and feature["shape"] == [spec.height, spec.width, 3]


def test_dataset_is_deterministic_and_not_static(datasets, tmp_path):
    again = VideoDataset.open(write_dataset(tmp_path / "again", TINY["droid"], seed=3))
    camera = again.cameras[0]
    assert again.video_path(camera, 0).read_bytes() == datasets["droid"].video_path(camera, 0).read_bytes()
    a, b = (source_frame(TINY["droid"], 0, 3, t) for t in (4, 5))
    assert np.abs(a.astype(int) - b.astype(int)).mean() > 20  # neighbouring frames differ clearly


def test_content_is_measured_and_noise_raises_it(datasets, tmp_path):
    ds, spec = datasets["droid"], TINY["droid"]
    size = sum(p.stat().st_size for p in (ds.root / "videos").rglob("*.mp4"))
    frames = spec.episodes * spec.episode_frames * len(spec.cameras)
    assert ds.content() == pytest.approx({"kb_per_frame": size / frames / 1e3,
                                          "bits_per_pixel": 8 * size / frames / spec.height / spec.width})
    noisy = VideoDataset.open(write_dataset(tmp_path / "noisy", spec.replace(noise=20), seed=3))
    assert noisy.content()["kb_per_frame"] > 2 * ds.content()["kb_per_frame"]
    with pytest.raises(ValueError, match="clip noise must be an integer >= 0"):
        spec.replace(noise=-1)


def test_cached_dataset_is_written_once(tmp_path):
    first = clips.cached_dataset(TINY["droid"], seed=1, cache_dir=tmp_path)
    mtime = (first / "meta" / "info.json").stat().st_mtime_ns
    assert clips.cached_dataset(TINY["droid"], seed=1, cache_dir=tmp_path) == first
    assert (first / "meta" / "info.json").stat().st_mtime_ns == mtime
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no staging folder left behind


def test_cached_dataset_is_found_without_pyav(tmp_path, monkeypatch):
    # the GPU host has no PyAV: a cache written elsewhere serves it, and an absent one says what to do
    first = clips.cached_dataset(TINY["droid"], seed=1, cache_dir=tmp_path)
    assert json.loads((first / "meta" / "info.json").read_text())["features"][TINY["droid"].cameras[0]]["info"][
        "video.encoder_library"] == f"PyAV {av.__version__}"
    monkeypatch.setitem(sys.modules, "av", None)
    assert clips.cached_dataset(TINY["droid"], seed=1, cache_dir=tmp_path) == first
    with pytest.raises(ModuleNotFoundError, match="writing one needs PyAV.*BENCHBAY_DECODE_CACHE"):
        clips.cached_dataset(TINY["droid"], seed=2, cache_dir=tmp_path)


def test_missing_encoder_is_reported(monkeypatch):
    monkeypatch.setitem(clips.ENCODERS, "av1", ("benchbay-no-such-encoder",))
    with pytest.raises(clips.EncoderUnavailable, match="no av1 encoder"):
        clips.pick_encoder("av1")


# ---- backends -----------------------------------------------------------------------------------

def _reference(ds: VideoDataset, camera: str, indices) -> torch.Tensor:
    return backend("pyav", Settings(mode="best")).open(ds.video_path(camera, 0)).get_frames(indices)


#: every way of driving each backend: (backend, mode, seek_mode), seek_mode None = the mode's own
WAYS = [(name, mode, seek_mode) for name in IN_PROCESS for mode in MODES
        for seek_mode in (None, *BACKENDS[name].seek_modes)
        if BACKENDS[name].seek_mode_reason(Settings(mode=mode, seek_mode=seek_mode)) is None]


@pytest.mark.parametrize("preset", sorted(TINY))
@pytest.mark.parametrize(("name", "mode", "seek_mode"), WAYS)
def test_backends_decode_the_requested_frames_identically(datasets, preset, name, mode, seek_mode):
    if not _can_decode(name, preset):
        pytest.skip(f"{name} cannot open {CODEC[preset]} (covered by the unsupported-codec test)")
    ds, spec = datasets[preset], TINY[preset]
    camera = ds.cameras[1]
    handle = backend(name, Settings(mode=mode, seek_mode=seek_mode)).open(ds.video_path(camera, 0))
    assert handle.num_frames == spec.episode_frames
    frames = handle.get_frames(INDICES)
    again = handle.get_frames(INDICES[::-1])  # a kept-open decoder serves later requests from where it stands
    handle.close()
    assert frames.dtype == torch.uint8 and tuple(frames.shape) == (len(INDICES), spec.height, spec.width, 3)
    assert torch.equal(again, frames.flip(0))
    assert mean_abs_diff(frames, _reference(ds, camera, INDICES)) <= FRAME_TOLERANCE
    for got, t in zip(frames, INDICES, strict=True):
        # the right frame: close to what was encoded, far from its neighbour
        want, neighbour = (torch.from_numpy(source_frame(spec, 1, 3, u)) for u in (t, t - 1 if t else 1))
        assert mean_abs_diff(got, want) < 12 < mean_abs_diff(got, neighbour)


def test_seek_modes_apply_to_their_backends_only():
    def seek_mode(name, **settings):
        return backend(name, Settings(**settings)).describe()["seek_mode"]

    # PyAV: best finds frames through the container's index, kept open or not; loader mode is LeRobot's
    assert seek_mode("pyav", mode="best") == seek_mode("pyav", mode="best", keep_open=True) == "index"
    assert seek_mode("pyav", mode="best", seek_mode="keyframe") == "keyframe"
    assert "for best" in BACKENDS["pyav"].seek_mode_reason(Settings(mode="loader", seek_mode="index"))
    assert "one of keyframe, index" in BACKENDS["pyav"].seek_mode_reason(Settings(mode="best", seek_mode="exact"))
    assert seek_mode("torchcodec", seek_mode="exact") == "exact"
    assert "one way" in BACKENDS["decord"].seek_mode_reason(Settings(seek_mode="exact"))
    with pytest.raises(ValueError, match="does not apply to decord"):
        backend("decord", Settings(seek_mode="exact"))


def test_pyav_on_a_stream_with_reordered_frames(tmp_path):
    spec = TINY["droid"].replace(cameras=("cam",), episodes=1, preset="medium")  # x264 medium: B-frames
    path = VideoDataset.open(write_dataset(tmp_path / "bframes", spec, seed=3)).video_path("cam", 0)
    indexed = backend("pyav", Settings(mode="best", seek_mode="index")).open(path)  # asked for: by demuxing
    best = backend("pyav", Settings(mode="best")).open(path)  # no pass over the file: the keyframe route
    assert indexed.stream.codec_context.has_b_frames and type(best).__name__ == "_KeyframePyAVHandle"
    for handle in (indexed, best):
        for got, t in zip(handle.get_frames(INDICES), INDICES, strict=True):
            assert mean_abs_diff(got, torch.from_numpy(source_frame(spec, 0, 3, t))) < 12


def test_decord2_runs_in_its_own_process(datasets, tmp_path):
    if Decord2.unavailable_reason() is not None:
        pytest.skip(Decord2.unavailable_reason())
    ds = datasets["libero"]
    camera = ds.cameras[0]
    script = textwrap.dedent(f"""
        import numpy as np
        from benchbay.decode.backends import Settings, backend
        frames = backend("decord2", Settings()).open({str(ds.video_path(camera, 0))!r}).get_frames({list(INDICES)})
        np.save({str(tmp_path / "frames.npy")!r}, frames.numpy())
    """)
    subprocess.run([sys.executable, "-c", script], check=True, cwd=REPO, timeout=120)
    frames = torch.from_numpy(np.load(tmp_path / "frames.npy"))
    assert mean_abs_diff(frames, _reference(ds, camera, INDICES)) <= FRAME_TOLERANCE


def test_torchcodec_opens_with_pyavs_ffmpeg_only(datasets, tmp_path):
    """The GPU host has no FFmpeg but PyAV's, its libraries linked under their plain sonames on
    LD_LIBRARY_PATH (tools/device-env.sh): torchcodec opens clips there in a fresh process
    (a DataLoader worker's situation), which needs PyAV's libraries loaded first."""
    libs = Path(av.__file__).parents[1] / "av.libs"
    if "torchcodec" not in IN_PROCESS or not libs.is_dir():
        pytest.skip("needs torchcodec and a PyAV wheel that bundles FFmpeg")
    links = tmp_path / "fflinks"
    links.mkdir()
    for lib in libs.glob("*.so*"):  # libavutil-5809ad29.so.60.26.102 -> libavutil.so.60
        plain = re.sub(r"^(lib[A-Za-z0-9_]+)-[0-9a-f]+\.so\.([0-9]+).*$", r"\1.so.\2", lib.name)
        (links / plain).symlink_to(lib)
    ds = datasets["droid"]
    script = textwrap.dedent(f"""
        from benchbay.decode.backends import Settings, backend
        handle = backend("torchcodec", Settings()).open({str(ds.video_path(ds.cameras[0], 0))!r})
        print(tuple(handle.get_frames([0, 5]).shape))
    """)
    env = {**os.environ, "LD_LIBRARY_PATH": str(links)}
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == str((2, 64, 96, 3))


def test_unavailable_backend_is_a_skip_reason(monkeypatch):
    monkeypatch.setattr(Decord2, "distribution", "benchbay-no-such-package")
    reason = Decode({}, {"backend": "decord2"}, torch.device("cpu")).skip_reason()
    assert reason.startswith("backend decord2 not installed")
    assert "cpu only" in Decode({}, {"backend": "pyav", "device": "cuda"}, torch.device("cpu")).skip_reason()


@pytest.mark.skipif("decord" not in IN_PROCESS, reason=str(BACKENDS["decord"].unavailable_reason()))
def test_decord_on_av1_is_a_decode_error_naming_the_file(datasets, monkeypatch):
    ds = datasets["libero"]
    path = ds.video_path(ds.cameras[0], 0)
    with pytest.raises(DecodeError) as err:
        backend("decord").open(path)
    assert str(path) in str(err.value) and err.value.path == path
    workload = Decode({"root": str(ds.root)}, {"preset": "libero", "backend": "decord"}, torch.device("cpu"))
    assert workload.skip_reason() is None
    with pytest.raises(DecodeError, match="av1 video"):
        workload.setup()


@pytest.mark.parametrize("damage", ["truncated", "garbage", "missing"])
@pytest.mark.parametrize("name", IN_PROCESS)
def test_corrupt_video_is_a_clear_error_naming_the_file(datasets, tmp_path, name, damage):
    good = datasets["droid"].video_path(datasets["droid"].cameras[0], 0).read_bytes()
    path = tmp_path / f"{damage}.mp4"
    if damage == "truncated":
        path.write_bytes(good[: len(good) // 2])
    elif damage == "garbage":
        path.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    with pytest.raises(DecodeError) as err:
        backend(name).open(path).get_frames([0, 20])
    assert str(path) in str(err.value) and name in str(err.value)


# ---- patterns and measurements ------------------------------------------------------------------

def test_dreamzero_pattern_takes_what_one_training_sample_takes():
    # upstream's sampler (lerobot_sharded.py, max_chunk_size 4), worked by hand for a 240-frame episode
    frames = DreamZeroClip.frames_for_step
    assert frames(100, 240) == tuple(range(52, 149, 3))  # anchors 100, 76, 124, 52: 32 frames + 1
    assert frames(0, 240) == tuple(range(0, 97, 3))  # nothing behind: anchors 0, 24, 48, 72
    assert frames(216, 240) == tuple(range(144, 217, 3))  # frame 240 lies past the end: the last 7 go
    assert len(frames(100, 240)) == 33 and (33 - 1) // 4 + 1 == 9  # 9 latent frames
    assert frames(30, 60) == (*range(6, 52, 3), 54)  # anchor 54's action chunk would not fit
    assert frames(6, 30) == ()  # one chunk whose extra frame lies past the end: no video upstream


def test_patterns_ask_for_the_documented_frames(datasets):
    ds = datasets["droid"]
    clip = PATTERNS["dreamzero"](ds, seed=5)
    for i in range(8):
        views = clip.sample(i)
        assert [v.camera for v in views] == ds.cameras
        assert len({v.indices for v in views}) == 1  # the same frames from every camera
        indices = views[0].indices
        assert len(indices) == 9 and indices == tuple(range(indices[0], indices[0] + 25, 3))
        assert indices[-1] < ds.lengths[views[0].episode]
    assert clip.sample(3) == PATTERNS["dreamzero"](ds, seed=5).sample(3)
    assert {len(v.indices) for v in PATTERNS["wallx"](ds).sample(0)} == {1}
    assert PATTERNS["sequential"](ds).sample(0)[0].indices == tuple(range(30))


def fingerprints_agree(a: dict, b: dict, tolerance: float = FRAME_TOLERANCE) -> bool:
    """Two records' fingerprints of one request agree: the same bytes, or thumbnails within the
    frames' tolerance (the check benchbay.decode.measure states for records without frames)."""
    if a["sha256"] == b["sha256"]:
        return True
    if len(a["thumb"]) != len(b["thumb"]):
        return False
    return float(np.abs(np.subtract(a["thumb"], b["thumb"])).mean()) <= tolerance


def test_fingerprints_agree_within_tolerance_only():
    frames = torch.randint(0, 256, (2, 16, 16, 3), dtype=torch.uint8)
    nudged = (frames.int() + torch.randint(-1, 2, frames.shape)).clamp(0, 255).to(torch.uint8)
    assert fingerprints_agree(fingerprint([frames]), fingerprint([nudged]))
    assert not fingerprints_agree(fingerprint([frames]), fingerprint([frames.flip(0)]))


# ---- the workload -------------------------------------------------------------------------------

def _measure(params: dict, knobs: dict, steps: int = 4) -> dict:
    """The decode workload's figures after ``steps`` steps, as a point's process would take them."""
    workload = Decode(params, {"seed": 3, **knobs}, torch.device("cpu"))
    assert workload.skip_reason() is None
    workload.setup()
    for i in range(steps):
        workload.step(i)
    return workload.extra_metrics()


def _run(ds: VideoDataset, monkeypatch, knobs: dict, steps: int = 4) -> dict:
    monkeypatch.setattr("benchbay.workloads.decode.cached_dataset", lambda spec, seed: ds.root)
    return _measure({"height": 64, "width": 96, "episode_frames": 30, "episodes": 2}, knobs, steps)


def test_workload_reports_latency_cpu_memory_and_fingerprint(datasets, monkeypatch):
    extra = _run(datasets["droid"], monkeypatch, {"backend": "pyav", "mode": "best", "keep_open": True})
    assert extra["codec"] == "h264" and extra["cameras"] == 3 and extra["measured_samples"] == 2
    assert extra["views"] == 6 and extra["frames"] == 54  # 9 frames per view from 30-frame episodes
    assert extra["backend_settings"]["keep_open"] and extra["backend_settings"]["seek_mode"] == "index"
    assert extra["opens"] <= 3  # two episodes: at most one not yet opened during the two warm-up samples
    for key in ("view_latency_ms", "view_cpu_ms", "sample_latency_ms", "view_decode_ms"):
        assert 0 < extra[f"{key}_median"] <= extra[f"{key}_p90"] <= extra[f"{key}_p99"]
    assert extra["frames_per_s"] > 0 and extra["cpu_time_s"] > 0 and extra["peak_rss_gib"] > 0
    assert extra["cpu_util_mean"] > 0
    # the decoding calls' CPU and the rest add up to all the process spent
    assert extra["decode_cpu_s_per_sample"] > 0
    assert extra["cpu_s_per_sample"] == pytest.approx(
        extra["decode_cpu_s_per_sample"] + extra["loader_overhead_cpu_ms_per_sample"] / 1e3)
    assert extra["loader_overhead_ms_per_sample"] is not None  # num_workers 0: the wait beyond the calls
    assert extra["kb_per_frame"] > 0 and extra["bits_per_pixel"] == pytest.approx(8e3 * extra["kb_per_frame"] / 96 / 64)
    assert extra["source_mad"] < 12
    json.dumps(extra)  # the record must be able to hold it


@pytest.mark.skipif(len(IN_PROCESS) < 2, reason="needs two backends")
def test_workload_fingerprints_agree_across_backends(datasets, monkeypatch):
    prints = [_run(datasets["droid"], monkeypatch, {"backend": name}, steps=3)["frame_fingerprint"]
              for name in IN_PROCESS]
    assert all(fingerprints_agree(prints[0], other) for other in prints[1:])


def test_workload_through_workers_with_interference(datasets, monkeypatch):
    extra = _run(datasets["droid"], monkeypatch, {"backend": "pyav", "num_workers": 1, "interference": "on",
                                                  "pattern": "wallx"}, steps=6)  # warm-up: 1 x (2 + 1)
    assert extra["worker_peak_rss_gib"] > 0
    assert extra["foreground_step_s_alone"] > 0 and extra["foreground_inflation"] > 0
    assert extra["frames"] == 3 * 3 and extra["opens"] == 9
    assert extra["loader_samples_per_s"] > 0 and extra["loader_rate_note"] is None
    # the foreground's CPU is the main process's; with workers, the wait for a batch is the queue's
    assert extra["loader_overhead_cpu_ms_per_sample"] is None and extra["loader_overhead_ms_per_sample"] is None


def test_decoding_in_the_main_process_runs_torch_as_a_worker_does(datasets, monkeypatch):
    seen, decode = [], SampleDecoder.__call__

    def noting_threads(self, requests):
        seen.append(torch.get_num_threads())
        return decode(self, requests)

    monkeypatch.setattr(SampleDecoder, "__call__", noting_threads)
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # the tests run torch on one thread (conftest): the loader must restore another count
    try:
        _run(datasets["droid"], monkeypatch, {"backend": "pyav", "pattern": "wallx"}, steps=3)
        assert seen == [1, 1, 1] and torch.get_num_threads() == 2  # one intra-op thread, then restored
    finally:
        torch.set_num_threads(before)


def test_a_window_shorter_than_the_workers_backlog_gives_no_rate(datasets, monkeypatch):
    extra = _run(datasets["droid"], monkeypatch, {"backend": "pyav", "num_workers": 1, "prefetch_factor": 4},
                 steps=6)  # warm-up 1 x (4 + 1) samples, then 1 measured sample < the backlog of 4
    assert extra["measured_samples"] == 1
    assert extra["loader_samples_per_s"] is None and "backlog of 4" in extra["loader_rate_note"]


# ---- one's own videos ----------------------------------------------------------------------------

def _plain_folder(ds: VideoDataset, root: Path, cameras: list[str] | None = None) -> Path:
    """The dataset's videos as a plain folder: a subfolder per camera (its files at the top with
    one camera), each episode a file of one name."""
    for camera in cameras or ds.cameras:
        folder = root / camera if cameras is None else root
        folder.mkdir(parents=True, exist_ok=True)
        for episode in range(ds.episodes):
            (folder / f"ep{episode}.mp4").write_bytes(ds.video_path(camera, episode).read_bytes())
    return root


def _workload(root: Path, knobs: dict, steps: int = 4) -> dict:
    return _measure({"root": str(root)}, knobs, steps)


def test_a_plain_folder_of_videos_is_a_dataset(datasets, tmp_path):
    ds = datasets["droid"]
    own = open_videos(_plain_folder(ds, tmp_path / "own"))
    assert own.layout == "folder" and own.cameras == ds.cameras and own.lengths == ds.lengths and own.fps == ds.fps
    assert {own.codec(camera) for camera in own.cameras} == {"h264"}
    assert own.info["features"][own.cameras[0]]["shape"] == [64, 96, 3]
    one = open_videos(_plain_folder(ds, tmp_path / "one", cameras=[ds.cameras[0]]))
    assert one.cameras == ["video"] and one.lengths == ds.lengths
    # the workload asks it for the frames it asks the LeRobot dataset for, and gets the same ones
    knobs = {"backend": "pyav", "pattern": "dreamzero"}
    extra, lerobot = _workload(own.root, knobs), _workload(ds.root, knobs)
    assert extra["layout"] == "folder" and extra["cameras"] == 3 and extra["frames"] == lerobot["frames"] > 0
    assert extra["frame_fingerprint"] == lerobot["frame_fingerprint"] and extra["source_mad"] is None


def test_a_folder_that_is_neither_is_an_error_naming_it(datasets, tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "readme.txt").write_text("no videos here")
    with pytest.raises(DatasetFormatError, match=rf"{tmp_path / 'notes'}: neither a LeRobot dataset \(no "
                                                 r"meta/info\.json\) nor a folder of video files \(\.mp4"):
        open_videos(tmp_path / "notes")
    with pytest.raises(DatasetFormatError, match=rf"{tmp_path / 'nowhere'}: no such folder"):
        open_videos(tmp_path / "nowhere")
    uneven = _plain_folder(datasets["droid"], tmp_path / "uneven")
    (uneven / datasets["droid"].cameras[1] / "ep1.mp4").rename(uneven / datasets["droid"].cameras[1] / "ep9.mp4")
    with pytest.raises(DatasetFormatError, match=r"hold different episodes \(ep1\.mp4, ep9\.mp4\)"):
        open_videos(uneven)
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "ep0.mp4").write_bytes(b"not a video")
    with pytest.raises(DatasetFormatError, match=r"broken/ep0\.mp4: not a video PyAV can read"):
        open_videos(tmp_path / "broken")


def test_the_docs_least_v3_info_json_is_read(tmp_path):
    """docs/decoders.md's least info.json, over a v3.0 dataset of its camera, shape, codec and rate."""
    (block,) = re.findall(r"```json\n(.*?)```", (REPO / "docs" / "decoders.md").read_text(), re.S)
    info = json.loads(block)
    (camera,) = info["features"]
    spec = PRESETS["droid"].replace(cameras=(camera,), episode_frames=12, episodes=2, layout="v3.0",
                                    episodes_per_file=2)
    root = write_dataset(tmp_path / "v3", spec, seed=0)
    (root / "meta" / "info.json").write_text(json.dumps(info))
    ds = open_videos(root)
    assert ds.layout == "v3.0" and ds.cameras == [camera] and ds.lengths == (12, 12) and ds.first_frame(camera, 1) == 12
    assert ds.content()["kb_per_frame"] > 0


def test_a_bad_dataset_fails_before_any_step(datasets, tmp_path):
    """A LeRobot dataset whose info.json lacks a camera's codec: the point ends in an error naming
    the file and key, and no step ran (no results thrown away after them)."""
    root = tmp_path / "bad"
    shutil.copytree(datasets["droid"].root, root)
    info = json.loads((root / "meta" / "info.json").read_text())
    camera = datasets["droid"].cameras[0]
    del info["features"][camera]["info"]
    (root / "meta" / "info.json").write_text(json.dumps(info))
    spec = PointSpec(workload="decode", params={"root": str(root)}, knobs={"backend": "pyav"},
                     steps=Steps(warmup=1, measure=2), device="cpu", timeout=120)
    out = InProcessLauncher().run(spec, tmp_path / "point")
    assert out.status == "error" and f"info.json: key 'features.{camera}.info.video.codec'" in out.reason
    assert not out.series.get("step_times_s")


@pytest.mark.parametrize("suite", ["decoders.yaml", "decoders-cpu.yaml"])
def test_suites_validate(suite):
    from benchbay import suite as suites

    points = suites.load(REPO / "suites" / suite).expand()
    assert points and {p.knobs["backend"] for p in points} >= {"torchcodec", "decord", "pyav"}


CUDA = pytest.mark.gpu


@CUDA
@pytest.mark.skipif("torchcodec" not in IN_PROCESS, reason="torchcodec not installed")
@pytest.mark.parametrize("preset", sorted(TINY))
def test_torchcodec_on_cuda_matches_cpu(datasets, preset):
    ds = datasets[preset]
    path = ds.video_path(ds.cameras[0], 0)
    frames = backend("torchcodec", Settings(device="cuda")).open(path).get_frames(INDICES)
    assert frames.is_cuda and frames.dtype == torch.uint8
    assert mean_abs_diff(frames, _reference(ds, ds.cameras[0], INDICES)) <= FRAME_TOLERANCE


@CUDA
def test_interference_on_cuda_with_spawned_workers(datasets, monkeypatch):
    monkeypatch.setattr("benchbay.workloads.decode.cached_dataset", lambda spec, seed: datasets["droid"].root)
    workload = Decode({"height": 64, "width": 96, "episode_frames": 30, "episodes": 2},
                      {"seed": 3, "backend": "pyav", "num_workers": 1, "interference": "on", "pin_memory": True},
                      torch.device("cuda"))
    workload.setup()
    for i in range(4):
        workload.step(i)
    extra = workload.extra_metrics()
    assert extra["foreground_step_s_alone"] > 0 and extra["worker_peak_rss_gib"] > 0


# ---- benchbay's figures against a plain loop ----------------------------------------------------
# The per-view latency and CPU benchbay records must be the decoding's own: the same frames opened,
# decoded and closed by a loop that does nothing else must cost the same. Each plain loop below is
# written from the libraries' documentation, not from benchbay's backends.

def _plain_torchcodec(path: Path, indices: tuple[int, ...]) -> None:
    from torchcodec.decoders import VideoDecoder

    decoder = VideoDecoder(str(path), seek_mode="approximate", num_ffmpeg_threads=1, dimension_order="NHWC")
    decoder.get_frames_at(list(indices))
    del decoder


def _plain_pyav(path: Path, indices: tuple[int, ...]) -> None:
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        fps = float(stream.average_rate)
        container.seek(round(min(indices) / fps / stream.time_base), stream=stream)  # to the keyframe before
        for frame in container.decode(stream):
            index = round(frame.time * fps)
            if index in indices:
                frame.to_ndarray(format="rgb24")
            if index >= max(indices):
                break


def _plain_decord(path: Path, indices: tuple[int, ...]) -> None:
    import decord

    reader = decord.VideoReader(str(path), num_threads=0)
    reader.get_batch(list(indices))
    del reader


PLAIN = {  # backend -> (the workload's knobs for the same way of decoding, the plain loop)
    "torchcodec": ({"mode": "loader"}, _plain_torchcodec),
    # the keyframe route with FFmpeg's frame+slice threads: their CPU counts too
    "pyav": ({"mode": "best", "seek_mode": "keyframe", "threads": 0}, _plain_pyav),
    "decord": ({"mode": "loader"}, _plain_decord),
}
CROSS_CHECK = {"latency": 0.15, "cpu": 0.20}  # largest relative difference of the medians
CROSS_CHECK_SAMPLES = 24
CROSS_CHECK_CLIP = {"height": 96, "width": 160, "episode_frames": 100}  # a view costs milliseconds, as on real clips


@pytest.fixture(scope="module")
def cross_check_dataset(tmp_path_factory) -> VideoDataset:
    spec = PRESETS["droid"].replace(**CROSS_CHECK_CLIP)
    return VideoDataset.open(write_dataset(tmp_path_factory.mktemp("cross_check") / "droid", spec, seed=1))


def _against_plain_loop(ds: VideoDataset, monkeypatch, name: str) -> dict[str, float]:
    """benchbay (num_workers 0) and the plain loop on the same samples, alternating sample by sample
    (ABBA) so that both see the same machine; the ratios of their per-view medians."""
    knobs, plain = PLAIN[name]
    monkeypatch.setattr("benchbay.workloads.decode.cached_dataset", lambda spec, seed: ds.root)
    workload = Decode(CROSS_CHECK_CLIP, {"backend": name, "seed": 1, **knobs}, torch.device("cpu"))
    workload.setup()
    wall, cpu = [], []

    def plain_sample(i: int) -> None:
        for view in workload.pattern.sample(i):
            start, cpu_start = time.perf_counter(), time.process_time()
            plain(view.path, view.indices)
            wall.append(time.perf_counter() - start)
            cpu.append(time.process_time() - cpu_start)

    for i in range(2):
        workload.step(i)
        plain_sample(i)
    del wall[:], cpu[:]
    for i in range(2, 2 + CROSS_CHECK_SAMPLES):
        pair = [lambda: workload.step(i), lambda: plain_sample(i)]  # noqa: B023 (called right here)
        for run in pair if i % 2 else reversed(pair):
            run()
    extra = workload.extra_metrics()
    assert extra["views"] == len(wall) == 3 * CROSS_CHECK_SAMPLES
    return {"latency": extra["view_latency_ms_median"] / (1e3 * statistics.median(wall)),
            "cpu": extra["view_cpu_ms_median"] / (1e3 * statistics.median(cpu))}


@pytest.mark.parametrize("name", [n for n in PLAIN if n in IN_PROCESS])
def test_per_view_figures_match_a_plain_loop(cross_check_dataset, monkeypatch, name):
    ratios = _against_plain_loop(cross_check_dataset, monkeypatch, name)
    if any(abs(ratios[k] - 1) > bound for k, bound in CROSS_CHECK.items()):  # one retry: a shared machine
        ratios = _against_plain_loop(cross_check_dataset, monkeypatch, name)
    print(f"{name}: benchbay / plain loop, per-view medians: {ratios}")
    for key, bound in CROSS_CHECK.items():
        assert abs(ratios[key] - 1) <= bound, f"{name} per-view {key}: benchbay / plain loop = {ratios[key]:.3f}"
