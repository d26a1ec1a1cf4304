"""Analysis and report from the recorded fixture results (tests/fixtures/*.jsonl)."""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from benchbay.analysis import plots
from benchbay.analysis.batch_search import feasible, largest_feasible
from benchbay.analysis.batch_size import configurations, effective_throughput
from benchbay.analysis.breakdown import knob_changes, leave_one_out, waterfall
from benchbay.analysis.frame import flatten_record, knob_columns, records_to_frame
from benchbay.analysis.metrics import Verdict
from benchbay.analysis.mfu import lookup_peak, mfu_column, peak_flops_for
from benchbay.analysis.steady import amortisation_steps, amortisation_table, detect_warmup
from benchbay.analysis.tables import (
    combined_status,
    equivalent_groups,
    loss_agreement,
    point_summary,
    reference_band,
    reference_runs,
    sweep_table,
    trailing_mean,
    with_repeats,
)
from benchbay.record import Record
from benchbay.report import build_report
from benchbay.suite.model import Search, SuiteMeta
from tests.fixtures.make_records import ENV_CPU, MEASURED, WARMUP, record, timing_metrics

FIXTURES = Path(__file__).parent / "fixtures"
BREAKDOWN = ["baseline", "+attention", "+compile", "+cuda_graph", "+selective"]
SUITE_META = SuiteMeta(name="fixture-train", description="recorded fixture", breakdown=BREAKDOWN,
                       search=Search(knob="mbs", min=1, max=256))
H200_PEAK = 698e12  # the H200's sustained peak in benchbay.analysis.mfu's table
CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)


def load(name: str) -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / name).read_text().splitlines()]


@pytest.fixture(scope="module")
def train_records() -> list[dict]:
    return load("train_records.jsonl")


@pytest.fixture(scope="module")
def records(train_records) -> list[dict]:
    return train_records + load("decode_records.jsonl")


@pytest.fixture(scope="module")
def summary(records) -> pd.DataFrame:
    return point_summary(records_to_frame(records))


@pytest.fixture(scope="module")
def train(summary) -> pd.DataFrame:
    return summary[summary["suite"] == "fixture-train"].reset_index(drop=True)


@pytest.fixture(scope="module")
def report_dir(records, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report")
    build_report(records_to_frame(records), out, title="Fixture report", suite_meta=SUITE_META)
    return out


def by_label(records: list[dict], label: str) -> list[dict]:
    return [r for r in records if r["label"] == label]


def pooled_steady(records: list[dict]) -> np.ndarray:
    return np.concatenate([r["series"]["step_times_s"][r["metrics"]["warmup_steps"]:] for r in records])


# --- frame ---------------------------------------------------------------------------------------
def test_flatten_record_layout(train_records):
    row = flatten_record(train_records[0])
    assert row["mbs"] == 1 and row["compile"] == "off" and row["param.preset"] == "tiny"
    assert row["env.gpu"] == "NVIDIA H200" and row["step_time_s"] == train_records[0]["metrics"]["step_time_s"]
    assert isinstance(row["step_times_s"], list) and "extra.phases" in row
    assert set(row["knob_names"]) == set(train_records[0]["knobs"])


def test_knobs_keep_their_values_beside_another_suite(records):
    df = records_to_frame(records)
    assert "mbs" in knob_columns(df) and "backend" in knob_columns(df)
    assert df["mbs"].dropna().map(type).eq(int).all()  # not turned into floats by the decode rows


# --- tables --------------------------------------------------------------------------------------
def test_sweep_table_matches_the_records(train_records, train):
    """Each row against figures computed here from the records alone."""
    knobs = ["attention", "compile", "cuda_graph", "mbs", "offload", "recompute", "sharding"]
    table = sweep_table(train)
    assert list(table.columns[:3]) == ["name", "status", "repeats"]  # what a reader looks for first
    assert list(table.columns[-7:]) == knobs  # then the knobs that vary
    assert "peak_host_rss_gib" not in table  # a GPU's peak memory is shown instead
    points: dict[tuple, list[dict]] = {}
    for r in train_records:
        points.setdefault(tuple(r["knobs"][k] for k in knobs), []).append(r)
    assert len(table) == len(points)
    for _, row in table.iterrows():
        reps = points[tuple(row[k] for k in knobs)]
        assert row["repeats"] == len(reps) and row["status"] == reps[0]["status"]
        if reps[0]["status"] != "ok":
            assert row["reason"] == reps[0]["reason"] and math.isnan(row["step_time_s"])
            continue
        step = np.mean(pooled_steady(reps))  # stats.STEP_STATISTIC: every repeat's steady steps, pooled
        assert row["step_time_s"] == pytest.approx(step)
        assert row["samples_per_s_per_gpu"] == pytest.approx(row["mbs"] / step)  # throughput over the shown step
        assert row["peak_mem_reserved_gib"] == max(r["metrics"]["peak_mem_reserved_gib"] for r in reps)
        assert row["warmup_detected"] == WARMUP  # the fixture's planted warm-up steps
    assert set(table["status"]) == {"ok", "oom", "crash", "skipped", "timeout"}


def test_combined_status_counts_disagreeing_repeats():
    assert combined_status(["ok", "ok"]) == "ok"
    assert combined_status(["ok", "oom", "ok"]) == "ok 2/3, oom 1/3"


def test_mfu_is_recomputed_where_missing(train_records, train):
    ok = train[train["status"] == "ok"]
    assert train_records[0]["metrics"]["mfu"] is not None
    assert by_label(train_records, "+compile")[0]["metrics"]["mfu"] is None
    expected = ok["flops_per_sample"] * ok["samples_per_s_per_gpu"] / H200_PEAK
    np.testing.assert_allclose(ok["mfu"], expected, rtol=1e-9)
    df = records_to_frame(train_records)
    achieved = (df["flops_per_sample"] * df["samples_per_s_per_gpu"]).dropna()
    np.testing.assert_allclose(mfu_column(df, peak_flops=1e15).dropna(), achieved / 1e15)


def test_peak_table_by_device_name():
    assert peak_flops_for("NVIDIA H200") == 698e12
    assert peak_flops_for("NVIDIA H100 80GB HBM3") == 989e12
    assert peak_flops_for("NVIDIA H100 PCIe") == 756e12
    assert peak_flops_for("NVIDIA A100-SXM4-80GB") == 312e12
    assert peak_flops_for("NVIDIA L40S") == 362e12
    assert peak_flops_for("NVIDIA RTX PRO 6000 Blackwell Server Edition") == 500e12
    assert peak_flops_for(None) is None and lookup_peak("Some CPU") is None
    assert peak_flops_for(None, peak_flops=1e14) == 1e14


def test_effective_throughput_takes_each_configuration_at_its_largest_ok_batch(train_records, train):
    table = effective_throughput(train, "mbs")
    assert list(table["largest_ok"]) == [6, 13]
    assert list(table["first_failing"]) == ["7 (oom)", "14 (oom)"]

    def rate(overrides_label: str, mbs: int) -> float:
        base = by_label(train_records, overrides_label)[0]["knobs"]
        found = [r for r in train_records if r["knobs"] == {**base, "mbs": mbs}]
        return found[0]["metrics"]["samples_per_step"] / np.mean(pooled_steady(found))  # over the shown step

    assert table["ratio"].iloc[1] == pytest.approx(rate("+selective", 13) / rate("baseline", 6))
    # one process a side: a ratio, but no interval and no verdict of faster or slower
    assert table["verdict"].iloc[1] == Verdict.NO_INTERVAL and table[["ratio_low", "ratio_high"]].iloc[1].isna().all()


def test_effective_throughput_says_whether_a_ratio_is_more_than_the_noise():
    """Processes 3% apart: a configuration 1% faster is not significant, one 20% faster is faster."""
    def config(name: str, step: float, mbs: int) -> list[dict]:
        series = [[step * (1 + 0.03 * (repeat - 1)) * (1 + 0.001 * (i % 3)) for i in range(WARMUP + MEASURED)]
                  for repeat in range(3)]
        return [record("bs", "tiny", {}, {"mbs": mbs, "variant": name}, repeat, "ok", ENV_CPU,
                       metrics=timing_metrics(steps, mbs), series={"step_times_s": steps})
                for repeat, steps in enumerate(series)]

    rows = config("a", 1.0, 4) + config("a", 1.8, 8) + config("b", 0.99 * 1.8, 8) + config("b", 0.99, 4) \
        + config("c", 1.8 / 1.2, 8) + config("c", 1.0 / 1.2, 4)
    table = effective_throughput(point_summary(records_to_frame(rows))).set_index("configuration")
    assert table.loc["variant=b", "verdict"] == Verdict.NOT_SIGNIFICANT
    assert table.loc["variant=c", "verdict"] == Verdict.FASTER
    low, ratio, high = table.loc["variant=c", ["ratio_low", "ratio", "ratio_high"]]
    assert low < ratio < high and ratio == pytest.approx(1.2)


def test_effective_throughput_keeps_the_searchs_rule_of_what_fits():
    # H200, Wall-X FSDP2 full shard at 1 GPU: mbs 44 and 48 ran, but with allocator retries and slower
    points = pd.DataFrame({"suite": "s", "knob_names": [["mbs"]] * 4, "label": "fsdp2_full",
                           "mbs": [36, 44, 48, 52], "status": ["ok", "ok", "ok", "oom"],
                           "samples_per_s_per_gpu": [59.0, 48.9, 53.0, np.nan],
                           "step_time_s": [0.61, 0.90, 0.91, np.nan],
                           "peak_mem_reserved_gib": [128.0, 138.5, 138.5, np.nan],
                           "device_mem_total_gib": [139.8, 139.8, 139.8, np.nan], "alloc_retries": [0, 8, 8, np.nan]})
    plain = effective_throughput(points).iloc[0]
    assert (plain["largest_ok"], plain["first_failing"]) == (48, "52 (oom)")
    strict = effective_throughput(points, zero_retries=True).iloc[0]
    assert (strict["largest_ok"], strict["samples_per_s_per_gpu"]) == (36, 59.0)
    assert strict["first_failing"] == "44 (allocator retries)"
    assert effective_throughput(points, headroom_gib=2.0).iloc[0]["first_failing"] == "44 (under 2 GiB headroom)"
    # figures a CPU run does not record never count against it
    cpu = points.assign(device_mem_total_gib=np.nan, alloc_retries=np.nan)
    assert effective_throughput(cpu, headroom_gib=2.0, zero_retries=True).iloc[0]["largest_ok"] == 48


def test_the_batch_table_says_when_nothing_fits_and_when_the_search_hit_its_max():
    # H200, DreamZero-5B at 1 GPU: FSDP2 full + full recompute fits the search's max (64);
    # shard-grad-op's first probe (mbs 8) ran only with allocator retries, so nothing fits
    points = pd.DataFrame({"suite": "s", "knob_names": [["mbs", "sharding"]] * 4,
                           "label": ["full"] * 3 + ["grad_op"], "sharding": ["full"] * 3 + ["grad_op"],
                           "mbs": [8, 16, 64, 8], "status": "ok", "alloc_retries": [0, 0, 0, 6],
                           "extra.search_group": ["a"] * 3 + ["b"], "samples_per_s_per_gpu": [6.7, 7.2, 7.5, 7.2],
                           "step_time_s": [1.2, 2.2, 8.6, 1.1], "peak_mem_reserved_gib": [105.0, 109.0, 138.4, 138.5]})
    table = effective_throughput(points, zero_retries=True, search_max=64).set_index("configuration")
    assert table.loc["full", "largest_ok"] == 64
    assert table.loc["full", "first_failing"] == "none up to the search's max (64)"
    assert pd.isna(table.loc["grad_op", "largest_ok"])
    assert table.loc["grad_op", "first_failing"] == "8 (allocator retries)"


def test_a_configuration_is_named_by_its_label_before_the_batch_it_runs_at():
    # suites label a batch walk "+bf16@52", "+bf16@60": the configuration is "+bf16"
    points = pd.DataFrame({"suite": "s", "knob_names": [["mbs", "precision"]] * 4,
                           "label": ["+chunked_ce", "+chunked_ce@28", "+bf16@52", "+bf16@60"],
                           "mbs": [20, 28, 52, 60], "precision": ["bf16_mixed"] * 2 + ["bf16"] * 2})
    assert [name for name, _ in configurations(points)] == ["+chunked_ce", "+bf16"]
    # an "@" that is not the point's batch stays part of the name
    points["label"] = ["a@1", "a@2", "b@9", "b@9"]
    assert [name for name, _ in configurations(points)] == ["precision=bf16_mixed", "precision=bf16"]


def test_points_sharing_a_label_are_named_by_what_differs(train_records):
    # a label measured under an older version of the suite is another point: two rows of one name
    # would read as two figures of one point
    from benchbay.store import point_id

    first = next(r for r in train_records if r["status"] == "ok" and r["label"] == "baseline")
    knobs = {**first["knobs"], "offload": "optimizer"}
    older = {**first, "knobs": knobs, "point_id": point_id(first["workload"], first["params"], knobs)}
    names = list(point_summary(records_to_frame([first, older]))["name"])
    assert names == ["baseline (offload=none)", "baseline (offload=optimizer)"]
    assert list(point_summary(records_to_frame([first]))["name"]) == ["baseline"]


def test_loss_groups_pair_points_that_differ_in_compile_or_graphs_only(train):
    groups = [sorted(g["name"]) for g in equivalent_groups(train)]
    assert groups == [["+attention", "+compile", "+cuda_graph"], ["+selective", "best-cuda_graph"]]
    assert [sorted(g["name"]) for g in equivalent_groups(train, [["baseline", "best-attention"]])] == \
        [["baseline", "best-attention"]]
    # the suite's order, not the records': its first label is the reference
    assert [list(g["name"]) for g in equivalent_groups(train, [["best-attention", "baseline"]])] == \
        [["best-attention", "baseline"]]


def test_loss_agreement_says_which_points_stay_within_the_tolerance():
    group = pd.DataFrame({"name": ["eager", "compiled", "drifted"],
                          "losses": [[4.0, 3.0, 2.0], [4.01, 3.0, 2.02], [4.0, 3.5, 2.0]]})
    table = loss_agreement(group, rtol=0.02, atol=0.0).set_index("point")
    assert list(table["within_tolerance"][:2]) == ["yes", "yes"]
    assert table.loc["drifted", "within_tolerance"] == "no (step 1: 3.5 vs 3)"
    assert table.loc["drifted", "max_abs_diff"] == pytest.approx(0.5)
    assert table.loc["compiled", "max_rel_diff"] == pytest.approx(0.01)


def test_a_window_compares_trailing_means_of_curves_that_swing_step_by_step():
    # two runs that trade places every step (each step's own loss swings) but follow one trend
    group = pd.DataFrame({"name": ["bf16", "fp8", "drifted"],
                          "losses": [[4.0, 3.0, 4.0, 3.0], [3.0, 4.0, 3.0, 4.0], [4.0, 3.0, 4.4, 3.3]]})
    step_by_step = loss_agreement(group, rtol=0.05, atol=0.0).set_index("point")
    assert step_by_step.loc["fp8", "within_tolerance"] == "no (step 0: 3 vs 4)"
    smoothed = trailing_mean(group, 2)
    assert list(smoothed["losses"][0]) == [4.0, 3.5, 3.5, 3.5]  # fewer steps at the start
    table = loss_agreement(smoothed, rtol=0.05, atol=0.0).set_index("point")
    assert table.loc["fp8", "within_tolerance"] == "no (step 0: 3 vs 4)"  # step 0 is a mean of one
    assert table.loc["drifted", "within_tolerance"] == "no (step 2: 3.7 vs 3.5)"
    assert table.loc["fp8", "final_loss"] == 3.5 and list(group["losses"][1]) == [3.0, 4.0, 3.0, 4.0]
    assert trailing_mean(group, 1) is group


def test_a_first_point_measured_again_is_a_band_of_references():
    # the reference's own repeat parts from it by 10% at step 1: a point between its runs agrees, one
    # within the tolerance of the band's edge agrees, one beyond it differs
    group = pd.DataFrame({"name": ["eager", "between", "edge", "drifted"], "loss_repeats": [
        [[4.0, 3.0, 2.0], [4.0, 3.3, 2.0]], None, None, None],
        "losses": [[4.0, 3.0, 2.0], [4.0, 3.15, 2.0], [4.0, 3.36, 1.97], [4.0, 3.6, 2.0]]})
    table = loss_agreement(with_repeats(group), rtol=0.02, atol=0.0).set_index("point")
    assert list(table.index) == ["eager", "eager (repeat 2)", "between", "edge", "drifted"]
    assert table.loc["eager (repeat 2)", "within_tolerance"] == "no (step 1: 3.3 vs 3)"
    assert table.loc["between", "within_tolerance"] == "yes (within the band of eager's 2 runs)"
    assert table.loc["edge", "within_tolerance"] == "yes (within the band of eager's 2 runs)"
    assert table.loc["drifted", "within_tolerance"] == "no (step 1: 3.6 outside eager's runs' 3 to 3.3)"
    # the differences stay those from the first run
    assert table.loc["between", "max_rel_diff"] == pytest.approx(0.05)
    # the band the verdicts use is the one the loss figure shades
    lower, upper = reference_band(reference_runs(with_repeats(group)), rtol=0.02, atol=0.0)
    assert lower[1] == pytest.approx(3.0 * 0.98) and upper[1] == pytest.approx(3.3 * 1.02)
    assert list(reference_runs(group)[0]) == [4.0, 3.0, 2.0] and len(reference_runs(group)) == 1
    # a point not faithful fails whatever its losses do
    group["fidelity"] = ["faithful (1.00)", "lossy (0.40)", "", ""]
    table = loss_agreement(with_repeats(group), rtol=0.02, atol=0.0).set_index("point")
    assert table.loc["between", "within_tolerance"] == "no (update fidelity: lossy (0.40))"


def test_a_member_measured_again_agrees_when_its_runs_meet_the_band():
    # one run of "noisy" leaves eager's band at step 1, its second run lies inside; "straddling"'s runs lie
    # either side of it: neither can be told apart from eager; "shifted" leaves it in both runs
    group = pd.DataFrame({"name": ["eager", "noisy", "straddling", "shifted"], "loss_repeats": [
        [[4.0, 3.0, 2.0], [4.0, 3.1, 2.0]], [[4.0, 3.5, 2.0], [4.0, 3.05, 2.01]],
        [[4.0, 2.5, 2.0], [4.0, 3.5, 2.0]], [[4.0, 3.6, 2.0], [4.0, 3.5, 2.0]]],
        "losses": [[4.0, 3.0, 2.0], [4.0, 3.5, 2.0], [4.0, 2.5, 2.0], [4.0, 3.6, 2.0]]})
    rows = with_repeats(group)
    assert list(rows["name"]) == ["eager", "eager (repeat 2)", "noisy", "noisy (repeat 2)", "straddling",
                                  "straddling (repeat 2)", "shifted", "shifted (repeat 2)"]
    table = loss_agreement(rows, rtol=0.02, atol=0.0).set_index("point")
    assert table.loc["noisy", "within_tolerance"] == (
        "yes (its 2 runs' span meets the band of eager's 2 runs at every step)")
    assert table.loc["noisy (repeat 2)", "within_tolerance"] == "yes (within the band of eager's 2 runs)"
    assert table.loc["straddling", "within_tolerance"].startswith("yes (its 2 runs' span meets")
    assert table.loc["shifted", "within_tolerance"] == ("no (step 1: its 2 runs' 3.5 to 3.6 outside eager's runs' "
                                                        "3 to 3.1)")
    assert table.loc["shifted (repeat 2)", "within_tolerance"] == "no (step 1: 3.5 outside eager's runs' 3 to 3.1)"
    assert table.loc["eager (repeat 2)", "within_tolerance"] == "no (step 1: 3.1 vs 3)"  # from the first run
    # a reference run once: the member's runs against that one run's tolerance
    once = group.assign(loss_repeats=[None, group["loss_repeats"][1], None, None])
    table = loss_agreement(with_repeats(once), rtol=0.02, atol=0.0).set_index("point")
    assert table.loc["noisy", "within_tolerance"] == (
        "yes (its 2 runs' span meets the band of eager's run at every step)")
    assert table.loc["shifted", "within_tolerance"] == "no (step 1: 3.6 vs 3)"  # one run each: as ever


def test_a_points_loss_repeats_are_those_of_its_first_run(train_records):
    first = next(r for r in train_records if r["status"] == "ok" and r["series"].get("losses"))
    again = {**first, "repeat": 1, "series": {**first["series"], "losses": [x + 1 for x in first["series"]["losses"]]}}
    elsewhere = {**first, "run_id": "20261130-000000-beef", "repeat": 2,
                 "series": {**first["series"], "losses": [0.0] * len(first["series"]["losses"])}}
    mine = [r for r in train_records if r["point_id"] != first["point_id"]] + [first, elsewhere, again]
    point = point_summary(records_to_frame(mine)).set_index("point_id").loc[first["point_id"]]
    assert point["loss_repeats"] == [first["series"]["losses"], again["series"]["losses"]]


def test_a_points_figures_are_of_all_its_repeats_not_its_first(train_records):
    first = next(r for r in train_records if r["status"] == "ok")
    twice = [{**first, "extra": {**first["extra"], "view_latency_ms_median": ms, "backend": "torchcodec"}}
             for ms in (116.5, 107.5)]
    point = point_summary(records_to_frame([{**twice[0]}, {**twice[1], "repeat": 1}])).iloc[0]
    assert point["repeats"] == 2
    assert point["extra.view_latency_ms_median"] == pytest.approx(112.0)  # the median, as the metrics'
    assert point["extra.backend"] == "torchcodec"


# --- breakdown -----------------------------------------------------------------------------------
def test_waterfall_deltas_match_the_records(train_records, train):
    table = waterfall(train, BREAKDOWN).set_index("label")
    assert list(table.index) == BREAKDOWN and (table["status"] == "ok").all()
    for previous, label in zip(BREAKDOWN, BREAKDOWN[1:], strict=False):
        before, after = by_label(train_records, previous), by_label(train_records, label)
        ratio = np.mean(pooled_steady(after)) / np.mean(pooled_steady(before))
        row = table.loc[label]
        assert row["step_change"] == pytest.approx(ratio - 1)
        assert row["step_change_low"] <= row["step_change"] <= row["step_change_high"] < 0  # a clear gain
        assert row["throughput_change"] == pytest.approx(1 / ratio - 1)  # the same samples per step
        assert row["throughput_change_low"] <= row["throughput_change"] <= row["throughput_change_high"]
    assert table.loc["+compile", "changes"] == "compile: off -> blocks"
    first = np.mean(pooled_steady(by_label(train_records, "baseline")))
    last = np.mean(pooled_steady(by_label(train_records, "+selective")))
    assert table.loc["+selective", "speedup"] == pytest.approx(first / last)


def test_waterfall_marks_missing_and_failed_labels(train):
    table = waterfall(train, ["baseline", "nope", "+compile"]).set_index("label")
    assert table.loc["nope", "status"] == "missing"
    assert not math.isnan(table.loc["+compile", "step_change"])  # compared with baseline, the last ok


def test_a_change_between_points_of_two_runs_says_so_and_one_run_says_nothing(train_records):
    moved = [{**r, "run_id": "later-run"} if r["label"] == "+compile" else r for r in train_records]
    table = waterfall(point_summary(records_to_frame(moved)).query("suite == 'fixture-train'"), BREAKDOWN)
    notes = table.set_index("label")["notes"]
    assert "measured in run later-run, its base in run" in notes["+compile"]
    assert "measured in run" not in notes["baseline"]
    one_run = waterfall(point_summary(records_to_frame(train_records)).query("suite == 'fixture-train'"), BREAKDOWN)
    assert not one_run["notes"].str.contains("measured in run").any()


def test_a_change_between_workloads_names_the_workload_not_the_knobs_one_of_them_lacks():
    harness = pd.Series({"workload": "wallx", "precision": "bf16_mixed", "mbs": 16, "build": math.nan})
    script = pd.Series({"workload": "command", "precision": None, "mbs": 16, "build": "plain"})
    assert knob_changes(harness, script, ["precision", "mbs", "build"]) == "workload: wallx -> command"
    assert knob_changes(harness, {**script, "mbs": 8}, ["precision", "mbs", "build"]) == \
        "workload: wallx -> command, mbs: 16 -> 8"
    assert knob_changes(harness, {**harness, "mbs": 8}, ["precision", "mbs"]) == "mbs: 16 -> 8"


def test_points_of_one_label_are_told_apart_by_their_knobs_where_those_suffice(train_records):
    """A point measured again under a newer suite (a knob added, a command's argv longer) keeps its
    label: the two rows are named by the knob that tells them apart, not by the whole argv too."""
    first = next(r for r in train_records if r["label"] == "baseline")
    params = {**first.get("params", {}), "argv": ["python", "train.py"]}
    older = {**first, "params": params, "point_id": "older", "run_id": "r-old"}
    newer = {**first, "params": {**params, "argv": ["python", "train.py", "--flash"]}, "point_id": "newer",
             "run_id": "r-new", "knobs": {**first["knobs"], "attention": "flash"}}
    names = point_summary(records_to_frame([older, newer]))["name"].tolist()
    assert sorted(names) == ["baseline (attention=flash)", "baseline (attention=sdpa)"]
    same_knobs = {**newer, "knobs": first["knobs"]}  # the argv alone tells them apart
    names = point_summary(records_to_frame([older, same_knobs]))["name"].tolist()
    assert all("argv=" in name for name in names) and len(set(names)) == 2


def test_leave_one_out_finds_labelled_and_one_knob_points(train_records, train):
    table = leave_one_out(train, "+selective", "mbs").set_index("without")
    assert set(table.index) == {"attention", "cuda_graph", "recompute=selective"}
    assert table.loc["recompute=selective", "point"] == "+cuda_graph"
    best = np.mean(pooled_steady(by_label(train_records, "+selective")))
    slower = np.mean(pooled_steady(by_label(train_records, "best-attention")))
    assert table.loc["attention", "step_change"] == pytest.approx(slower / best - 1)
    assert (table["step_change_low"] > 0).all()  # every optimisation was paying off


# --- steady state --------------------------------------------------------------------------------
@pytest.mark.parametrize("series, expected", [
    ([1.0] * 12, 0),
    ([50.0, 3.0, 1.2] + [1.0] * 10, 3),
    ([50.0, 1.0, 1.0, 1.0, 1.0, 3.0, 1.0, 1.0, 1.0, 1.0, 1.0], 1),  # a later hiccup is not warm-up
    ([5.0, 1.0], 0),  # too short to tell
    (list(np.linspace(2.0, 1.0, 8)) + [1.0] * 8, 7),
])
def test_detect_warmup(series, expected):
    assert detect_warmup(series) == expected


def test_amortisation():
    assert amortisation_steps(45.0, 1.4, 1.65) == pytest.approx((45.0 - 1.65) / 0.25)
    assert amortisation_steps(45.0, 1.7, 1.65) == math.inf
    assert amortisation_steps(1.5, 1.4, 1.65) == 0.0


def test_amortisation_table_pairs_compiled_points_with_their_eager_twin(train):
    table = amortisation_table(train).set_index("point")
    assert dict(table["eager_point"]) == {"+compile": "+attention", "+cuda_graph": "+attention"}
    row = train.set_index("name").loc["+cuda_graph"]
    eager = train.set_index("name").loc["+attention"]
    assert table.loc["+cuda_graph", "break_even_steps"] == pytest.approx(
        (row["first_step_s"] - eager["step_time_s"]) / (eager["step_time_s"] - row["step_time_s"]))


# --- batch search --------------------------------------------------------------------------------
@pytest.mark.parametrize("lo, hi", [(1, 256), (1, 200), (1, 16), (2, 64), (4, 4)])
def test_largest_feasible_finds_every_boundary_within_the_budget(lo, hi):
    budget = math.ceil(math.log2(hi / lo)) + 2
    for boundary in [None, *range(lo, hi + 1)]:
        found, probed = largest_feasible(lambda v: boundary is not None and v <= boundary, lo, hi)
        assert found == boundary
        assert len(probed) <= budget and len(set(probed)) == len(probed)
        assert all(lo <= v <= hi for v in probed)


def test_largest_feasible_doubles_first_when_the_budget_allows():
    found, probed = largest_feasible(lambda v: v <= 26, 1, 256, max_probes=16)
    assert found == 26 and probed[:6] == [1, 2, 4, 8, 16, 32]
    assert largest_feasible(lambda v: False, 1, 256) == (None, [1])
    assert largest_feasible(lambda v: True, 1, 256)[0] == 256
    # a range too narrow for the default budget still gets the fewest probes that can work
    assert len(largest_feasible(lambda v: v <= 17, 16, 32)[1]) <= math.ceil(math.log2(32 - 16 + 2))
    with pytest.raises(ValueError):
        largest_feasible(lambda v: True, 8, 4)


def test_criteria_over_records(train_records):
    ok = Record.from_json([r for r in train_records if r["status"] == "ok" and r["knobs"]["mbs"] == 13][0])
    oom = Record.from_json([r for r in train_records if r["status"] == "oom"][0])
    assert feasible(ok) and not feasible(oom)  # 135.5 of 139.8 GiB reserved
    assert feasible(ok, headroom_gib=2.0) and not feasible(ok, headroom_gib=8.0)
    assert feasible(ok, zero_retries=True)
    assert not feasible(dataclasses.replace(ok, metrics={**ok.metrics, "alloc_retries": 3}), zero_retries=True)
    assert not feasible(oom, headroom_gib=2.0)


# --- the report ----------------------------------------------------------------------------------
def test_report_files_and_tables(report_dir, train_records):
    md = (report_dir / "report.md").read_text()
    html = (report_dir / "report.html").read_text()
    pngs = sorted(report_dir.glob("*.png"))
    kinds = {p.name.split("-", 2)[-1] for p in pngs}
    assert {"batch_scaling.png", "step_times.png", "waterfall.png", "losses.png", "phases.png",
            "decode_latency.png", "cpu_util.png"} <= kinds
    for png in pngs:
        assert f"]({png.name})" in md
        assert base64.b64encode(png.read_bytes()).decode() in html
    assert html.count("data:image/png;base64,") == len(pngs)
    for status in ("OOM", "CRASH", "SKIPPED", "TIMEOUT"):
        assert f"**{status}**" in md
    assert 'class="status-oom"' in html and 'class="status-crash"' in html
    baseline = by_label(train_records, "baseline")
    assert f"{np.median(pooled_steady(baseline)):.4g}" in md
    for heading in ("Sweep", "Batch size", "Optimisation breakdown", "Leave one out", "Compile and capture",
                    "Loss curves", "Decoders", "Profiles", "aten::mm"):
        assert heading in md
    assert "| backend=torchcodec, mode=best | cpu | 21 | 25 |" in md  # per-view latency in ms


def test_plots_are_valid_non_blank_pngs(report_dir):
    for png in report_dir.glob("*.png"):
        with Image.open(png) as image:
            assert image.format == "PNG" and image.width >= 300 and image.height >= 200
            pixels = np.asarray(image.convert("RGB"), dtype=float)
        assert pixels.std() > 10  # not a blank canvas
        assert (pixels.reshape(-1, 3) < 200).any(axis=1).mean() > 0.01  # something drawn


def test_plots_return_none_without_data(tmp_path, train):
    failed = train[train["status"] != "ok"]
    assert plots.batch_scaling(failed, tmp_path / "a.png") is None
    assert plots.step_time_distributions(failed, tmp_path / "b.png") is None
    assert plots.decoder_latency(failed, tmp_path / "c.png") is None
    assert plots.loss_curves([], tmp_path / "d.png", rtol=0.02, atol=0.0) is None
    assert not list(tmp_path.iterdir())


def test_report_of_failures_only_and_without_suite_meta(train_records, tmp_path):
    failed = [r for r in train_records if r["status"] != "ok"]
    html = build_report(records_to_frame(failed), tmp_path / "failed")
    assert html.exists() and not list((tmp_path / "failed").glob("*.png"))
    assert "**CRASH**" in (tmp_path / "failed" / "report.md").read_text()
    build_report(records_to_frame(train_records), tmp_path / "undeclared")  # no suite: no order to draw
    assert "Optimisation breakdown" not in (tmp_path / "undeclared" / "report.md").read_text()


def test_report_of_an_interrupted_run_says_it_is_unfinished(train_records, tmp_path):
    from benchbay import store

    run = tmp_path / "results" / "fixture-train" / "20260101-000000-abcd"
    run.mkdir(parents=True)
    for r in train_records[:3]:
        store.append_record(run, Record.from_json(r))
    store.write_manifest(run, {"suite": "fixture-train", "state": "interrupted"})
    df = store.load_runs([run])
    assert set(df["run_state"]) == {"interrupted"}
    build_report(df, tmp_path / "report")
    assert "Unfinished: fixture-train" in (tmp_path / "report" / "report.md").read_text()
    store.write_manifest(run, {"suite": "fixture-train", "state": "complete"})
    build_report(store.load_runs([run]), tmp_path / "report")
    assert "Unfinished" not in (tmp_path / "report" / "report.md").read_text()
    # resumed on another card of the same machine key: the run names both cards
    for repeat, card in enumerate(["card-a", "card-b"]):
        store.append_record(run, Record.from_json(dict(train_records[3], repeat=repeat,
                                                       env={**train_records[3]["env"], "gpu_uuid_hash": card})))
    build_report(store.load_runs([run]), tmp_path / "report")
    assert "| card-a, card-b |" in (tmp_path / "report" / "report.md").read_text()


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
def test_every_plot_loads_in_a_headless_browser(report_dir, tmp_path):
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000", "--dump-dom",
               (report_dir / "report.html").as_uri()]
    dom = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True).stdout
    body = re.search(r"<body[^>]*>", dom).group(0)
    images = int(re.search(r'data-images="(\d+)"', body).group(1))
    loaded = int(re.search(r'data-loaded="(\d+)"', body).group(1))
    assert images == len(list(report_dir.glob("*.png"))) > 0
    assert loaded == images


def test_report_has_a_scaling_section_when_a_configuration_ran_at_several_world_sizes(tmp_path, train_records):
    import copy

    one = [r for r in train_records if r["status"] == "ok"][:1]
    two = copy.deepcopy(one)
    for r in two:
        r["world_size"], r["run_id"] = 2, "run-2gpu"
        r["metrics"]["samples_per_s"] = 1.8 * one[0]["metrics"]["samples_per_s"]
    build_report(records_to_frame(one + two), tmp_path)
    text = (tmp_path / "report.md").read_text()
    assert "### Scaling" in text and (tmp_path / "scaling-scaling.png").exists()
    # 1.8x on 2 GPUs: 90% efficiency; the step is the mean step (1.802 s), samples/s/GPU 1 sample over it
    assert "| 2 | 1 | 1 | 0.9991 | 0.5551 | 1.802 | 1.80x | 2 | 0.9 |" in text


# --- noise and machine health ----------------------------------------------------------------------
# the quickstart on a shared 2-core machine: 5 steps a point, CVs of 0.4-0.7, medians 5x apart
NOISY_EAGER, NOISY_RECOMPUTE = [5.8, 1.0, 9.5, 0.9, 6.5], [1.1, 0.5, 4.2, 6.0, 0.4]
QUIET_EAGER, QUIET_RECOMPUTE = [1.0, 1.01, 0.99, 1.0, 1.02], [0.5, 0.505, 0.495, 0.5, 0.51]
TAB_GREEN = (44, 160, 44)


def cpu_point(label: str, recompute: str, series: list[float], health: dict | None = None, repeat: int = 0) -> dict:
    from tests.fixtures.make_records import ENV_CPU, record

    steps = np.asarray(series)
    median = float(np.median(steps))
    metrics = {"step_time_s": median, "step_time_cv": float(steps.std() / steps.mean()), "warmup_steps": 0,
               "measured_steps": steps.size, "samples_per_step": 2, "samples_per_s": 2 / median,
               "samples_per_s_per_gpu": 2 / median, "peak_host_rss_gib": 1.5}
    out = record("quick", "tiny", {}, {"mbs": 2, "recompute": recompute}, repeat, "ok", ENV_CPU, label=label,
                 metrics=metrics, series={"step_times_s": series, "losses": []})
    return {**out, "device": "cpu", "health": health or {}}


def green_pixels(png: Path) -> int:
    with Image.open(png) as image:
        pixels = np.asarray(image.convert("RGB"), dtype=int)
    return int((np.abs(pixels - TAB_GREEN).max(axis=2) < 12).sum())


def processes(label: str, recompute: str, medians: list[float]) -> list[dict]:
    """A point run in one process per median (its repeats), each process's steps steady around it:
    the noise between processes is what a verdict on the point weighs."""
    return [cpu_point(label, recompute, [m * x for x in QUIET_EAGER], repeat=i) for i, m in enumerate(medians)]


def test_a_noisy_effect_is_not_significant_and_never_drawn_as_a_gain(tmp_path):
    # 2.5x faster on average, but the processes of each point spread over 10x: no verdict can stand
    noisy = point_summary(records_to_frame([*processes("eager", "off", [5.8, 1.0, 9.5]),
                                            *processes("+recompute", "full", [1.1, 0.5, 6.0])]))
    table = waterfall(noisy, ["eager", "+recompute"])
    row = table.set_index("label").loc["+recompute"]
    assert row["speedup"] > 1.5 and row["verdict"] == "not significant"
    assert row["throughput_change_low"] < 0 < row["throughput_change_high"]
    assert row["speedup_low"] < 1 < row["speedup_high"]
    assert all("noisy: CV" in notes for notes in table["notes"])
    assert green_pixels(plots.waterfall(table, tmp_path / "noisy.png", per="device")) == 0

    quiet = point_summary(records_to_frame([*processes("eager", "off", [1.0, 1.01, 0.99]),
                                            *processes("+recompute", "full", [0.5, 0.505, 0.495])]))
    table = waterfall(quiet, ["eager", "+recompute"])
    assert list(table["verdict"].fillna("")) == ["", "faster"] and list(table["notes"]) == ["", ""]
    assert green_pixels(plots.waterfall(table, tmp_path / "quiet.png", per="device")) > 100


def test_report_on_cpu_says_per_device_and_notes_a_machine_that_was_not_quiet(tmp_path):
    busy = {"warnings": ["busy CPU: other processes used 0.95 of 2 CPUs"],
            "machine_warnings": ["CPU frequency governor powersave, not performance: clocks follow the load"]}
    records = [cpu_point("eager", "off", NOISY_EAGER, busy), cpu_point("+recompute", "full", NOISY_RECOMPUTE)]
    meta = SuiteMeta(name="quick", breakdown=["eager", "+recompute"])
    build_report(records_to_frame(records), tmp_path, suite_meta=meta)
    md = (tmp_path / "report.md").read_text()
    assert "samples/s/device" in md and "samples/s/GPU" not in md and "host RSS (GiB)" in md
    assert "Machine: CPU frequency governor powersave" in md and "not quiet during 1 of 2 records" in md
    eager = next(line for line in md.splitlines() if line.startswith("| eager | ok |"))
    assert "noisy: CV" in eager and "busy CPU: other processes used 0.95 of 2 CPUs" in eager
    assert "not significant" in md


def test_cpu_plot_needs_a_course_over_time(tmp_path, summary):
    first = summary.assign(cpu_util=summary["cpu_util"].map(lambda v: v[:1] if isinstance(v, list) else v))
    assert plots.cpu_utilisation(first, tmp_path / "cpu.png") is None  # one sample per point draws no line
    assert plots.cpu_utilisation(summary, tmp_path / "cpu.png") is not None


def test_a_decoding_library_keeps_its_colour_in_every_figure():
    one = plots.backend_colors(["pyav", "torchcodec"])
    other = plots.backend_colors(["decord", "pyav", "torchcodec", "torchcodec (cuda)", "newlib"])
    assert one["pyav"] == other["pyav"] and one["torchcodec"] == other["torchcodec"]
    assert len(set(other.values())) == len(other)  # variants and unknown libraries get colours of their own


def test_a_suites_report_keeps_the_machine_of_its_newest_run_and_names_the_runs_left_out(tmp_path, train_records):
    laptop = [{**r, "run_id": "20261101-000000-cpu0", "env": {**r["env"], "machine_key": "laptop-2-cores"}}
              for r in train_records]
    build_report(records_to_frame(train_records + laptop), tmp_path, suite_meta=SUITE_META)
    md = (tmp_path / "report.md").read_text()
    assert "20261129-161500-rain" in md and "left out, from other machines: 20261101-000000-cpu0 (laptop-2-cores)" in md
    sweep = next(t for t in md.split("### ")[1:] if t.startswith("Sweep"))
    baseline = next(line for line in sweep.splitlines() if line.startswith("| baseline |"))
    assert baseline.split("|")[3].strip() == "3"  # its 3 repeats, none pooled from the laptop


def test_a_breakdown_names_its_missing_labels_and_a_loss_table_says_why_step_0_differs(tmp_path, train_records):
    def shifted(r: dict) -> dict:  # +attention measured in another run, from another first loss
        if r["label"] != "+attention":
            return r
        return {**r, "run_id": "20261130-000000-next", "series": {**r["series"], "losses": [
            loss + 1.0 for loss in r["series"]["losses"]]}}

    meta = dataclasses.replace(SUITE_META, breakdown=[*BREAKDOWN, "+never_run"],
                               equivalent=[["baseline", "+attention"]])
    build_report(records_to_frame([shifted(r) for r in train_records]), tmp_path, suite_meta=meta)
    md = (tmp_path / "report.md").read_text()
    assert "missing: no record of +never_run in the runs reported" in md
    assert ("+attention differ from baseline at step 0, the loss before any update: they did not start from the same "
            "weights and batch (runs 20261130-000000-next against 20261129-161500-rain") in md


def test_the_sweep_table_follows_the_suites_order(train_records, tmp_path):
    ours = [r["label"] for r in train_records if r["suite"] == "fixture-train" and r["label"]]
    labels = list(dict.fromkeys(ours))[::-1]
    meta = SuiteMeta.from_raw({"name": "fixture-train", "sweep": {"points": [{"label": x} for x in labels]}})
    build_report(records_to_frame(train_records), tmp_path, suite_meta=meta)
    text = (tmp_path / "report.md").read_text()
    sweep = text[text.index("### Sweep"):]
    rows = [line.split("|")[1].strip() for line in sweep.split("\n\n", 3)[1].splitlines()[2:]]
    assert [row for row in rows if row in labels] == labels
    # a stored suite's points are unchecked: what is not a labelled point is passed over
    assert SuiteMeta.from_raw({"sweep": {"points": [1, {"label": 2}, {"label": "a"}]}}).point_labels == ["a"]
    assert SuiteMeta.from_raw({"sweep": {"points": "x"}}).point_labels == []


def test_a_cuda_decode_that_fell_back_to_the_cpu_reads_as_the_cpu():
    from benchbay.report import decoded_on

    fell_back = {"cam": "[CUDA] Fallback status: Falling back due to: Video not supported"}
    assert decoded_on("cuda", fell_back) == "cpu (cuda fell back: Video not supported)"
    assert decoded_on("cuda", {"cam": "[CUDA] Fallback status: No fallback required"}) == "cuda (NVDEC)"
    assert decoded_on("cuda", None) == "cuda (NVDEC)"  # backends without a CPU fallback (PyNvVideoCodec, DALI)
    assert decoded_on("cpu", None) == "cpu"


def test_a_compiled_point_whose_regions_broke_says_so_in_its_notes():
    broke = cpu_point("+compile", "off", QUIET_EAGER)
    broke["extra"] = {"graph_breaks": 6, "graph_break_reasons": ["Failed to trace builtin operator (x3)"]}
    whole = cpu_point("+compile whole", "full", QUIET_EAGER)  # another point: recompute differs
    whole["extra"] = {"graph_breaks": 0}
    notes = point_summary(records_to_frame([broke, whole])).set_index("label")["notes"]
    assert notes["+compile"] == "compiled in part: 6 graph breaks (Failed to trace builtin operator (x3))"
    assert notes["+compile whole"] == ""


def test_a_point_whose_repeats_ran_on_two_cards_says_so():
    # a run resumed on another host keeps its machine key: its repeats pool two cards' speeds
    here = cpu_point("eager", "off", QUIET_EAGER)
    elsewhere = {**here, "repeat": 1, "env": {**here["env"], "gpu_uuid_hash": "b" * 10}}
    here = {**here, "env": {**here["env"], "gpu_uuid_hash": "a" * 10}}
    assert point_summary(records_to_frame([here, elsewhere]))["notes"].tolist() == ["repeats on 2 cards"]
    assert point_summary(records_to_frame([here, {**elsewhere, "env": here["env"]}]))["notes"].tolist() == [""]
