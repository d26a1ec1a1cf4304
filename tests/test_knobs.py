"""Every generic knob value is applied through the one mechanism (benchbay.knobs.training) on a
tiny model: it trains, or the point is skipped with a reason."""

import pytest
import torch
import torch.distributed as dist
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper

from benchbay import knobs as knob_table
from benchbay.knobs import training
from tests.fixtures.tinywork import Tiny

CPU = torch.device("cpu")


def make(**overrides):
    values = {**knob_table.defaults_for(Tiny), "precision": "fp32", **overrides}
    return Tiny({}, values, CPU), values


def train(workload, values, steps=4):
    torch.manual_seed(0)
    step = training.prepare(workload, values, CPU)
    losses = [float(step(workload.batch(0))[0]) for _ in range(steps)]
    return step, losses


@pytest.fixture
def group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/pg", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.mark.parametrize("precision", ["fp32", "bf16", "bf16_mixed"])
@pytest.mark.parametrize("recompute", ["off", "full", "selective"])
def test_precision_and_recompute_train(precision, recompute):
    workload, values = make(precision=precision, recompute=recompute)
    step, losses = train(workload, values)
    assert all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < losses[0]
    blocks = [m for m in step.model.modules() if isinstance(m, CheckpointWrapper)]
    assert len(blocks) == (0 if recompute == "off" else 2)
    dtype = {p.dtype for p in step.params}
    assert dtype == ({torch.bfloat16} if precision == "bf16" else {torch.float32})


@pytest.mark.parametrize("sharding", ["ddp", "fsdp2_full", "fsdp2_grad_op"])
def test_sharding_one_process_matches_none(group, sharding):
    _, reference = train(*make())
    _, losses = train(*make(sharding=sharding))
    assert losses == pytest.approx(reference, rel=1e-5)


def test_offload_optimizer_keeps_master_weights_on_cpu():
    workload, values = make(offload="optimizer")
    step, losses = train(workload, values)
    assert step.optimizer.master[0].device.type == "cpu" and step.optimizer.master[0].dtype == torch.float32
    _, reference = train(*make())
    assert losses == pytest.approx(reference, rel=1e-5)


def test_deterministic_runs_repeat():
    a = train(*make(deterministic=True))[1]
    b = train(*make(deterministic=True))[1]
    assert a == b
    torch.use_deterministic_algorithms(False)


@pytest.mark.parametrize("knobs, reason", [
    ({"cuda_graph": "attention"}, "needs a CUDA device"),
    ({"cuda_graph": "step"}, "needs a CUDA device"),
    ({"sharding": "fsdp2_hybrid", "replicate": 2}, "fsdp2_hybrid needs"),
    ({"sharding": "ddp", "offload": "optimizer"}, "not under DDP"),
])
def test_unsupported_combinations_are_skipped_with_a_reason(knobs, reason):
    values = {**knob_table.defaults_for(Tiny), **knobs}
    assert reason in training.skip_reason(values, CPU, world_size=1)


def test_every_generic_knob_value_runs_or_is_skipped():
    """Sweep each enumerated generic knob on its own over the tiny model."""
    for name, knob in knob_table.GENERIC.items():
        for value in knob.values or ():
            if name in ("sharding", "compile") or (name, value) == ("cuda_graph", "off"):
                continue  # sharding needs a process group (above); compile is slow (test_compile)
            workload, values = make(**{name: value})
            reason = training.skip_reason(values, CPU, world_size=1)
            if reason is None:
                assert all(torch.isfinite(torch.tensor(train(workload, values, steps=2)[1])))
            else:
                assert reason


@pytest.mark.slow
@pytest.mark.parametrize("value", ["blocks", "full"])
def test_compile_matches_eager(value):
    _, reference = train(*make())
    _, losses = train(*make(compile=value))
    assert losses == pytest.approx(reference, rel=1e-4)
