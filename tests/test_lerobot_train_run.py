"""The committed run of suites/lerobot-train.yaml (LeRobot's own lerobot-train, unmodified) means what
it says: the probe's step times are lerobot-train's own clocks (its update plus its wait for the
batch, which it prints each step) and what it does between them (its logging, each step here), and
the loader's workers do not change what the model trains on."""

from pathlib import Path

import pytest

from benchbay import store
from benchbay.analysis.tables import LOSS_ATOL, LOSS_RTOL
from benchbay.record import DATA_WAITS_S, LOSSES, STEP_TIMES_S, Status

#: seconds a step that lerobot-train's clocks leave out may take at most (its logging each step)
BOOKKEEPING_S = 0.005
ROOT = Path(__file__).resolve().parents[1]
RUNS = store.find_runs([ROOT / "results" / "lerobot-train"]) if (ROOT / "results" / "lerobot-train").is_dir() else []
pytestmark = pytest.mark.skipif(not RUNS, reason="no committed run of suites/lerobot-train.yaml")


@pytest.fixture(scope="module")
def run():
    return store.newest_first(RUNS)[0]


@pytest.fixture(scope="module")
def records(run):
    return {r.label: r for r in store.typed_records(run)}


def test_every_point_was_timed_by_the_probe(records):
    assert records and all(r.status == Status.OK for r in records.values())
    assert {r.extra["probe"] for r in records.values()} == {"optimizer-step hook"}


def test_the_probe_agrees_with_lerobot_trains_own_clocks(records):
    for r in records.values():
        warmup = int(r.metrics["warmup_steps"])
        probe = r.series[STEP_TIMES_S][warmup:]
        own = [u + d for u, d in zip(r.series["update_s"], r.series[DATA_WAITS_S], strict=True)][warmup:]
        assert len(probe) == len(own) == r.metrics["measured_steps"]
        # from one optimizer step to the next the probe sees all of a step; lerobot-train's two clocks
        # leave out its bookkeeping between them (1.1-2.1 ms a step on an H100); they print 3 decimals
        between = (sum(probe) - sum(own)) / len(probe)
        assert -0.001 <= between <= BOOKKEEPING_S, r.label


def test_the_loaders_workers_do_not_change_the_losses(run, records):
    """The suite's equivalent groups (those the run measured): the same losses, to the digit printed."""
    groups = [[records[label] for label in group if label in records]
              for group in store.read_manifest(run)["suite_as_run"]["equivalent"]]
    assert any(len(group) > 1 for group in groups)
    for reference, *others in (group for group in groups if len(group) > 1):
        for other in others:
            ours, theirs = other.series[LOSSES], reference.series[LOSSES]
            assert ours[0] == theirs[0], other.label  # the same first batch and weights: the same loss
            # a GPU's reductions are not deterministic (bf16 points part by up to 1.1% in 35 steps)
            assert ours == pytest.approx(theirs, rel=LOSS_RTOL, abs=LOSS_ATOL), other.label


def test_the_guides_h200_figures_are_the_records():
    """docs/guide.md's lerobot-train sentence: batch 8 with and without loader workers, and the wait for
    the batch (lerobot-train's data_s) over the measured steps, from the H200 run it names."""
    from tests.test_readme_figures import marked

    records = {r.label: r for r in store.typed_records(ROOT / "results/lerobot-train/20261207-042421-cb4c")}
    plain, workers = records["bs8"], records["bs8-workers2"]
    rate = [r.metrics["samples_per_s_per_gpu"] for r in (workers, plain)]
    warmup = int(plain.metrics["warmup_steps"])
    waits = plain.series[DATA_WAITS_S][warmup:]
    assert " ".join(marked("lerobot-h200", ROOT / "docs/guide.md").split()) == (
        f"{rate[0]:.2f} samples/s with two loader workers against {rate[1]:.2f} without ({rate[0] / rate[1]:.2f}x): "
        f"without them it waits {1000 * sum(waits) / len(waits):.1f} ms of its "
        f"{1000 * plain.metrics['step_time_mean_s']:.1f}-ms step for the batch")


def test_its_report_reads_the_suite_file_where_lerobot_train_is_not_installed(run, tmp_path):
    """`benchbay report --suite suites/lerobot-train.yaml`, here, where no lerobot-train is on PATH."""
    import shutil

    from benchbay.cli import main

    assert shutil.which("lerobot-train") is None
    out = tmp_path / "report"
    assert main(["report", str(run), "--out", str(out), "--suite", str(ROOT / "suites/lerobot-train.yaml")]) == 0
    assert "bs8-workers2" in (out / "report.md").read_text()
