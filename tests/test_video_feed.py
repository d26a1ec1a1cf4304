"""data=video: the training steps fed by real decoding, on the tiny presets and short generated
datasets: the model inputs are the decoded frames through each model's sample pipeline, and a
suite records how long the step waited for them and what the loader's workers cost."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
import torch

from benchbay import knobs as knob_table
from benchbay import store
from benchbay.decode.backends import DecodeError, Settings, backend
from benchbay.decode.loader import SampleDecoder
from benchbay.decode.patterns import CurrentFrame, DreamZeroFullClip
from benchbay.launch.worker import _data_wait, _failure
from benchbay.progress import describe
from benchbay.record import Record
from benchbay.runner import SuiteRunner
from benchbay.suite import load
from benchbay.workloads.dreamzero.config import preset as dreamzero_preset
from benchbay.workloads.dreamzero.video import DroidCanvas
from benchbay.workloads.dreamzero.workload import DreamZero
from benchbay.workloads.feed import open_dataset
from benchbay.workloads.wallx.config import PRESETS as WALLX_PRESETS
from benchbay.workloads.wallx.video import ImageProcessor, QwenPatches
from benchbay.workloads.wallx.workload import WallX
from tests.conftest import write_suite

TINY_FED = "tests.fixtures.tinywork:FedTiny"

CPU = torch.device("cpu")
SHORT = {"episodes": 1, "episode_frames": 100}  # a whole 33-frame DreamZero clip fits; quick to generate


def _solid(value: int, frames: int = 2, h: int = 18, w: int = 32) -> torch.Tensor:
    return torch.full((frames, h, w, 3), value, dtype=torch.uint8)


def test_droid_canvas_tiles_the_wrist_view_across_the_top():
    sample = dreamzero_preset("dreamzero-5b").sample
    canvas = DroidCanvas(sample)([_solid(10), _solid(20), _solid(30)])
    assert canvas.shape == (3, 2, 320, 640) and canvas.dtype == torch.uint8
    assert (canvas[:, :, :160] == 30).all()  # wrist, across the top row
    assert (canvas[:, :, 160:, :320] == 10).all() and (canvas[:, :, 160:, 320:] == 20).all()
    crop = DroidCanvas(dreamzero_preset("dreamzero-14b").sample)([_solid(10), _solid(20), _solid(30)])
    assert crop.shape == (3, 2, 352, 640)


def test_qwen_patches_are_the_image_processors_rows():
    wallx = WALLX_PRESETS["wallx-tiny"]
    views = [torch.from_numpy(np.random.default_rng(i).integers(0, 256, (1, 48, 48, 3), dtype=np.uint8))
             for i in range(2)]
    rows = QwenPatches(wallx)(views)
    side = wallx.resized_image
    reference = ImageProcessor(patch_size=wallx.vision["patch_size"], temporal_patch_size=2,
                                      merge_size=wallx.vision["spatial_merge_size"], min_pixels=side * side,
                                      max_pixels=side * side)(images=[v[0].numpy() for v in views],
                                                              return_tensors="pt")["pixel_values"]
    assert rows.shape == (2 * wallx.patch_grid ** 2, 3 * 2 * wallx.vision["patch_size"] ** 2)
    torch.testing.assert_close(rows, reference)


def _video_knobs(workload_cls, **knobs):
    return {**knob_table.defaults_for(workload_cls), "precision": "fp32", "data": "video", **knobs}


def test_dreamzero_steps_on_the_clips_its_loader_decodes():
    """The step's video is the decoded 33-frame clip of each camera, tiled: as decoding sample 0
    directly and tiling it gives."""
    values = _video_knobs(DreamZero, attention="sdpa", mbs=1)
    workload = DreamZero({"preset": "dreamzero-tiny", **SHORT}, values, CPU)
    assert workload.skip_reason() is None
    workload.build()
    video = workload.batch(0)["video"]
    dataset = open_dataset(SHORT, "droid", 0)
    views, _ = SampleDecoder(backend("torchcodec", Settings()))(DreamZeroFullClip(dataset, 0).sample(0))
    assert [v.shape[0] for v in views] == [33, 33, 33]
    expected = DroidCanvas(workload.preset.sample)(views)
    assert video.shape == (1, 3, 33, *workload.preset.sample.canvas)
    torch.testing.assert_close(video[0], expected)
    assert workload.extra_metrics()["kb_per_frame"] > 0


def test_wallx_steps_on_the_frames_its_loader_decodes():
    values = _video_knobs(WallX, mbs=1, video_backend="pyav")
    workload = WallX({"preset": "wallx-tiny", "episodes": 1, "episode_frames": 12}, values, CPU)
    assert workload.skip_reason() is None
    workload.build()
    pixels = workload.batch(0).pixel_values
    dataset = open_dataset({"episodes": 1, "episode_frames": 12}, "libero", 0)
    views, _ = SampleDecoder(backend("pyav", Settings()))(CurrentFrame(dataset, 0).sample(0))
    torch.testing.assert_close(pixels, QwenPatches(workload.preset)(views))


def test_video_preset_picks_the_generated_dataset_as_lerobot_writes_it():
    """params.video_preset: LIBERO's views in v3.0 files (several episodes a file) for Wall-X; the
    step sees the frames that decoding the v3.0 dataset directly gives; an unknown name is refused."""
    params = {"episodes": 2, "episode_frames": 12, "video_preset": "lerobot-libero"}
    workload = WallX({"preset": "wallx-tiny", **params}, _video_knobs(WallX, mbs=1, video_backend="pyav"), CPU)
    assert workload.skip_reason() is None
    workload.build()
    assert workload.feed.dataset.layout == "v3.0" and workload.feed.dataset.codec("observation.images.image") == "av1"
    dataset = open_dataset(params, "lerobot-libero", 0)
    views, _ = SampleDecoder(backend("pyav", Settings()))(CurrentFrame(dataset, 0).sample(0))
    torch.testing.assert_close(workload.batch(0).pixel_values, QwenPatches(workload.preset)(views))
    unknown = WallX({"preset": "wallx-tiny", "video_preset": "droid2"}, _video_knobs(WallX, mbs=1), CPU)
    with pytest.raises(ValueError, match="video_preset: unknown dataset preset 'droid2'"):
        unknown.skip_reason()
    both = WallX({"preset": "wallx-tiny", "root": str(dataset.root), "video_preset": "libero"},
                 _video_knobs(WallX, mbs=1), CPU)
    with pytest.raises(ValueError, match="root and video_preset both set"):
        both.skip_reason()


def test_video_knobs_act_or_refuse():
    synthetic = DreamZero({"preset": "dreamzero-tiny"}, {"attention": "sdpa", "num_workers": 4}, CPU)
    assert "no effect with data=synthetic" in synthetic.skip_reason()
    av1 = WallX({"preset": "wallx-tiny"}, {"data": "video", "video_backend": "decord"}, CPU)
    assert "AV1" in av1.skip_reason()
    nvdec = DreamZero({"preset": "dreamzero-tiny"}, {"attention": "sdpa", "data": "video", "video_backend": "pyav",
                                                      "video_device": "cuda"}, CPU)
    assert "cpu only" in nvdec.skip_reason()


@pytest.mark.slow
def test_a_video_suite_records_the_wait_and_the_loader_cpu(tmp_path, in_repo, in_process):
    path = write_suite(tmp_path / "video.yaml", """
name: video-tiny
workload: {name: dreamzero, params: {preset: dreamzero-tiny, episodes: 1, episode_frames: 100}}
knobs: {precision: fp32, attention: sdpa, mbs: 1}
sweep:
  points:
    - {label: synthetic}
    - {label: video, data: video, num_workers: 0}
    - {label: video-workers, data: video, num_workers: 2}
steps: {warmup: 1, measure: 4}
timeout: 300
""")
    # the worker's own loop in this process (its loader workers, its children): a point's process
    # would import DreamZero's models again; no cold-start warm-up (runner.py's docstring): it would
    # build and run the first point once more, and only the form of the figures is checked
    summary = SuiteRunner(load(path), tmp_path / "results", launcher=in_process, warm_up=False).run_all()
    by_label = {r["label"]: r for r in store.read_records(summary.run)}
    assert {k: r["status"] for k, r in by_label.items()} == dict.fromkeys(by_label, "ok"), \
        {k: r["reason"] for k, r in by_label.items()}
    # 2 workers x prefetch_factor 2 asked for ahead: made while the first steps ran, warmed up over
    ahead = {"synthetic": 0, "video": 0, "video-workers": 4}
    for label in by_label:
        m = by_label[label]["metrics"]
        assert m["data_wait_s"] >= 0 and 0 <= m["data_wait_share"] < 1
        drained = by_label[label]["extra"].get("drain_steps", 0)  # a loader behind the step: until it ran dry
        assert m["warmup_steps"] == 1 + ahead[label] + drained and m["measured_steps"] == 4
        assert len(by_label[label]["series"]["data_waits_s"]) == 5 + ahead[label] + drained
    # decoding in the step's own process costs the step; workers decode elsewhere, on their CPU
    assert by_label["video"]["metrics"]["data_wait_s"] > by_label["synthetic"]["metrics"]["data_wait_s"]
    assert by_label["video-workers"]["metrics"]["child_cpu_util_mean"] > 0
    assert by_label["video"]["extra"]["kb_per_frame"] > 0
    # the report sets each video point beside its synthetic twin
    from benchbay.analysis import data_loading
    from benchbay.analysis.data_loading import best_loaders, inflation_table
    from benchbay.report import build_report

    frame = store.load_runs([summary.run])
    table = inflation_table(frame)
    assert len(table) == 2 and table["synthetic mean step (s)"].notna().all()
    synthetic = by_label["synthetic"]["metrics"]["step_time_mean_s"]
    assert table["synthetic mean step (s)"].tolist() == pytest.approx([synthetic, synthetic])
    # whether a queue ran dry inside 4 measured steps depends on the machine's load: only its form here
    assert len(best_loaders(table)) == 1 and table["lower bound"].map(lambda v: v == "" or v.startswith("yes")).all()
    # another run of the same points (a later session, its steps 2x slower): each video point is set
    # against its own run's synthetic step, not against the points of both runs pooled
    later = frame.assign(run_id="later")
    later["step_times_s"] = later["step_times_s"].map(lambda times: [2 * t for t in times])
    later["step_time_s"] *= 2
    both = inflation_table(pd.concat([frame, later], ignore_index=True))
    assert len(both) == 4
    pd.testing.assert_series_equal(both.loc[both["run_id"] == "later", "inflation_change"].reset_index(drop=True),
                                   table["inflation_change"], rtol=1e-6)
    # the later run stands for each loader; the earlier rows stay, named as measured again
    assert both.groupby("run_id")["measured again in"].unique().map(list).to_dict() == {
        summary.run.name: ["later"], "later": [""]}
    assert len(best_loaders(both)) == 1 and len(data_loading.current(both)) == 2
    # a point resumed on another card (the GPU hosts share a hostname) has no synthetic step there
    moved = frame.assign(**{"env.gpu_uuid_hash": frame["label"].map({"video": "card-b"}).fillna("card-a")})
    by_workers = inflation_table(moved).set_index("num_workers")
    assert by_workers.loc[0, "verdict"] == "not comparable" and pd.isna(by_workers.loc[0, "synthetic mean step (s)"])
    assert by_workers.loc[2, "synthetic mean step (s)"] == pytest.approx(synthetic)
    report = build_report(frame, tmp_path / "report", title="video").read_text()
    assert "Video in the training loop" in report and (tmp_path / "report" / "video-tiny-video_inflation.png").exists()


def test_a_loader_behind_the_step_is_drained_before_its_steps_are_measured(tmp_path, in_repo, in_process):
    """Its queue of batches made ahead hides a loader slower than the step for a while: the warm-up
    goes on until a step waits, so that the measured steps wait as training would; a loader that
    keeps up is warmed up over its backlog alone (the worker's loop in this process)."""
    path = write_suite(tmp_path / "fed.yaml", f"""
name: fed
workload: {{name: "{TINY_FED}"}}
knobs: {{precision: fp32}}
sweep: {{points: [{{label: behind, loader: behind}}, {{label: keeps-up, loader: keeps-up}}]}}
steps: {{warmup: 1, measure: 3}}
""")
    summary = SuiteRunner(load(path), tmp_path / "results", launcher=in_process, warm_up=False).run_all()
    by_label = {r["label"]: r for r in store.read_records(summary.run)}
    behind, keeps_up = by_label["behind"], by_label["keeps-up"]
    assert behind["status"] == keeps_up["status"] == "ok", (behind["reason"], keeps_up["reason"])
    # 1 warm-up step and 4 batches made ahead (steps 0-4); its queue planted dry after 6 batches, one
    # of them compute fidelity's (before step 4, the last planned warm-up step): step 5 warms up too,
    # the first to wait
    assert behind["extra"]["drain_steps"] == 1 and behind["metrics"]["warmup_steps"] == 1 + 4 + 1
    waits = behind["series"]["data_waits_s"]
    assert len(waits) == 6 + 3 and all(wait >= 0.2 for wait in waits[5:])  # every measured step waited
    assert behind["metrics"]["loader_s"] == pytest.approx(0.4)
    assert "drain_steps" not in keeps_up["extra"] and keeps_up["metrics"]["warmup_steps"] == 1 + 4
    assert "warmed up 1 more step until it ran dry" in describe(Record.from_json(behind))


class _Undecodable(torch.utils.data.Dataset):
    def __len__(self) -> int:
        return 1

    def __getitem__(self, i: int):
        try:  # as torchcodec fails on a host without FFmpeg: a long message, its cause chained
            raise RuntimeError("Could not load libtorchcodec. Likely causes:\n  1. FFmpeg is not installed")
        except RuntimeError as exc:
            raise DecodeError("torchcodec", "/data/videos/chunk-000/ep0.mp4", f"RuntimeError: {exc}") from exc


def test_a_decoder_failing_in_a_loader_worker_is_named_in_the_record():
    with pytest.raises(RuntimeError) as caught:
        next(iter(torch.utils.data.DataLoader(_Undecodable(), num_workers=1)))
    failure = _failure(caught.value, step_index=0, device=CPU)
    assert failure["status"] == "error"
    assert failure["reason"] == ("DecodeError in DataLoader worker process 0: torchcodec cannot decode "
                                 "/data/videos/chunk-000/ep0.mp4: RuntimeError: Could not load libtorchcodec. "
                                 "Likely causes:")
    assert "FFmpeg is not installed" in failure["traceback"]


def test_training_workloads_import_without_pyav():
    """The GPU host has no PyAV: only writing clips needs it, not the workloads on synthetic data."""
    code = ("import builtins; real = builtins.__import__\n"
            "def guarded(name, *args, **kwargs):\n"
            "    if name.split('.')[0] == 'av': raise ImportError('no PyAV here')\n"
            "    return real(name, *args, **kwargs)\n"
            "builtins.__import__ = guarded\n"
            "import benchbay.workloads.dreamzero, benchbay.workloads.wallx")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_a_loaders_speed_up_is_read_as_the_noise_between_processes():
    """No loader makes the step faster: the largest speed-up at a batch size bounds what counts as a
    slow-down there (each point is a process of its own; its interval is over its own steps)."""
    from benchbay.analysis.data_loading import _with_noise_floor, workers_claim
    from benchbay.analysis.metrics import Verdict

    rows = [("decord", 4, -0.16, -0.21, -0.12, Verdict.FASTER), ("pyav", 4, 0.10, 0.05, 0.15, Verdict.SLOWER),
            ("pyav", 16, 0.40, 0.30, 0.50, Verdict.SLOWER), ("decord", 16, -0.06, -0.12, 0.05, Verdict.NOT_SIGNIFICANT),
            # apart from its best count by more than the noise, yet within the noise of synthetic data
            ("torchcodec", 4, -0.15, -0.20, -0.10, Verdict.FASTER),
            ("torchcodec", 16, 0.12, 0.02, 0.25, Verdict.SLOWER)]
    table = pd.DataFrame([{"workload": "dreamzero", "mbs": 1, "video_backend": b, "video_device": "cpu",
                           "prefetch_factor": 2, "num_workers": w, "inflation_change": x, "inflation_change_low": lo,
                           "inflation_change_high": hi, "verdict": v, "mean step (s)": 0.4 * (1 + x)}
                          for b, w, x, lo, hi, v in rows])
    read = _with_noise_floor(table)
    assert (read["noise_floor_change"] == 0.16).all()
    assert list(read["verdict"]) == [Verdict.NOT_SIGNIFICANT, Verdict.NOT_SIGNIFICANT, Verdict.SLOWER,
                                     Verdict.NOT_SIGNIFICANT, Verdict.NOT_SIGNIFICANT, Verdict.NOT_SIGNIFICANT]
    claim = workers_claim(read).set_index("video_backend")["claim"]
    assert claim["pyav"] == "reproduced" and claim["decord"].startswith("not reproduced")
    assert claim["torchcodec"].startswith("not reproduced")


def test_a_steps_wait_is_its_mean_not_the_median_of_a_loader_delivering_in_bursts():
    # workers in phase: three steps find a batch ready, the fourth waits for all of them
    waits = _data_wait([0.0, 0.0, 0.0, 20.0], [3.0, 3.0, 3.0, 23.0])
    assert waits == {"data_wait_s": 5.0, "data_wait_share": 20.0 / 32.0}


def test_a_slow_down_measured_before_the_loaders_queue_ran_dry_is_a_lower_bound():
    from benchbay.analysis.data_loading import _lower_bound

    # H200, DreamZero-5B mbs 24, 2 decord workers warmed up over their backlog of 4 batches alone
    waits = [22.8] + [0.0] * 10 + [1.4, 1.2, 1.6, 0.0, 2.1, 0.0, 1.8]
    times = [31.7] + [2.8] * 10 + [4.2, 4.0, 4.4, 2.8, 4.9, 2.8, 4.5]
    point = pd.Series({"num_workers": 2, "data_waits_s": waits, "step_times_s": times, "warmup_steps": 7,
                       "data_wait_share": sum(waits[7:]) / sum(times[7:])})
    assert _lower_bound(point) == "yes: its queue first ran dry at step 11, in the measured steps (from 7)"
    assert _lower_bound(point.replace(7, 12)) == ""  # the warm-up went on until it ran dry
    keeps_up = point.copy()
    keeps_up["data_waits_s"] = [22.8] + [0.001] * 17
    keeps_up["data_wait_share"] = 0.0004
    assert _lower_bound(keeps_up) == ""
