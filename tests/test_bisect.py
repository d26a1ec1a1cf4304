import subprocess

import pytest

from benchbay.cli import main

STEP = '''
import torch
from torch import nn

from benchbay.workloads.base import ModelParts, TrainingWorkload

STEP_S = {step_s}


class Step(TrainingWorkload):
    name = "userstep"
    own_clock = True  # its steps' times are planted (own_figures): no clock of a busy host decides

    def build(self):
        return ModelParts(model=nn.Linear(4, 1), regions={{}})

    def batch(self, step):
        x = torch.ones(self.mbs, 4)
        return x, x.sum(dim=1, keepdim=True)

    def loss(self, model, batch):
        x, y = batch
        return nn.functional.mse_loss(model(x), y), {{}}

    def optimizer(self, params):
        return torch.optim.AdamW(params, lr=1e-3)

    def own_figures(self, steps):
        return {{"times": [STEP_S * (1 + 0.01 * (i % 3)) for i in range(steps)]}}
'''
SUITE = """
name: toy
workload: {name: "userstep:Step"}
knobs: {precision: fp32}
sweep: {points: [{label: step, mbs: 1}]}
steps: {warmup: 1, measure: 6}
repeats: 2  # the gate's unit is the process: two a side support a verdict
timeout: 120
gate: ["step_time:median:50%"]
"""


def _commit(repo, message, step_s=0.05):
    (repo / "userstep.py").write_text(STEP.format(step_s=step_s))
    (repo / "notes.txt").write_text(message)
    subprocess.run(["git", "-C", str(repo), "add", "."], check=True)
    subprocess.run(["git", "-C", str(repo), "commit", "-qm", message], check=True)
    return subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.mark.slow  # a `benchbay run` of two processes at each of three commits
def test_bisect_names_the_commit_that_made_the_step_slower(tmp_path, capsys):
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(["git", "-C", str(repo), "config", "user.email", "t@t"], check=True)
    subprocess.run(["git", "-C", str(repo), "config", "user.name", "t"], check=True)
    (repo / "toy.yaml").write_text(SUITE)
    good = _commit(repo, "a tiny step")
    _commit(repo, "an unrelated change")
    planted = _commit(repo, "the regression", step_s=0.25)  # x5 the step
    bad = _commit(repo, "another unrelated change", step_s=0.25)
    code = main(["bisect", "toy.yaml", "--repo", str(repo), "--point", "step", "--good", good, "--bad", bad])
    out = capsys.readouterr().out
    assert code == 0 and f"first bad commit: {planted}" in out, out
    assert f"- {planted[:12]} bad: step_time:median:50%" in out  # with the gate's figures, at the suite's threshold
    assert "skip" not in out
    assert subprocess.run(["git", "-C", str(repo), "worktree", "list"], capture_output=True,
                          text=True).stdout.count("\n") == 1  # the worktrees are gone
