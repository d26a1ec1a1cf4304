"""The results documents' figures (docs/h200-results.md, moved there from the README; docs/fp8.md) are
the store's: each table row's step, samples/s/GPU, MFU and fidelity are what ``benchbay show`` derives
from the committed records it names, and each sentence checked here quotes its records or report."""

import re
from pathlib import Path

import pandas as pd
import pytest

from benchbay.analysis.tables import point_summary
from benchbay.store import load_runs

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DOC = ROOT / "docs/h200-results.md"  # the H200 figures, linked from the README


def marked(marker: str, doc: Path = RESULTS_DOC) -> str:
    """What a document holds between ``<!-- marker -->`` and ``<!-- /marker -->``."""
    return re.search(rf"<!-- {marker} -->(.*?)<!-- /{marker} -->", doc.read_text(), re.S).group(1)


def marked_lines(marker: str, doc: Path = RESULTS_DOC) -> list[str]:
    """The lines of a marked block, which begins on the line after its marker."""
    block = marked(marker, doc)
    assert block.startswith("\n"), f"{doc}: <!-- {marker} --> is not a block of lines"
    return block.splitlines()[1:]


def table_rows() -> list[list[str]]:
    """The rows of the results document's tables of tuned points at update fidelity (5B and Wall-X; 14B)."""
    rows = []
    for marker in ("fidelity-table", "fidelity-14b-table"):
        lines = [line for line in marked_lines(marker) if line.startswith("| ") and not line.startswith("| point")]
        rows += [[cell.strip().strip("*`") for cell in line.strip("|").split("|")] for line in lines]
    return rows


@pytest.mark.parametrize("row", table_rows(), ids=lambda r: f"{r[0]}-{r[-1]}")
def test_readme_row_matches_its_record(row):
    label, numerics, mbs, step, rate, mfu, fidelity, run = row
    run_dir = next((ROOT / "results").glob(f"*/{run}"))
    summary = point_summary(load_runs([run_dir]))
    point = summary[summary["label"] == label].iloc[0]
    recipe = point.get("float8")
    fp8 = "" if pd.isna(recipe) or recipe == "off" else f" + fp8 {recipe}"  # FP8 GEMMs, where the point has them
    assert numerics == f"{point['precision']}{fp8} / {point['optimizer']}"
    assert int(mbs) == point["mbs"]
    assert_figures(point, label, step, rate, mfu, fidelity)


def assert_figures(point: pd.Series, label: str, step: str, rate: str, mfu: str, fidelity: str) -> None:
    """A results-document row's step, samples/s/GPU (bold or not), MFU on both peaks and fidelity are its point's."""
    assert step == f"{point['step_time_s']:.3f}", label
    assert rate.strip("*") == f"{point['samples_per_s_per_gpu']:.2f}", label
    assert mfu == f"{point['mfu']:.1%} / {point['mfu_datasheet']:.1%}", label
    assert fidelity == point["fidelity"], label


def marked_rows(marker: str, doc: Path = RESULTS_DOC) -> list[list[str]]:
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in marked_lines(marker, doc)[2:]]


def report_points(*suites: str) -> pd.DataFrame:
    """The point summary of the suites' report: their runs on the machine of the newest run."""
    from benchbay.report import one_machine_per_suite
    from benchbay.store import find_runs

    df, _ = one_machine_per_suite(load_runs(find_runs(list(suites), ROOT / "results")))
    return point_summary(df)


def run_points(*runs: str) -> pd.DataFrame:
    """The point summary of these runs (their folders, from the repository's root)."""
    return point_summary(load_runs([ROOT / run for run in runs]))


def check_row(point: pd.Series, mbs: str, step: str, rate: str, alloc: str, mfu: str) -> None:
    assert int(mbs) == point["mbs"]
    assert step == f"{point['step_time_s']:.3f}"
    assert rate.strip("*") == f"{point['samples_per_s_per_gpu']:.2f}"
    assert alloc == f"{point['peak_mem_allocated_gib']:.1f}"
    assert mfu == f"{point['mfu']:.1%}"


def row_label(row: list[str]) -> str:
    return re.match(r"`([^`]+)`", row[0]).group(1)


def test_readme_dreamzero_5b_table_is_its_reports():
    from benchbay.analysis.breakdown import waterfall

    summary = report_points("dreamzero-5b")
    walk = ["official", "+cuda_graph", "+batched_encoders", "+no_host_syncs", "+fused_kernels", "+flex",
            "+no_recompute", "+compile"]  # the suite's breakdown, as far as this host measured it
    verdicts = waterfall(summary, walk).set_index("label")["verdict"].to_dict()
    official = summary[summary["label"] == "official"].iloc[0]["samples_per_s_per_gpu"]
    for row in marked_rows("dreamzero-5b-table"):
        label = row_label(row)
        point = summary[summary["label"] == label].iloc[0]
        check_row(point, *row[1:6])
        assert row[6].split()[0] == f"{point['samples_per_s_per_gpu'] / official:.2f}x"
        assert ("(n.s.)" in row[6]) == (verdicts.get(label) == "not significant"), label
        assert ("two runs pooled" in row[0]) == (point["repeats"] == 2), label


def test_readme_wallx_table_is_its_reports():
    summary = report_points("wallx")
    for row in marked_rows("wallx-table"):
        check_row(summary[summary["label"] == row_label(row)].iloc[0], *row[1:6])


def test_readme_wallx_profile_sentence_is_its_records_top_ops():
    import json

    record = json.loads((ROOT / "results/wallx-frontier-profile/20261201-200632-e177/records.jsonl").read_text()
                        .splitlines()[0])
    ops = record["extra"]["profile_top_ops"][:10]
    gemms = [op for op in ops if "gemm" in op["name"] or "nvjet" in op["name"]]  # cutlass and cuBLAS's nvjet
    text = " ".join(RESULTS_DOC.read_text().split())
    assert "multi_tensor_apply_kernel" in ops[0]["name"] and gemms[0] is ops[1]
    assert (f"(`multi_tensor_apply_kernel`, {ops[0]['time_s'] * 1e3:.2f} ms a step, {ops[0]['share']:.1%} of device "
            f"time), just above the top GEMM ({gemms[0]['time_s'] * 1e3:.2f} ms); GEMMs are {len(gemms)} of the 10 top "
            f"ops, {sum(op['share'] for op in gemms):.1%} of device time between them") in text


def test_readme_rlinf_claim_names_the_reports_figure():
    report = (ROOT / "reports/dreamzero-5b-video/report.md").read_text().split("(RLinf's claim)")[1]
    row = next(line for line in report.splitlines() if line.startswith("| dreamzero | 1 | pyav | cpu |"))
    figure = [cell.strip() for cell in row.strip("|").split("|")][-2]
    assert f"the report's {figure} is the later run's" in " ".join(RESULTS_DOC.read_text().split())


def test_readme_dreamzero_5b_frontier_table_is_its_report():
    from benchbay.analysis.breakdown import waterfall
    from benchbay.suite import load

    summary = report_points("dreamzero-5b-frontier")
    suite = load(ROOT / "suites/dreamzero-5b-frontier.yaml")
    # the report's breakdown: the suite's walk, each lever against the ok point before it
    changes = waterfall(summary, suite.breakdown).set_index("label")
    # a label measured under an older version of the suite is another point: the row is the suite's own
    ids = {p.label: p.point_id for p in suite.expand("cuda")}
    for row in marked_rows("dreamzero-5b-frontier-table"):
        label, (mbs, step, rate, change, mfu, fidelity) = row_label(row), row[1:7]
        point = summary[summary["point_id"] == ids[label]].iloc[0]
        assert int(mbs) == point["mbs"], label
        if point["status"] != "ok":
            assert rate == point["status"].upper(), label
            continue
        assert_figures(point, label, step, rate, mfu, fidelity)
        if change.startswith(("+", "-")):  # a lever's change against the point above it, as the report's breakdown
            c = changes.loc[label]
            interval = "" if c["verdict"] == "no interval" else \
                f" [{c['step_change_low'] * 100:+.1f}, {c['step_change_high'] * 100:+.1f}]"
            assert change.split(" (")[0] == f"{c['step_change']:+.1%}{interval}", label
            assert ("no interval" in change) == (c["verdict"] == "no interval"), label


def test_readme_is_one_screenful_with_cis_test_command():
    """The README is one screenful for a newcomer (the reference lives in docs/guide.md, the lab
    notebook in docs/) and shows the test command .ci/run runs first (then the slow tests)."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 64
    ci = next(line for line in (ROOT / ".ci/run").read_text().splitlines() if "-m pytest" in line)
    assert ci.strip() in readme


DOCS = ["README.md", *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("doc", DOCS)
def test_relative_links_resolve(doc):
    """Every relative link of the README and docs/ names a file that exists (after the move to docs/)."""
    path = ROOT / doc
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text()):
        if "://" not in target:
            assert (path.parent / target).exists(), f"{doc}: {target}"


FP8_DOCS = ROOT / "docs/fp8.md"
DREAMZERO_FP8_RUNS = ("results/dreamzero-5b-fp8/20261206-183244-c773", "results/dreamzero-5b-fp8/20261206-184047-536a")
DREAMZERO_FP8_IN_STEP_RUN = "results/dreamzero-5b-fp8/20261206-203934-e3d9"
DREAMZERO_FRONTIER_FP8_RUN = "results/dreamzero-5b-frontier/20261206-223108-9f2a"
DREAMZERO_14B_BLOCKS_RUNS = ("results/dreamzero-14b-fp8-blocks/20261207-143739-ec0e",
                             "results/dreamzero-14b-fp8-blocks/20261207-144631-f030")
#: dreamzero-5b-fp8's points run again with the flattened AdamW stepping its weights in place
OPTIMIZER_IN_PLACE_RUNS = ("results/dreamzero-5b-fp8/20261207-143456-4937",
                           "results/dreamzero-5b-fp8/20261207-144334-c9f1")


@pytest.mark.parametrize("table, runs", [("wallx-fp8", ("results/wallx-fp8/20261206-161749-7da1",)),
                                         ("dreamzero-5b-fp8", DREAMZERO_FP8_RUNS[:1]),
                                         ("dreamzero-5b-fp8-in-step", (DREAMZERO_FP8_IN_STEP_RUN,)),
                                         ("dreamzero-5b-frontier-fp8", (DREAMZERO_FRONTIER_FP8_RUN,)),
                                         ("wallx-frontier-fp8", ("results/wallx-frontier/20261207-043252-c18c",)),
                                         ("dreamzero-14b-fp8-blocks", DREAMZERO_14B_BLOCKS_RUNS)])
def test_the_fp8_docs_tables_are_their_records(table, runs):
    """docs/fp8.md's table of each FP8 run (or runs): each row's converted linears, rate, step, MFU on
    both peaks and both fidelities, with the compute fidelity's worst group, are its record's."""
    rows = marked_rows(f"{table}-table", FP8_DOCS)
    summary = run_points(*runs)
    assert len(rows) == len(summary)
    for label, converted, rate, step, mfu, update, compute in rows:
        point = summary[summary["label"] == row_label([label])].iloc[0]
        assert int(converted) == (0 if pd.isna(point["extra.float8_converted"]) else point["extra.float8_converted"])
        assert rate == f"{point['samples_per_s_per_gpu']:.2f}" and step == f"{1000 * point['step_time_s']:.1f}"
        assert mfu == f"{point['mfu']:.1%} / " + ("-" if pd.isna(point["mfu_fp8"]) else f"{point['mfu_fp8']:.1%}")
        assert point["fidelity"].startswith(f"{update} (")
        if compute == "not measured":  # the record says why (a reference that did not fit)
            assert isinstance(point["extra.compute_fidelity_skipped"], str)
            assert point["fidelity"].endswith("; compute not measured")
            continue
        verdict, figures = compute.replace("*", "").split(" ", 1)
        assert verdict == point["extra.compute_fidelity"]
        cosine, *worst = figures.strip("()").split("; ")
        assert cosine == f"{point['compute_gradient_cosine']:.4f}"
        if worst:  # the group of the lowest cosine, as "backbone weights 0.9888[, error 0.149]"
            name, figure = min(point["extra.compute_fidelity_groups"].items(), key=lambda g: g[1]["cosine"])
            said = f"{name.replace('.', ' ')} {figure['cosine']:.4f}"
            assert worst[0].split(",")[0] == said


def test_the_fp8_docs_14b_blocks_savings_are_the_records():
    """The step time each recipe saves over 8 of the 14B's blocks, and their ratio."""
    step = run_points(*DREAMZERO_14B_BLOCKS_RUNS).set_index("label")["step_time_s"]
    padded, gw_hp = (1000 * (step["bf16"] - step[label]) for label in ("tensorwise_padded", "rowwise_with_gw_hp"))
    assert " ".join(marked("dreamzero-14b-fp8-blocks-saving", FP8_DOCS).split()) == \
        f"{padded:.1f} ms a step against rowwise_with_gw_hp's {gw_hp:.1f} ms, {padded / gw_hp:.2f} times as much"


def test_the_optimizer_in_place_table_is_the_records():
    """Each point's rate in the two processes that copied the weights and in the one that steps them in
    place, and the step time saved against the copies' mean."""
    copied = [run_points(run).set_index("label") for run in DREAMZERO_FP8_RUNS]
    in_place = run_points(*OPTIMIZER_IN_PLACE_RUNS).set_index("label")
    rows = marked_rows("optimizer-in-place-table", FP8_DOCS)
    assert [row[0] for row in rows] == ["`bf16@16`", "`tensorwise@16`", "`gw_hp@16`"]
    for label, before, after, saved in rows:
        label = label.strip("`")
        assert before == ", ".join(f"{c.loc[label, 'samples_per_s_per_gpu']:.2f}" for c in copied)
        assert after == f"{in_place.loc[label, 'samples_per_s_per_gpu']:.2f}"
        mean_step = sum(c.loc[label, "step_time_s"] for c in copied) / len(copied)
        assert saved == f"{1000 * (mean_step - in_place.loc[label, 'step_time_s']):.1f}"


def test_the_fp8_docs_dreamzero_gains_and_second_process_are_the_records():
    """The gains over bf16@16 the text gives, and the second process's rates of three points."""
    first, second = (run_points(run).set_index("label")["samples_per_s_per_gpu"] for run in DREAMZERO_FP8_RUNS)
    text = " ".join(FP8_DOCS.read_text().split())
    gains = {label: f"{first[label] / first['bf16@16'] - 1:.1%}"
             for label in ("tensorwise@16", "gw_hp@16", "rowwise@16")}
    assert (f"tensorwise runs {gains['tensorwise@16']} more samples a second than bf16, rowwise_with_gw_hp "
            f"{gains['gw_hp@16']}, rowwise {gains['rowwise@16']}.") in text
    selective, best = first["selective-tensorwise@8"], first["tensorwise@16"]
    assert (f"Selective recompute at mbs 8 gains {selective / first['selective-bf16@8'] - 1:.1%} with tensorwise"
            in text)
    assert f"Its best, {selective:.2f}, is {1 - selective / best:.1%} under tensorwise@16's {best:.2f}." in text
    repeat = " ".join(marked("dreamzero-5b-fp8-repeat", FP8_DOCS).split())
    labels = ["bf16@16", "tensorwise@16", "gw_hp@16"]
    assert repeat == ", ".join(f"{second[label]:.2f}" for label in labels[:2]) + f" and {second[labels[2]]:.2f}"
    assert max(abs(second[label] / first[label] - 1) for label in labels) < 0.0015  # "within 0.15%"


def test_the_fp8_docs_in_step_gain_and_saving_are_the_records():
    """With the encoders in the step: the gain the text gives, and the step time FP8 saves there and
    on the transformer alone (the encoders' time, which float8 leaves alone, is the rest)."""
    alone = run_points(DREAMZERO_FP8_RUNS[0]).set_index("label")
    in_step = run_points(DREAMZERO_FP8_IN_STEP_RUN).set_index("label")
    rate = in_step["samples_per_s_per_gpu"]
    text = " ".join(FP8_DOCS.read_text().split())
    gain = rate["in-step-tensorwise@16"] / rate["in-step-bf16@16"] - 1
    assert f"FP8 GEMMs still gain {gain:.1%} with the encoders in the step." in text
    saved = [1000 * (t.loc[bf16, "step_time_s"] - t.loc[fp8, "step_time_s"]) for t, bf16, fp8 in
             ((in_step, "in-step-bf16@16", "in-step-tensorwise@16"), (alone, "bf16@16", "tensorwise@16"))]
    assert " ".join(marked("dreamzero-5b-fp8-saving", FP8_DOCS).split()) == \
        f"{saved[0]:.1f} ms a step here and {saved[1]:.1f} ms"


def test_the_fp8_docs_frontier_gain_is_the_records():
    """The H200 frontier's FP8 gain: +fp8@20 against +sr@20 (the same point in bf16), as the report has them."""
    rate = report_points("dreamzero-5b-frontier").set_index("label")["samples_per_s_per_gpu"]
    bf16, fp8 = rate["+sr@20"], rate["+fp8@20"]
    assert " ".join(marked("dreamzero-5b-frontier-fp8-gain", FP8_DOCS).split()) == \
        f"{bf16:.2f} to {fp8:.2f} samples/s/GPU, {fp8 / bf16 - 1:.1%} more"


def test_the_14b_fp8_sentence_is_the_records():
    """docs/h200-results.md's 14B FP8 sentence: +keep_attention against +keep_attention_fp8, each from its run."""
    bf16 = run_points("results/dreamzero-14b-1gpu/20261203-122850-19d9").set_index("label")
    fp8 = run_points("results/dreamzero-14b-1gpu/20261207-043615-37fe").set_index("label")
    before, after = bf16.loc["+keep_attention", "step_time_s"], fp8.loc["+keep_attention_fp8", "step_time_s"]
    assert " ".join(marked("dreamzero-14b-fp8-gain").split()) == f"{before:.3f} to {after:.3f} s a step"
    assert " ".join(marked("dreamzero-14b-fp8-less").split()) == f"{1 - after / before:.1%} less a step"
    assert " ".join(marked("dreamzero-14b-fp8-short").split()) == f"{after / 3.5 - 1:.1%} away"
    assert fp8.loc["+keep_attention_fp8", "fidelity"].endswith("compute faithful (0.9996)")
