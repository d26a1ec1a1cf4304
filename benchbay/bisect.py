"""``benchbay bisect SUITE --point LABEL --good REV --bad REV``: the first commit that made a
point slower, found by ``git bisect``.

Each commit git bisect picks is checked out in a worktree of its own, the point is run there
(``python -m benchbay run`` from the worktree's root, so the worktree's own code is what runs:
its user steps, and its benchbay when the repository is benchbay; ``install`` first, as the
README installs, where the commit needs it) and judged against the good side with the gate's
statistics and the suite's thresholds: bad only when significantly slower by the threshold; a
noisy verdict (not significant, too few processes to support one, or a side that ran noisy) is
measured again, its processes pooled with the first; a commit whose install or run fails, or
that still cannot support a verdict, is ``skip`` (a bisect wants ``--set repeats=3`` or more)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from benchbay.analysis.gate import gate
from benchbay.analysis.metrics import Verdict
from benchbay.store import load_runs
from benchbay.suite.model import SuiteMeta

#: a noisy verdict is measured again at most this many times before it counts as good (or skip)
REMEASURE = 1


@dataclass
class Step:
    commit: str
    verdict: str  # good, bad or skip
    figures: str  # the gate's line for the point, or why it was skipped


@dataclass
class BisectResult:
    first_bad: str | None
    steps: list[Step] = field(default_factory=list)

    def markdown(self) -> str:
        lines = [f"first bad commit: {self.first_bad or 'not found'}", ""]
        lines += [f"- {s.commit[:12]} {s.verdict}: {s.figures}" for s in self.steps]
        return "\n".join(lines)


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


class Bisector:
    def __init__(self, repo: str | Path, suite: str, label: str, work: Path, install: str | None = None,
                 sets: list[str] | None = None, thresholds: list[str] | None = None):
        self.repo, self.suite, self.label, self.work = Path(repo).resolve(), suite, label, Path(work)
        self.install, self.sets, self.thresholds = install, sets or [], thresholds

    def measure(self, commit: str) -> Path | None:
        """The run folder of the point measured at ``commit``; None when the install or run failed."""
        tree = self.work / f"tree-{commit[:12]}"
        if not tree.exists():
            _git(self.repo, "worktree", "add", "--detach", str(tree), commit)
        results = self.work / f"results-{commit[:12]}"
        if self.install and subprocess.run(self.install, shell=True, cwd=tree, capture_output=True).returncode:
            return None
        command = [sys.executable, "-m", "benchbay", "run", self.suite, "--point", self.label, "--no-report",
                   "--results", str(results), *(a for s in self.sets for a in ("--set", s))]
        before = set(results.glob("*/*"))
        if subprocess.run(command, cwd=tree, capture_output=True).returncode:  # the record says why
            return None
        new = sorted(set(results.glob("*/*")) - before)
        return new[-1] if new else None

    def judge(self, good_run: Path, commit: str) -> Step:
        runs: list[Path] = []  # the commit's runs so far: a re-measure adds processes to the verdict
        for attempt in range(REMEASURE + 1):
            run = self.measure(commit)
            if run is None:
                return Step(commit, "skip", "the install or the run failed")
            runs.append(run)
            checks = gate(load_runs([good_run]), load_runs(runs), self.thresholds).checks
            checks = checks[checks["label"] == self.label]
            if checks.empty or (checks["verdict"] == Verdict.FAILED).any():
                return Step(commit, "skip", "the point did not run")
            row = checks.iloc[0]
            figures = (f"{row['threshold']}: {row['baseline']:.4g} → {row['candidate']:.4g} "
                       f"(×{row['ratio']:.3f}, p {row['p_value']:.3g}, {row['verdict']})")
            if checks["regression"].any():
                return Step(commit, "bad", figures)
            undecided = row["verdict"] == Verdict.UNSUPPORTED
            noisy = undecided or row["verdict"] == Verdict.NOT_SIGNIFICANT or bool(row["caution"])
            if not noisy or attempt == REMEASURE:
                # too few processes to tell the threshold from the noise: neither good nor bad
                return Step(commit, "skip" if undecided else "good", figures)
        raise AssertionError("unreachable")

    def run(self, good: str, bad: str) -> BisectResult:
        good, bad = _git(self.repo, "rev-parse", good), _git(self.repo, "rev-parse", bad)
        good_run = self.measure(good)
        if good_run is None:
            raise ValueError(f"the point does not run at the good commit {good[:12]}")
        if self.thresholds is None:  # the suite's gate list, as the good commit holds it
            self.thresholds = SuiteMeta.of_run(good_run).gate or None
        control = self.work / "control"  # git bisect's own worktree: its state stays out of the user's
        _git(self.repo, "worktree", "add", "--detach", str(control), bad)
        result = BisectResult(None)
        try:
            out = _git(control, "bisect", "start", "--no-checkout", bad, good)
            while "is the first bad commit" not in out:
                commit = _git(control, "rev-parse", "BISECT_HEAD")
                step = self.judge(good_run, commit)
                result.steps.append(step)
                marked = subprocess.run(["git", "-C", str(control), "bisect", step.verdict, commit],
                                        capture_output=True, text=True)
                out = marked.stdout
                if marked.returncode:  # only skipped commits are left between good and bad
                    return result
            result.first_bad = out.split()[0]
            return result
        finally:
            _git(control, "bisect", "reset")
            for tree in self.work.glob("*"):
                if tree.name.startswith(("tree-", "control")):
                    _git(self.repo, "worktree", "remove", "--force", str(tree))


def bisect(repo: str | Path, suite: str, label: str, good: str, bad: str, **options) -> BisectResult:
    """Bisect in a scratch folder; see :class:`Bisector` for ``options``."""
    with tempfile.TemporaryDirectory(prefix="benchbay-bisect-") as work:
        return Bisector(repo, suite, label, Path(work), **options).run(good, bad)
