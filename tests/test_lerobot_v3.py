"""LeRobot v3.0 datasets (many episodes a file, from_timestamp), LeRobot's AV1 settings, and the
errors for metadata that is neither v2.1 nor v3.0."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from benchbay.decode.backends import BACKENDS, Settings, backend
from benchbay.decode.clips import PRESETS, source_frame, write_dataset
from benchbay.decode.dataset import DatasetFormatError, VideoDataset
from benchbay.decode.patterns import PATTERNS
from benchbay.workloads.decode import Decode

# 3 episodes, 2 a file: file-000 holds episodes 0 and 1, file-001 episode 2; 100 frames fit dreamzero_full
TINY = PRESETS["droid"].replace(cameras=("observation.images.a", "observation.images.b"), height=48, width=64,
                                episode_frames=100, episodes=3, episodes_per_file=2)
AVAILABLE = [name for name, cls in BACKENDS.items() if cls.unavailable_reason("cpu") is None]


@pytest.fixture(scope="module")
def pair(tmp_path_factory) -> tuple[VideoDataset, VideoDataset]:
    """The same episodes written in both layouts."""
    root = tmp_path_factory.mktemp("layouts")
    return (VideoDataset.open(write_dataset(root / "v21", TINY, seed=5)),
            VideoDataset.open(write_dataset(root / "v30", TINY.replace(layout="v3.0"), seed=5)))


def test_v3_layout_metadata(pair):
    _, v3 = pair
    info = json.loads((v3.root / "meta" / "info.json").read_text())
    assert info["codebase_version"] == "v3.0" and v3.layout == "v3.0"
    for key in ("chunks_size", "data_files_size_in_mb", "video_files_size_in_mb"):
        assert key in info
    assert info["video_path"] == "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    episodes = pd.read_parquet(v3.root / "meta" / "episodes" / "chunk-000" / "file-000.parquet")
    camera = "observation.images.a"
    assert list(episodes[f"videos/{camera}/file_index"]) == [0, 0, 1]
    assert list(episodes[f"videos/{camera}/from_timestamp"]) == pytest.approx([0.0, 100 / 15, 0.0])
    assert list(episodes["dataset_from_index"]) == [0, 100, 200]
    assert pd.read_parquet(v3.root / "meta" / "tasks.parquet")["task_index"].tolist() == [0]
    data = pd.read_parquet(v3.root / "data" / "chunk-000" / "file-000.parquet")
    assert list(data["episode_index"].unique()) == [0, 1]
    assert v3.lengths == (100, 100, 100)
    assert v3.video_path(camera, 0) == v3.video_path(camera, 1) != v3.video_path(camera, 2)
    assert [v3.first_frame(camera, e) for e in range(3)] == [0, 100, 0]
    assert len(list((v3.root / "videos").rglob("*.mp4"))) == 4  # 2 files x 2 cameras


def test_v3_stats_are_those_of_what_was_written(pair):
    """meta/stats.json, which a policy normalises with (lerobot-train reads it): every feature, the
    low-dimensional ones exactly, a camera's per channel in [0, 1] with lerobot's (3, 1, 1) shape."""
    _, v3 = pair
    stats = json.loads((v3.root / "meta" / "stats.json").read_text())
    info = json.loads((v3.root / "meta" / "info.json").read_text())
    assert set(stats) == set(info["features"])
    for figures in stats.values():
        assert set(figures) == {"min", "max", "mean", "std", "count", "q01", "q10", "q50", "q90", "q99"}
    data = pd.concat(pd.read_parquet(f) for f in sorted((v3.root / "data").rglob("*.parquet")))
    state = torch.tensor(np.stack(data["observation.state"].to_numpy()), dtype=torch.float64)
    # the writer summed float32 values
    assert stats["observation.state"]["mean"] == pytest.approx(state.mean(0).tolist(), rel=1e-4, abs=1e-6)
    assert stats["observation.state"]["count"] == [len(data)] and stats["index"]["max"] == [len(data) - 1]
    camera = stats["observation.images.a"]
    assert torch.tensor(camera["mean"]).shape == (3, 1, 1)
    assert 0 <= torch.tensor(camera["min"]).min() < torch.tensor(camera["max"]).max() <= 1
    episodes = pd.read_parquet(v3.root / "meta" / "episodes" / "chunk-000" / "file-000.parquet")
    assert list(episodes["meta/episodes/file_index"]) == [0, 0, 0]


@pytest.mark.parametrize("name", AVAILABLE)
@pytest.mark.parametrize("mode", ["loader", "best"])
def test_every_backend_reads_the_same_frames_from_both_layouts(pair, name, mode):
    v2, v3 = pair
    for pattern in PATTERNS.values():
        for request2, request3 in zip(pattern(v2, seed=1).sample(0), pattern(v3, seed=1).sample(0), strict=True):
            assert (request2.episode, request2.indices) == (request3.episode, request3.indices)
            frames = [backend(name, Settings(mode=mode)).open(r.path).get_frames(r.file_indices)
                      for r in (request2, request3)]
            assert frames[0].shape == (len(request2.indices), 48, 64, 3)
            assert torch.equal(frames[0], frames[1]), f"{name} {mode} {pattern.name} episode {request2.episode}"


def test_episode_in_a_shared_file_is_its_own_frames(pair):
    """Episode 1 starts at frame 100 of file-000: its frames there are its source, not episode 0's."""
    _, v3 = pair
    camera = "observation.images.b"
    handle = backend("pyav", Settings(mode="best")).open(v3.video_path(camera, 1))
    assert handle.num_frames == 200
    decoded = handle.get_frames([100, 150])
    for frame, t in zip(decoded, (0, 50), strict=True):
        own = torch.from_numpy(source_frame(TINY, 1, 5, t, episode=1))
        other = torch.from_numpy(source_frame(TINY, 1, 5, t, episode=0))
        assert (frame.float() - own.float()).abs().mean() < 12 < (frame.float() - other.float()).abs().mean()


def test_lerobot_preset_is_svtav1_gop2_v3(tmp_path):
    spec = PRESETS["lerobot"].replace(height=48, width=64, episode_frames=6, episodes=2)
    assert (spec.codec, spec.gop, spec.crf, spec.pix_fmt, spec.layout) == ("av1", 2, 30, "yuv420p", "v3.0")
    ds = VideoDataset.open(write_dataset(tmp_path / "lerobot", spec, seed=0))
    camera = ds.cameras[0]
    assert ds.info["features"][camera]["info"]["video.encoder"] == "libsvtav1"
    import av

    with av.open(str(ds.video_path(camera, 1))) as container:
        keys = [packet.is_keyframe for packet in container.demux(video=0) if packet.size]
    assert keys == [True, False] * 6  # a keyframe every 2 frames, through both episodes
    handle = backend("torchcodec", Settings()).open(ds.video_path(camera, 1))
    frames = handle.get_frames([ds.first_frame(camera, 1) + 3])
    truth = torch.from_numpy(source_frame(spec, 0, 0, 3, episode=1))
    assert (frames[0].float() - truth.float()).abs().mean() < 12


def test_workload_runs_on_a_v3_root(pair):
    _, v3 = pair
    workload = Decode({"root": str(v3.root)}, {"seed": 3, "backend": "pyav", "pattern": "dreamzero",
                                               "mode": "best"}, torch.device("cpu"))
    workload.setup()
    for i in range(4):
        workload.step(i)
    extra = workload.extra_metrics()
    assert extra["layout"] == "v3.0" and extra["cameras"] == 2 and extra["measured_samples"] == 2
    assert extra["frames"] > 0 and extra["source_mad"] is None


def _copy_meta(src: VideoDataset, dst):
    import shutil

    shutil.copytree(src.root, dst)
    return dst


def test_errors_name_the_file_and_key(pair, tmp_path):
    _, v3 = pair
    with pytest.raises(DatasetFormatError, match=r"no .*meta/info\.json"):
        VideoDataset.open(tmp_path)
    root = _copy_meta(v3, tmp_path / "bad")
    info_path = root / "meta" / "info.json"
    info = json.loads(info_path.read_text())
    info_path.write_text(json.dumps({**info, "codebase_version": "v1.6"}))
    with pytest.raises(DatasetFormatError, match=r"info\.json: key 'codebase_version' is 'v1.6'"):
        VideoDataset.open(root)
    info_path.write_text(json.dumps({k: v for k, v in info.items() if k != "video_path"}))
    with pytest.raises(DatasetFormatError, match=r"info\.json: codebase_version v3\.0 needs key\(s\) video_path"):
        VideoDataset.open(root)
    info_path.write_text(json.dumps(info))
    episodes_path = root / "meta" / "episodes" / "chunk-000" / "file-000.parquet"
    column = "videos/observation.images.b/from_timestamp"
    pd.read_parquet(episodes_path).drop(columns=[column]).to_parquet(episodes_path)
    with pytest.raises(DatasetFormatError, match=rf"file-000\.parquet: no column\(s\) {column}"):
        VideoDataset.open(root)


# ---- LeRobot's decoding path ----------------------------------------------------------------------

def test_lerobot_backend_matches_torchcodec_and_caches_decoders(pair):
    from benchbay.decode.loader import SampleDecoder

    _, v3 = pair
    decoder = SampleDecoder(backend("lerobot", Settings()))
    assert decoder.cache_size == 100 and decoder.decoder.describe()["seek_mode"] == "approximate"
    pattern = PATTERNS["dreamzero"](v3, seed=2)
    timings = []
    for i in range(6):
        frames, views = decoder(pattern.sample(i))
        timings.append(views)
        for request, got in zip(pattern.sample(i), frames, strict=True):
            want = backend("torchcodec", Settings()).open(request.path).get_frames(request.file_indices)
            assert torch.equal(got, want)
    opened = [view.open_s is not None for views in timings for view in views]
    assert sum(opened) == 4  # 2 files x 2 cameras, each opened once and then a cache hit


def test_lerobot_backend_checks_timestamps_within_tolerance(pair):
    from benchbay.decode.backends import DecodeError

    _, v3 = pair
    strict = backend("lerobot", Settings())
    strict.options["tolerance_s"] = 0.0  # no frame's pts lies within 0 s of its query
    handle = strict.open(v3.video_path("observation.images.a", 1))
    with pytest.raises(DecodeError, match=r"file-000\.mp4.*beyond tolerance_s=0\.0.*\(6\.6667, 6\.6667\)"):
        handle.get_frames([100])


def test_workload_lerobot_mode_records_cache_hits_and_frames_per_core(pair):
    _, v3 = pair
    workload = Decode({"root": str(v3.root)}, {"seed": 3, "backend": "lerobot", "pattern": "wallx"},
                      torch.device("cpu"))
    assert workload.skip_reason() is None
    workload.setup()
    for i in range(6):
        workload.step(i)
    extra = workload.extra_metrics()
    assert extra["backend_settings"]["decoder_cache"] == 100 and extra["backend_settings"]["view_threads"]
    assert extra["view_latency_ms_reused_median"] > 0 and extra["frames_per_cpu_s"] > 0
    # the cameras decode in parallel: a sample's decoding wall is its slowest view, which the wait covers
    assert extra["loader_overhead_ms_per_sample"] >= 0
    json.dumps(extra)


def test_decoder_cache_0_makes_every_view_a_miss_and_acts_only_on_lerobot(pair):
    _, v3 = pair
    knobs = {"seed": 3, "backend": "lerobot", "pattern": "wallx", "decoder_cache": 0}
    workload = Decode({"root": str(v3.root)}, knobs, torch.device("cpu"))
    assert workload.skip_reason() is None
    workload.setup()
    for i in range(6):
        workload.step(i)
    extra = workload.extra_metrics()
    assert extra["backend_settings"]["decoder_cache"] == 0
    assert extra["opens"] == extra["views"] > 0 and extra["view_latency_ms_reused_median"] is None
    assert extra["view_latency_ms_opened_median"] > 0
    refused = Decode({"root": str(v3.root)}, {**knobs, "backend": "torchcodec"}, torch.device("cpu"))
    assert "decoder_cache applies to backends with a cache of their own (lerobot)" in refused.skip_reason()


# ---- cross-check: benchbay against a plain loop of our own over the same v3.0 files ------------------

def _plain_views(root, requests):
    """Where a plain reader finds each request's frames, from the metadata alone: the file from
    info.json's video_path and the episode's chunk and file index, the timestamps shifted by the
    episode's from_timestamp in that file."""
    info = json.loads((root / "meta" / "info.json").read_text())
    episodes = pd.concat(pd.read_parquet(p) for p in sorted((root / "meta" / "episodes").rglob("*.parquet")))
    episodes = episodes.set_index("episode_index")
    views = []
    for r in requests:
        row = episodes.loc[r.episode]
        where = {"chunk_index": int(row[f"videos/{r.camera}/chunk_index"]),
                 "file_index": int(row[f"videos/{r.camera}/file_index"])}
        path = root / info["video_path"].format(video_key=r.camera, **where)
        views.append((path, [row[f"videos/{r.camera}/from_timestamp"] + i / info["fps"] for i in r.indices]))
    return views


def _plain_pyav(path, timestamps):
    """Every frame of the file decoded in order; each timestamp takes the frame shown at that time."""
    import av

    with av.open(str(path)) as container:
        decoded = [(float(f.time), f.to_ndarray(format="rgb24")) for f in container.decode(video=0)]
    times = torch.tensor([t for t, _ in decoded])
    return torch.stack([torch.from_numpy(decoded[int(torch.argmin((times - t).abs()))][1]) for t in timestamps])


def _plain_torchcodec(path, timestamps):
    """Timestamps to frame indices on the file's average fps, as LeRobot's torchcodec reader does:
    ``get_frames_played_at`` would take the frame before where from_timestamp + i / fps rounds
    below the frame's pts (episode 1 of a file at 15 fps: frame 169 at 11.2666...7 s, asked at
    11.2666...6 s)."""
    from torchcodec.decoders import VideoDecoder

    decoder = VideoDecoder(str(path))
    indices = [round(t * decoder.metadata.average_fps) for t in timestamps]
    return decoder.get_frames_at(indices).data.permute(0, 2, 3, 1)


#: the plain loop of each backend's library: PyAV's for pyav, torchcodec's for torchcodec and LeRobot's path
PLAIN = {"pyav": _plain_pyav, "torchcodec": _plain_torchcodec, "lerobot": _plain_torchcodec}


@pytest.mark.parametrize("name", [n for n in PLAIN if n in AVAILABLE])
def test_benchbays_decoder_path_returns_the_plain_loops_frames_on_v3(pair, name):
    from benchbay.decode.loader import SampleDecoder

    _, v3 = pair
    modes = ["loader", "best"] if name != "lerobot" else ["loader"]
    for mode in modes:
        decoder = SampleDecoder(backend(name, Settings(mode=mode)))
        for pattern in PATTERNS.values():
            for i in range(2):
                requests = pattern(v3, seed=4).sample(i)
                frames, _ = decoder(requests)
                for request, got, (path, times) in zip(requests, frames, _plain_views(v3.root, requests), strict=True):
                    assert path == request.path
                    assert torch.equal(got, PLAIN[name](path, times)), f"{name} {mode} {pattern.name} sample {i}"


@pytest.mark.skipif("lerobot" not in AVAILABLE, reason="the lerobot backend needs torchcodec")
def test_lerobot_backends_figures_agree_with_the_plain_loop(pair):
    from benchbay.decode.measure import fingerprint

    _, v3 = pair
    workload = Decode({"root": str(v3.root)}, {"seed": 3, "backend": "lerobot", "pattern": "dreamzero"},
                      torch.device("cpu"))
    workload.setup()
    for i in range(5):
        workload.step(i)
    extra = workload.extra_metrics()
    assert extra["measured_samples"] == 3
    first = extra["samples"] - extra["measured_samples"]  # the warm-up samples the figures leave out
    samples = [workload.pattern.sample(i) for i in range(extra["samples"])]
    measured = [r for requests in samples[first:] for r in requests]
    assert extra["views"] == len(measured) and extra["frames"] == sum(len(r.indices) for r in measured)
    # a cache miss is a (camera, file) not decoded before: LeRobot's LRU of 100 keeps every decoder here
    seen = {(r.camera, r.path) for requests in samples[:first] for r in requests}
    assert extra["opens"] == len({(r.camera, r.path) for r in measured} - seen)
    plain = [_plain_torchcodec(path, times) for path, times in _plain_views(v3.root, samples[0])]
    assert extra["frame_fingerprint"]["sha256"] == fingerprint(plain)["sha256"]


# ---- GPU decoders ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["pynvvideocodec", "dali"])
def test_gpu_decoders_skip_with_their_reason_without_a_gpu(name):
    reason = Decode({}, {"backend": name, "device": "cuda"}, torch.device("cpu")).skip_reason()
    if not torch.cuda.is_available():
        assert "not installed" in reason or "no CUDA device" in reason
    cpu = Decode({}, {"backend": name}, torch.device("cpu")).skip_reason()
    assert "not installed" in cpu or "cuda only" in cpu


@pytest.mark.parametrize(("capability", "lacks"), [((9, 0), True), ((8, 0), True), ((8, 9), False), ((10, 0), False)])
def test_nvdec_av1_by_gpu_generation(monkeypatch, capability, lacks):
    from benchbay.decode.backends.nvidia import nvdec_codec_reason

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: capability)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "GPU")
    assert nvdec_codec_reason("h264") is None
    assert (nvdec_codec_reason("av1") is not None) == lacks
    if lacks:  # a GPU decoder without CPU fallback is skipped on AV1; torchcodec records its fallback
        available = classmethod(lambda cls, device="cpu": None)
        monkeypatch.setattr("benchbay.decode.backends.base.Backend.unavailable_reason", available)
        decord2 = Decode({}, {"backend": "decord2", "device": "cuda", "preset": "lerobot"}, torch.device("cpu"))
        assert "no AV1 decoder" in decord2.skip_reason()
        assert Decode({}, {"backend": "torchcodec", "device": "cuda", "preset": "lerobot"},
                      torch.device("cpu")).skip_reason() is None


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["torchcodec", "pynvvideocodec", "dali", "lerobot"])
def test_gpu_backends_match_the_cpu_on_v3(pair, name):
    if (reason := BACKENDS[name].unavailable_reason("cuda")) is not None:
        pytest.skip(reason)
    _, v3 = pair
    path, indices = v3.video_path("observation.images.a", 1), [100, 101, 150]
    gpu = backend(name, Settings(device="cuda"))
    # twice through one backend: DALI's pipeline once returned each request's frames a call late
    for wanted in (indices, [i + 7 for i in indices]):
        frames = gpu.open(path).get_frames(wanted)
        cpu = backend("torchcodec", Settings()).open(path).get_frames([j for i in wanted for j in (i - 1, i, i + 1)])
        assert frames.is_cuda and frames.shape == (len(wanted), *cpu.shape[1:])
        # each frame is nearest the CPU's same frame, not its neighbours (~25 levels of 255 apart on
        # these clips); NVDEC's colour conversion differs by a few levels (DALI's: 4.9 on average, H200)
        error = (frames.cpu().float()[:, None] - cpu.float().view(len(wanted), 3, *cpu.shape[1:])).abs().mean((2, 3, 4))
        assert (error.argmin(1) == 1).all(), error
        assert (error[:, 1] < 8).all(), error


HOSTILE_INFO = {
    "a video_path outside the dataset": ({"video_path": "/etc/{video_key}.mp4"}, "key 'video_path'"),
    "a video_path that climbs out": ({"video_path": "../../{video_key}/x.mp4"}, "key 'video_path'"),
    "a video_path that evaluates": ({"video_path": "{video_key.__class__.__mro__}.mp4"},
                                    "key .video_path.: expected placeholders"),
    "chunks_size 0": ({"chunks_size": 0}, "key 'chunks_size': expected an integer >= 1"),
    "fps 0": ({"fps": 0}, "key 'fps'"),
    "fps 1e308": ({"fps": 1e308}, "key 'fps'"),
    "features as a list": ({"features": []}, "key 'features'"),
    "a huge shape": ({"features": {"observation.images.a": {"dtype": "video", "shape": [10**9, 64, 3],
                                                            "info": {"video.codec": "h264"}}}},
                     r"key 'features\.observation\.images\.a\.shape'"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_INFO))
def test_a_hostile_info_json_is_an_error_naming_the_file_and_key(pair, tmp_path, case):
    change, expected = HOSTILE_INFO[case]
    _, v3 = pair
    root = _copy_meta(v3, tmp_path / "bad")
    info_path = root / "meta" / "info.json"
    info_path.write_text(json.dumps({**json.loads(info_path.read_text()), **change}))
    with pytest.raises(DatasetFormatError, match=r"info\.json: " + expected):
        VideoDataset.open(root)


def test_an_info_json_that_is_not_an_object_or_not_utf8_is_an_error(pair, tmp_path):
    _, v3 = pair
    root = _copy_meta(v3, tmp_path / "bad")
    info_path = root / "meta" / "info.json"
    info_path.write_text("[1, 2]")
    with pytest.raises(DatasetFormatError, match=r"info\.json: expected a JSON object"):
        VideoDataset.open(root)
    info_path.write_bytes(b'{"fps": "\xff"}')
    with pytest.raises(DatasetFormatError, match=r"info\.json: not JSON"):
        VideoDataset.open(root)


def test_an_episode_length_that_is_not_a_number_is_an_error(pair, tmp_path):
    v21, _ = pair
    root = _copy_meta(v21, tmp_path / "bad")
    path = root / "meta" / "episodes.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps({**e, "length": str(e["length"])}) + "\n" for e in lines))
    with pytest.raises(DatasetFormatError, match=r"episodes\.jsonl: key 'length'"):
        VideoDataset.open(root)
