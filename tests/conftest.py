import os
import sys
from pathlib import Path

import pytest

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
