import json
import os
import sys
from pathlib import Path

import pytest

from benchbay.launch.base import Outcome, PointSpec
from benchbay.launch.local import LocalLauncher

ROOT = Path(__file__).resolve().parents[1]
TINY = "tests.fixtures.tinywork:Tiny"


@pytest.fixture
def in_repo(monkeypatch):
    """Run from the repository root so workers can import the test fixtures."""
    monkeypatch.chdir(ROOT)
    return ROOT


def write_suite(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def benchbay_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "benchbay", *args]


@pytest.fixture
def cli_env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


class InProcessLauncher(LocalLauncher):
    """Each point through the worker's own ``run`` in this process: for the tests of the runner's
    logic (search, resume, labels, budgets, snapshots), which need its records, not the ~3 s of a
    fresh process importing torch. A crash or a hang would take pytest down with it: the failure
    modes keep their tests through real processes (test_runner's fault suite)."""

    def run(self, spec: PointSpec, workdir: Path) -> Outcome:
        from benchbay.launch import process, worker

        saved = dict(os.environ)  # the worker sets a one-process group's variables
        try:
            as_written = json.loads(json.dumps(spec.to_json(), default=str))  # as spec.json reads
            result = worker.run(PointSpec.from_json(as_written))
        finally:
            os.environ.clear()
            os.environ.update(saved)
        return process.merge(process.Finished([result], 0, False, ""), spec.timeout, self.launch.nproc)


@pytest.fixture
def in_process():
    return InProcessLauncher()
