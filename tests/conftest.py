import json
import os
import sys
from pathlib import Path

# One intra-op thread for torch here and in every process a test starts (points, torchrun ranks,
# CLI runs inherit it; torchrun sets the same for its ranks): the tests' tensors are tiny, and on a
# machine of 2 shared cores the OpenMP threads of several busy processes spin against each other
# (a DreamZero-tiny video suite took 106 s of CPU with torch's default threads, 47 s with one).
# Set before anything imports torch, which reads it once. A value the caller set is kept.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402

from benchbay.launch.base import Outcome, PointSpec  # noqa: E402
from benchbay.launch.local import LocalLauncher  # noqa: E402

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
def cli_env(tmp_path_factory):
    # a CLI on a pipe prints whole lines unless COLUMNS says how wide to fit them: pytest-xdist's
    # workers have COLUMNS=80 and LINES=24, which would cut `benchbay show`'s long texts
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    # a CLI the test kills (SIGKILL) cannot remove its scratch: it goes where pytest removes it
    env["TMPDIR"] = str(tmp_path_factory.mktemp("cli-tmp"))
    return env


class InProcessLauncher(LocalLauncher):
    """Each point through the worker's own ``run`` in this process: for the tests of the runner's
    logic (search, resume, labels, budgets, snapshots), which need its records, not the ~3 s of a
    fresh process importing torch. A crash or a hang would take pytest down with it: those keep
    their tests through real processes (test_runner)."""

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


@pytest.fixture
def gloo_group(tmp_path):
    """A one-process gloo group in this process: the sharding knobs' code paths without torchrun."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def pytest_runtest_setup(item):
    """The one GPU skip: a test marked ``gpu`` runs only where CUDA is (on the GPU machine)."""
    if item.get_closest_marker("gpu") is not None:
        import torch

        if not torch.cuda.is_available():
            pytest.skip("needs a CUDA GPU (run on the GPU machine)")


def pytest_collection_modifyitems(config, items):
    """The tests that start points' processes (those run from the repository root, ``in_repo``) and
    the slow-marked ones first, those that are both before them: under pytest-xdist the long tests
    start early and the short ones fill in around them, instead of one long test running alone at
    the end. A stable sort of the same collection in every worker (xdist requires the same order
    everywhere)."""
    def weight(item) -> int:
        spawns = "in_repo" in getattr(item, "fixturenames", ())
        return -(spawns + (item.get_closest_marker("slow") is not None))

    items.sort(key=weight)
