"""The scaling table's step and rates: one step, the mean, and the rates over it."""

import numpy as np
import pytest

from benchbay.analysis import scaling
from benchbay.analysis.frame import records_to_frame
from tests.fixtures.records import record

WARMUP = 2


def _process(world: int, steps: list[float], repeat: int) -> dict:
    """A process whose steady steps wait for batches every fourth step: its mean step is well above
    its median, and it recorded its rates over the mean (the runner's rule)."""
    steady = np.asarray(steps[WARMUP:])
    samples = 4  # per step and GPU
    return record(point_id="ddp", label="ddp", repeat=repeat, world_size=world, knobs={"sharding": "ddp"},
                  env={"gpu": "NVIDIA H200"},
                  metrics={"step_time_s": float(np.median(steady)), "step_time_mean_s": float(steady.mean()),
                           "samples_per_step": samples, "samples_per_s_per_gpu": samples / steady.mean(),
                           "samples_per_s": samples * world / steady.mean(), "warmup_steps": WARMUP,
                           "measured_steps": steady.size},
                  series={"step_times_s": steps},
                  extra={"phases": {"communication": 0.1}})


def test_the_step_beside_a_rate_is_the_step_the_rate_is_over():
    """'step (s)' was the median step beside samples/s of the mean step, and comm_share over the
    median (review): a reader dividing one by the other got another throughput."""
    slow = [3.0, 3.0] + [0.5, 0.5, 0.5, 1.5] * 5
    frame = records_to_frame([_process(world, [s * (1 + 0.01 * repeat) for s in slow], repeat)
                              for world in (1, 2) for repeat in range(2)])
    table = scaling.scaling_table(frame).set_index("world_size")
    for world in (1, 2):
        pooled = np.concatenate([np.asarray(slow[WARMUP:]) * (1 + 0.01 * repeat) for repeat in range(2)])
        row = table.loc[world]
        assert row["step_time_s"] == pytest.approx(pooled.mean())  # 0.75 s, not the median 0.5
        assert row["samples_per_s_per_gpu"] * row["step_time_s"] == pytest.approx(4)
        assert row["samples_per_s"] == pytest.approx(world * row["samples_per_s_per_gpu"])
        assert row["comm_share"] == pytest.approx(0.1 / pooled.mean())
