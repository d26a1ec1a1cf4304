import subprocess

from benchbay.cli import main

STEP = '''
import time

import torch
from torch import nn

from benchbay.workloads.base import ModelParts, TrainingWorkload

SLEEP_S = {sleep}


class Step(TrainingWorkload):
    name = "userstep"

    def build(self):
        return ModelParts(model=nn.Linear(4, 1), regions={{}})

    def batch(self, step):
        x = torch.ones(self.mbs, 4)
        return x, x.sum(dim=1, keepdim=True)

    def loss(self, model, batch):
        time.sleep(SLEEP_S)
        x, y = batch
        return nn.functional.mse_loss(model(x), y), {{}}

    def optimizer(self, params):
        return torch.optim.AdamW(params, lr=1e-3)
'''
SUITE = """
name: toy
workload: {name: "userstep:Step"}
knobs: {precision: fp32}
sweep: {points: [{label: step, mbs: 1}]}
steps: {warmup: 1, measure: 6}
timeout: 120
# a 50 ms step and a 50% threshold: the planted 0.2 s is x5, while a busy host's stall of a few
# milliseconds (a 1 ms step read x2.4 slower under a parallel test run) stays far inside it
gate: ["step_time:median:50%"]
"""


def _commit(repo, message, sleep=0.05):
    (repo / "userstep.py").write_text(STEP.format(sleep=sleep))
    (repo / "notes.txt").write_text(message)
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", message], check=True)
    return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()


def test_bisect_names_the_commit_that_added_a_sleep(tmp_path, capsys):
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "config", "user.email", "t@t"], check=True)
    subprocess.run(["git", "-C", str(repo), "config", "user.name", "t"], check=True)
    (repo / "toy.yaml").write_text(SUITE)
    good = _commit(repo, "a tiny step")
    _commit(repo, "an unrelated change")
    planted = _commit(repo, "the regression", sleep=0.25)
    bad = _commit(repo, "another unrelated change", sleep=0.25)
    code = main(["bisect", "toy.yaml", "--repo", str(repo), "--point", "step", "--good", good, "--bad", bad])
    out = capsys.readouterr().out
    assert code == 0 and f"first bad commit: {planted}" in out, out
    assert f"- {planted[:12]} bad: step_time:median:50%" in out  # with the gate's figures, at the suite's threshold
    assert "skip" not in out
    assert subprocess.run(["git", "-C", str(repo), "worktree", "list"], capture_output=True,
                          text=True).stdout.count("\n") == 1  # the worktrees are gone
