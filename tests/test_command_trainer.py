"""A HuggingFace ``Trainer`` script run unchanged as a ``command``: accelerate wraps its optimizer,
and the probe still sees each of its steps (the loss it logs read beside them)."""

import pytest

from benchbay import store
from benchbay.record import Status
from benchbay.runner import SuiteRunner
from benchbay.suite import load
from tests.conftest import write_suite

pytest.importorskip("accelerate")  # what Trainer needs besides transformers (the dev extra installs it)


@pytest.mark.slow
def test_a_trainer_scripts_steps_are_seen_through_accelerates_optimizer(tmp_path, in_repo):
    path = write_suite(tmp_path / "trainer.yaml", """\
name: trainer
workload:
  name: command
  params:
    argv: ["{python}", suites/examples/hf_trainer_train.py, --batch-size, "{mbs}", --max-steps, "40"]
    env: {OMP_NUM_THREADS: "1"}
    loss_regex: "'loss': '([0-9.]+)'"
knobs: {mbs: 4}
steps: {warmup: 2, measure: 5}
timeout: 300
""")
    runner = SuiteRunner(load(path), tmp_path / "results")
    runner.run_all()
    (record,) = store.typed_records(runner.run)
    assert record.status == Status.OK, record.reason
    assert record.extra["probe"] == "optimizer-step hook"
    assert len(record.series["step_times_s"]) == 7 and len(record.series["losses"]) == 7
    assert all(3.0 < loss < 8.0 for loss in record.series["losses"])  # ln(256) = 5.5 for random tokens
    assert record.metrics["samples_per_step"] == 4 and record.metrics["samples_per_s"] > 0
