"""nox sessions: tests, lint, gate, and one session per suite file (``suite-<name>``, generated
from suites/ so a new suite needs no edit here). Sessions run in the current environment
(``bash .ci/setup`` then ``.venv/bin/nox``): torch is too large to reinstall per session."""

from pathlib import Path

import nox

nox.options.sessions = ["tests", "lint"]
SUITES = sorted(Path(__file__).parent.joinpath("suites").glob("*.yaml"))


@nox.session(python=False)
def tests(session):
    session.run("python", "-m", "pytest", *session.posargs)


@nox.session(python=False)
def lint(session):
    session.run("ruff", "check", "benchbay", "tests", "benchmarks", "noxfile.py")


@nox.session(python=False)
def gate(session):
    """Run the suites named after -- (default: quickstart) and gate each against this machine's baseline."""
    for name in session.posargs or ["quickstart"]:
        session.run("python", "-m", "benchbay", "run", f"suites/{name}.yaml")
        session.run("python", "-m", "benchbay", "gate", name, "--markdown", f"reports/gate-{name}.md")


def _suite_session(path: Path):
    def run_suite(session):
        session.run("python", "-m", "benchbay", "run", str(path), *session.posargs)

    run_suite.__doc__ = f"benchbay run {path.relative_to(Path(__file__).parent)}"
    return run_suite


for _path in SUITES:
    nox.session(python=False, name=f"suite-{_path.stem}")(_suite_session(_path))
