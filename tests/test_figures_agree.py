"""One figure, one meaning: a rendered report's tables, plots and history agree with each other and
with the records (issue 34). Every printed samples/s/GPU is samples per step (mbs here) over the
printed step, every waterfall label is its bar, every history regression is one that compare calls
significant, and every figure is drawn with its legends inside its canvas."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from benchbay.analysis import plots
from benchbay.analysis.breakdown import waterfall
from benchbay.analysis.compare import compare, compare_metric
from benchbay.analysis.frame import records_to_frame
from benchbay.analysis.history import history
from benchbay.analysis.metrics import METRICS
from benchbay.analysis.points import MatchedPoint
from benchbay.analysis.tables import point_summary
from benchbay.report import build_report
from benchbay.store import load_runs
from benchbay.suite.model import Search, SuiteMeta
from tests.fixtures.make_records import ENV_H200, WARMUP, record, timing_metrics

FIXTURES = Path(__file__).parent / "fixtures"
BREAKDOWN = ["baseline", "+attention", "+compile", "+cuda_graph", "+selective"]
META = SuiteMeta(name="fixture-train", breakdown=BREAKDOWN, search=Search(knob="mbs", min=1, max=256))


def fixture_records(*names: str) -> list[dict]:
    return [json.loads(line) for name in names for line in (FIXTURES / name).read_text().splitlines()]


def drawn(df: pd.DataFrame, out: Path, meta: dict[str, SuiteMeta] | None = None) -> dict[str, object]:
    """Every figure ``build_report`` draws into ``out`` from ``df``, by file name."""
    figures: dict[str, object] = {}
    save = plots.save

    def keep(fig, path):
        figures[Path(path).name] = fig
        return save(fig, path)

    mp = pytest.MonkeyPatch()
    mp.setattr(plots, "save", keep)
    try:
        build_report(df, out, suite_meta=meta)
    finally:
        mp.undo()
    return figures


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> tuple[Path, dict[str, object]]:
    """The fixture report (a training suite and a decoder suite), with every figure it drew."""
    out = tmp_path_factory.mktemp("report")
    df = records_to_frame(fixture_records("train_records.jsonl", "decode_records.jsonl"))
    return out / "report.md", drawn(df, out, {"fixture-train": META})


def markdown_tables(text: str) -> list[pd.DataFrame]:
    tables, lines = [], text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("|") and i + 1 < len(lines) and set(lines[i + 1].replace("|", "").strip()) <= set("-: "):
            header = [c.strip() for c in lines[i].strip("|").split("|")]
            rows, i = [], i + 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append([c.strip() for c in lines[i].strip("|").split("|")])
                i += 1
            tables.append(pd.DataFrame(rows, columns=header))
        else:
            i += 1
    return tables


def test_every_printed_throughput_is_the_batch_over_the_printed_step(rendered):
    report, _ = rendered
    summary = point_summary(records_to_frame(fixture_records("train_records.jsonl")))
    batch = dict(zip(summary["name"], summary["samples_per_step"], strict=True))
    ok = summary[summary["status"] == "ok"]
    assert (ok["samples_per_step"] == ok["mbs"].astype(float)).all()  # no gradient accumulation in the fixture
    assert (summary["world_size"] == 1).all()  # so samples/s = mbs x world / step = samples/s/GPU
    checked = 0
    for table in markdown_tables(report.read_text()):
        if not {"step (s)", "samples/s/GPU"} <= set(table.columns):
            continue
        for _, row in table.iterrows():
            if not row["step (s)"] or not row["samples/s/GPU"]:
                continue
            if "mbs" in table:
                mbs = float(row["mbs"])
            elif "largest ok" in table:
                mbs = float(row["largest ok"])
            else:
                mbs = batch[row.get("name") or row.get("label") or row["point"]]
            # both printed to 4 significant figures
            assert float(row["samples/s/GPU"]) == pytest.approx(mbs / float(row["step (s)"]), rel=1e-3), row.to_dict()
            checked += 1
    assert checked >= 20  # the sweep, the effective throughput and the breakdown tables


def _percent(label: str) -> float:
    return float(label.split("%")[0]) / 100


def test_every_waterfall_label_is_its_bar_and_its_table_row(rendered):
    _, figures = rendered
    fig = figures["fixture-train-waterfall.png"]
    ax_time, ax_rate = fig.axes[:2]
    tops = np.array([bar.get_y() + bar.get_height() for bar in ax_time.patches])
    labels = [text.get_text() for text in ax_time.texts if "%" in text.get_text()]
    assert len(labels) == len(tops) - 1 == len(BREAKDOWN) - 1
    table = waterfall(point_summary(records_to_frame(fixture_records("train_records.jsonl"))), BREAKDOWN)
    for i, label in enumerate(labels, start=1):
        assert _percent(label) == pytest.approx(tops[i] / tops[i - 1] - 1, abs=6e-4)
        assert _percent(label) == pytest.approx(table["step_change"].iloc[i], abs=6e-4)  # the table says the same
    rates = np.array([bar.get_height() for bar in ax_rate.patches])
    for i, text in enumerate(ax_rate.texts):
        speedup = float(text.get_text().split("x")[0])
        assert speedup == pytest.approx(rates[i] / rates[0], abs=6e-3)
        assert speedup == pytest.approx(table["speedup"].iloc[i], abs=6e-3)


def test_every_lever_of_a_waterfall_is_visible_beside_a_first_bar_ten_times_the_rest(tmp_path):
    # the frontier: official ~1,120 ms a sample, then 116 -> 81 ms over five levers of 1-20%
    rates = np.array([0.89, 8.63, 8.73, 8.93, 11.06, 12.27])
    table = pd.DataFrame({"label": [f"lever{i}" for i in range(len(rates))], "status": "ok",
                          "samples_per_s_per_gpu": rates, "verdict": ["", *["faster"] * 5],
                          "throughput_change_low": np.nan, "throughput_change_high": np.nan,
                          "speedup": rates / rates[0], "speedup_low": rates / rates[0] * 0.99,
                          "speedup_high": rates / rates[0] * 1.01})
    figures = {}
    mp = pytest.MonkeyPatch()
    mp.setattr(plots, "save", lambda fig, path: figures.setdefault("fig", fig))
    try:
        plots.waterfall(table, tmp_path / "w.png")
    finally:
        mp.undo()
    ax_time = figures["fig"].axes[0]
    low, high = ax_time.get_ylim()
    for bar in ax_time.patches[2:]:  # the 1.1% lever and those after it
        ends = sorted((bar.get_y(), bar.get_y() + bar.get_height()))  # a gain's bar runs downwards
        shown = min(ends[1], high) - max(ends[0], low)
        assert shown >= 0.02 * (high - low), bar
    assert any("1124" in text.get_text() and "cut" in text.get_text() for text in ax_time.texts)


def assert_drawn_inside(figures: dict[str, object]) -> None:
    """Each figure has something on every visible axes, and its legends lie inside its canvas."""
    for name, fig in figures.items():
        agg = FigureCanvasAgg(fig)  # a Figure without pyplot has no renderer of its own
        agg.draw()
        renderer = agg.get_renderer()
        canvas = fig.bbox
        axes = [ax for ax in fig.axes if ax.get_visible()]
        assert axes and all(ax.lines or ax.patches or ax.collections for ax in axes), name
        legends = [*fig.legends, *(ax.get_legend() for ax in axes if ax.get_legend())]
        for legend in legends:
            box = legend.get_window_extent(renderer)
            assert box.x0 >= canvas.x0 - 1 and box.x1 <= canvas.x1 + 1, name
            assert box.y0 >= canvas.y0 - 1 and box.y1 <= canvas.y1 + 1, name


def test_every_figure_is_drawn_with_its_legends_inside_the_canvas(rendered):
    _, figures = rendered
    assert {f"fixture-train-{kind}.png" for kind in ("waterfall", "batch_scaling", "step_times", "losses", "phases")} \
        | {"fixture-decode-decode_latency.png", "fixture-decode-cpu_util.png"} <= set(figures)
    assert_drawn_inside(figures)


def test_the_video_and_scaling_figures_are_drawn_with_their_legends_inside_the_canvas(tmp_path):
    # a committed run of the video suite (synthetic and video points at mbs 1), and the fixture's
    # first ok point again at 2 GPUs
    video = load_runs([Path(__file__).parents[1] / "results/dreamzero-5b-video/20261201-213948-bbf4"])
    one = [r for r in fixture_records("train_records.jsonl") if r["status"] == "ok"][:1]
    two = [{**r, "world_size": 2, "run_id": "20261129-161500-2gpu"} for r in one]
    figures = {**drawn(video, tmp_path / "video"), **drawn(records_to_frame(one + two), tmp_path / "scaling")}
    assert {"dreamzero-5b-video-video_inflation.png", "scaling-scaling.png"} <= set(figures)
    assert_drawn_inside(figures)


def run_records(run: int, steps: list[float]) -> dict:
    """One run of one point: three warm-up steps, then ``steps``."""
    series = [3.0, 2.0, 1.5, *steps]
    metrics = {**timing_metrics(series, 2), "measured_steps": len(steps)}
    out = record("hist", "dreamzero", {"preset": "tiny"}, {"mbs": 2}, 0, "ok", ENV_H200, metrics=metrics,
                 series={"step_times_s": series})
    assert metrics["warmup_steps"] == WARMUP
    return {**out, "run_id": f"2026120{run}-000000-hist", "started_at": f"2026-12-0{run}T00:00:00+00:00"}


def test_a_history_regression_is_significant_in_compare_and_a_noisy_step_is_not_one():
    rng = np.random.default_rng(0)
    quiet = [run_records(r, list(level * (1 + 0.005 * rng.standard_normal(12))))
             for r, level in enumerate([1.0, 1.0, 1.0, 1.2, 1.2, 1.2], start=1)]
    # the run means step by 30% too, but within each run the steps spread from 0.2 to 2.1 s
    noisy = [run_records(r, [level - 0.8, level, level + 0.8])
             for r, level in enumerate([1.0, 1.0, 1.0, 1.3, 1.3, 1.3], start=1)]
    for runs, expected in ((quiet, "regression"), (noisy, "noisy")):
        df = records_to_frame(runs)
        table = history(df)
        flagged = table[table["change_point"]]
        assert list(flagged["verdict"]) == [expected]
        for _, row in table[table["regression"]].iterrows():
            cut = list(table["run_id"]).index(row["run_id"])
            point = MatchedPoint({}, df[df["run_id"].isin(table["run_id"][:cut])],
                                 df[df["run_id"].isin(table["run_id"][cut:])])
            assert compare_metric(point, METRICS["step_time"]).verdict == "slower"


def test_compare_takes_thousands_of_rounds_a_side_as_one_process():
    # pytest-benchmark keeps every round, all in one process: thousands of steps are still one sample
    # of the noise between processes, so one process a side gives a ratio and no verdict
    rng = np.random.default_rng(1)
    sides = [records_to_frame([run_records(r, list(0.01 * (1 + 0.01 * rng.standard_normal(3000))))]) for r in (1, 2)]
    table = compare(*sides, metrics=("step_time",))
    assert table["verdict"].iloc[0] == "cannot support a verdict"
    assert np.isfinite(table["ratio"].iloc[0]) and abs(table["ratio"].iloc[0] - 1) < 0.01
