"""One quantity, one figure: a point's step, p10 and p90 come from the same pooled steps; its newest
ok run is its figure and its other runs are history; the waterfall's labels clear its whiskers and
a legend says what its colours mean."""

import copy
import json

import numpy as np
import pandas as pd
from matplotlib.container import BarContainer, ErrorbarContainer

from benchbay.analysis import plots
from benchbay.analysis.frame import records_to_frame
from benchbay.analysis.metrics import Verdict
from benchbay.analysis.tables import point_summary, sweep_table
from benchbay.report import build_report
from benchbay.store import point_id
from tests.conftest import ROOT

WARMUP = 1


def _training(run_id: str, started: str, repeat: int, steady: list[float], status: str = "ok",
              reason: str | None = None) -> dict:
    """A record of one point of suite ``s``: one warm-up step, then ``steady``; its own p10/p90."""
    knobs = {"mbs": 2}
    times = [5.0, *steady]
    metrics = {"step_time_p10_s": float(np.percentile(steady, 10)), "step_time_p90_s": float(np.percentile(steady, 90)),
               "step_time_s": float(np.median(steady)), "warmup_steps": WARMUP, "measured_steps": len(steady),
               "samples_per_step": 2} if status == "ok" else {}
    return {"suite": "s", "run_id": run_id, "started_at": started, "point_id": point_id("w", {}, knobs),
            "label": "p", "repeat": repeat, "workload": "w", "params": {}, "knobs": knobs, "status": status,
            "reason": reason, "metrics": metrics, "series": {"step_times_s": times} if status == "ok" else {},
            "extra": {}, "env": {"machine_key": "m"}}


def test_the_step_p10_and_p90_come_from_the_same_pooled_steps():
    rng = np.random.default_rng(0)
    # two repeats near 1.0 s and one near 4.0 s: each repeat's p90 has a median of ~1.0, below the pooled mean
    steady = [list(level * (1 + 0.01 * rng.standard_normal(6))) for level in (1.0, 1.0, 4.0)]
    records = [_training("r1", "2026-01-01T00:00:00+00:00", i, s) for i, s in enumerate(steady)]
    (point,) = point_summary(records_to_frame(records)).to_dict("records")
    pooled = np.concatenate(steady)
    assert point["step_time_s"] == np.mean(pooled)
    assert point["step_time_p10_s"] == np.percentile(pooled, 10)
    assert point["step_time_p90_s"] == np.percentile(pooled, 90)
    assert point["step_time_p10_s"] <= point["step_time_s"] <= point["step_time_p90_s"]
    assert point["samples_per_s_per_gpu"] == 2 / point["step_time_s"]


def test_a_points_newest_ok_run_is_its_figure_and_its_other_runs_are_history():
    steps = {"r1": 4.0, "r2": 2.0, "r4": 1.0}
    records = [_training("r1", "2026-01-01T00:00:00+00:00", 0, [4.0] * 4),
               _training("r2", "2026-01-02T00:00:00+00:00", 0, [2.0] * 4),
               _training("r3", "2026-01-03T00:00:00+00:00", 0, [], "error", "RuntimeError: old"),
               _training("r4", "2026-01-04T00:00:00+00:00", 0, [1.0] * 4),
               _training("r4", "2026-01-04T00:01:00+00:00", 1, [], "oom", "out of memory at step 0"),
               _training("r5", "2026-01-05T00:00:00+00:00", 0, [], "crash", "killed by SIGSEGV")]
    (point,) = point_summary(records_to_frame(records)).to_dict("records")
    assert point["step_time_s"] == steps["r4"]  # not pooled with r1 and r2
    assert point["status"] == "ok 1/2, oom 1/2" and point["repeats"] == 2 and point["ok_repeats"] == 1
    assert point["reason"] == "out of memory at step 0"  # its own run's, not r3's
    assert point["history"] == "earlier: ok 2, error 1 in 3 runs; later: crash 1 in 1 run (killed by SIGSEGV)"
    # a point never ok: its newest run is its figure
    (never,) = point_summary(records_to_frame(records[2:3] + records[5:])).to_dict("records")
    assert never["status"] == "crash" and never["history"] == "earlier: error 1 in 1 run"


def _decode_runs() -> list[dict]:
    """The fixture's decoder run, and three earlier runs in which torchcodec failed."""
    records = [json.loads(line) for line in (ROOT / "tests/fixtures/decode_records.jsonl").read_text().splitlines()]
    torchcodec = next(r for r in records if r["knobs"]["backend"] == "torchcodec")
    failed = []
    for day in (1, 2, 3):
        old = copy.deepcopy(torchcodec)
        old.update(run_id=f"20261101-00000{day}-old{day}", started_at=f"2026-11-0{day}T00:00:00+00:00",
                   status="error", reason=f"RuntimeError: could not load libtorchcodec (try {day})", metrics={},
                   series={}, extra={})
        failed.append(old)
    return failed + records


def test_an_old_failure_leaves_a_decoder_in_the_decoder_table_and_plot(tmp_path):
    frame = records_to_frame(_decode_runs())
    points = point_summary(frame)
    torchcodec = points[points["point_id"] == _decode_runs()[0]["point_id"]].iloc[0]
    assert torchcodec["status"] == "ok" and torchcodec["repeats"] == 1
    assert torchcodec["history"] == "earlier: error 3 in 3 runs" and pd.isna(torchcodec["reason"])
    assert torchcodec["point_id"] in set(plots.decoder_points(points)["point_id"])
    assert "history" in sweep_table(points).columns
    build_report(frame, tmp_path / "report")
    text = (tmp_path / "report" / "report.md").read_text()
    decoders = text[text.index("### Decoders"):]
    assert decoders.count("torchcodec") >= 2  # both of its modes, as in the run without the failures
    assert "error 3/4" not in text and "could not load libtorchcodec" not in text
    assert "earlier: error 3 in 3 runs" in text


def _waterfall_table() -> pd.DataFrame:
    """A breakdown of each verdict, consistent: each change's interval around its step."""
    steps = [0.417, 0.248, 0.300, 0.290, 0.270]  # s per sample, 2 samples a step
    verdicts = [None, Verdict.FASTER, Verdict.SLOWER, Verdict.NOT_SIGNIFICANT, Verdict.NO_INTERVAL]
    widths = [None, 0.15, 0.07, 0.08, None]  # the throughput change's half-interval
    rows = []
    for i, (step, verdict, width) in enumerate(zip(steps, verdicts, widths, strict=True)):
        change = steps[i - 1] / step - 1 if i else np.nan
        low, high = (change - width, change + width) if width else (np.nan, np.nan)
        rows.append({"label": f"p{i}", "status": "ok", "samples_per_s_per_gpu": 2 / step, "verdict": verdict,
                     "throughput_change_low": low, "throughput_change_high": high, "speedup": steps[0] / step,
                     "speedup_low": steps[0] / step * 0.9 if width else np.nan,
                     "speedup_high": steps[0] / step * 1.1 if width else np.nan})
    return pd.DataFrame(rows)


def test_the_waterfalls_labels_sit_above_bars_and_whiskers_and_a_legend_keys_its_colours(tmp_path, monkeypatch):
    drawn = []
    monkeypatch.setattr(plots, "save", lambda fig, path: drawn.append(fig) or path)
    assert plots.waterfall(_waterfall_table(), tmp_path / "w.png", per="device") is not None
    (fig,) = drawn
    ax_time = fig.axes[0]
    bars = next(c for c in ax_time.containers if isinstance(c, BarContainer))
    whiskers = next(c for c in ax_time.containers if isinstance(c, ErrorbarContainer))
    tops = {round(rect.get_x() + rect.get_width() / 2): rect.get_y() + rect.get_height() for rect in bars}
    for segment in whiskers.lines[2][0].get_segments():
        x = round(segment[0][0])
        tops[x] = max(tops[x], *segment[:, 1])
    labels = [text for text in ax_time.texts if "%" in text.get_text()]
    assert len(labels) == 4
    for label in labels:
        x, y = label.xy
        assert y >= tops[round(x)] and label.get_va() == "bottom"  # above its bar and its whisker
    # n.s. is marked on its bar; a change without an interval is grey without a whisker, keyed once
    assert [t.get_text().split("\n")[-1] for t in labels[2:]] == ["n.s.", labels[3].get_text()]
    assert "\n" not in labels[3].get_text()
    (legend,) = fig.legends
    keyed = {tuple(handle.get_facecolor()) for handle in legend.legend_handles}
    used = {tuple(rect.get_facecolor()) for ax in fig.axes for c in ax.containers if isinstance(c, BarContainer)
            for rect in c}
    assert used <= keyed and len(keyed) == 4  # the reference, faster, slower, n.s. / no interval


def test_a_whisker_far_above_the_bars_runs_off_the_axis_with_its_label_beside_it(tmp_path, monkeypatch):
    drawn = []
    monkeypatch.setattr(plots, "save", lambda fig, path: drawn.append(fig) or path)
    # two processes a side 30x apart: an interval of -100% to +6000%, which would squeeze the bars to slivers
    table = _waterfall_table().iloc[:2].assign(throughput_change_low=[np.nan, -0.98],
                                               throughput_change_high=[np.nan, 60.0])
    plots.waterfall(table, tmp_path / "w.png")
    ax_time = drawn[0].axes[0]
    top, first = ax_time.get_ylim()[1], 1e3 / table["samples_per_s_per_gpu"].iloc[0]  # ms a sample
    whisker = next(c for c in ax_time.containers if isinstance(c, ErrorbarContainer))
    assert whisker.lines[2][0].get_segments()[0][:, 1].max() > top > first  # off the axis, above the bars
    (label,) = [text for text in ax_time.texts if "%" in text.get_text()]
    assert label.get_ha() == "left" and label.xy[1] == first  # beside the whisker, above its bar
