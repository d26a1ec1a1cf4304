"""A matmul-bound training step with a planted slowdown, for the gate's calibration
(suites/gate-calibration.yaml, benchbay.analysis.gate_calibration): ``depth`` residual blocks of
``width`` x ``width`` matmuls over ``tokens`` rows a sample, trained by the harness. The knob
``slowdown`` adds that share of ``depth`` in blocks (0.25 of 11: 3 more), the same code doing that
much more work a step: a slowdown of known size, to be caught. The step also has a fixed part
(the batch, the loss, the optimizer's launch): about one block's time on a 2-core CPU, so 3 of 11
blocks is +25% of the step where 2 of 8 measured +22.4%."""

import torch
from torch import nn

from benchbay.knobs import Choice
from benchbay.workloads.base import ModelParts, TrainingWorkload


class Block(nn.Module):
    """A user-defined block (dynamo does not compile built-in torch.nn containers in place)."""

    def __init__(self, width: int):
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, x):
        return x + nn.functional.gelu(self.linear(x))


class MatmulStep(TrainingWorkload):
    name = "matmul-step"
    knobs = {"slowdown": Choice((0.0, 0.05, 0.25), "blocks added on purpose, as a share of depth: a planted slowdown")}
    params = {"width": 256, "depth": 11, "tokens": 64}

    def blocks(self) -> int:
        """The blocks this point runs: ``depth`` and the planted share of it (rounded to whole blocks)."""
        return self.params["depth"] + round(self.params["depth"] * float(self.knob_values["slowdown"]))

    def build(self) -> ModelParts:
        model = nn.Sequential(*[Block(self.params["width"]) for _ in range(self.blocks())]).to(self.device)
        return ModelParts(model=model, regions={"blocks": list(model)})

    def batch(self, step: int):
        g = torch.Generator(self.device).manual_seed(step)
        return torch.randn(self.mbs, self.params["tokens"], self.params["width"], generator=g, device=self.device)

    def loss(self, model, batch):
        return model(batch).pow(2).mean(), {}

    def flops_per_sample(self) -> dict[str, float]:
        return {"train": 6.0 * self.params["tokens"] * self.params["width"] ** 2 * self.blocks()}
