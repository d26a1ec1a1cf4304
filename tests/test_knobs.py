"""Every generic knob value is applied through the one mechanism (benchbay.launch.training) on a
tiny model: it trains, or the point is skipped with a reason."""

import pytest
import torch
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper
from torch.utils._python_dispatch import TorchDispatchMode

from benchbay import knobs as knob_table
from benchbay.knobs import rules
from benchbay.knobs.parts import ModelParts
from benchbay.launch import training
from benchbay.launch.harness import harness_for
from benchbay.workloads.dreamzero.workload import DreamZero
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
def test_sharding_one_process_matches_none(gloo_group, sharding):
    _, reference = train(*make())
    _, losses = train(*make(sharding=sharding))
    assert losses == pytest.approx(reference, rel=1e-5)


@pytest.mark.parametrize("knobs", [
    {"offload": "optimizer", "offload_shards": 2}, {"recompute": "full", "recompute_impl": "reentrant"},
    {"sharding": "ddp", "ddp_static_graph": True, "ddp_bucket_cap_mb": 100},
    {"recompute_impl": "non_reentrant", "offload_shards": 1, "replicate": 1, "ddp_bucket_cap_mb": 25},  # defaults
])
def test_a_modifier_whose_knob_is_on_or_left_at_its_default_runs(knobs):
    workload, _ = make(**knobs)
    assert harness_for(workload, 1).skip_reason() is None


def test_ddp_knobs_under_fsdp2_are_stated_in_the_record():
    # the committed sharding suites set them once for every strategy: not refused there, but not silent
    _, values = make(sharding="fsdp2_full", ddp_gradient_as_bucket_view=True)
    assert rules.skip_reason(Tiny, values, "cuda", 2) is None
    assert "ddp_gradient_as_bucket_view=True" in rules.ignored(values)["knobs_ignored"]
    assert rules.ignored(make(sharding="ddp", ddp_static_graph=True)[1]) == {}


def test_recompute_of_a_model_without_blocks_is_refused():
    class NoRegions(Tiny):
        def build(self):
            parts = super().build()
            return ModelParts(model=parts.model)  # a user's workload that declares no region

    for mode in ("full", "selective"):
        _, values = make(recompute=mode)
        with pytest.raises(rules.Refused, match=f"recompute={mode}: the model declares no blocks"):
            training.prepare(NoRegions({}, values, CPU), values, CPU)
    _, values = make()
    training.prepare(NoRegions({}, values, CPU), values, CPU)  # recompute=off has nothing to do


def test_offload_optimizer_keeps_master_weights_on_cpu():
    workload, values = make(offload="optimizer")
    step, losses = train(workload, values)
    assert step.optimizer.master[0].device.type == "cpu" and step.optimizer.master[0].dtype == torch.float32
    _, reference = train(*make())
    assert losses == pytest.approx(reference, rel=1e-5)


@pytest.mark.parametrize("shards", [2, 3])
def test_offload_shards_step_one_share_as_a_zero2_rank(shards):
    """offload_shards=N: this process holds and steps 1/N of the parameters (by size), as one
    ZeRO-2 rank does; the others stay as they were (another rank's share)."""
    _, values = make(offload="optimizer", offload_shards=shards)
    workload = Tiny({"depth": 4}, values, CPU)
    torch.manual_seed(0)
    step = training.prepare(workload, values, CPU)
    before = [p.detach().clone() for p in step.params]
    step(workload.batch(0))
    owned = {id(p) for p in step.optimizer.owned}
    changed = [not torch.equal(p, b) for p, b in zip(step.params, before, strict=True)]
    assert changed == [id(p) in owned for p in step.params]
    assert 0 < len(owned) < len(step.params)
    assert step.optimizer.share == pytest.approx(1 / shards, abs=0.25)


def test_deterministic_runs_repeat():
    with harness_for(make(deterministic=True)[0], 1).settings():
        assert torch.are_deterministic_algorithms_enabled()
        a = train(*make(deterministic=True))[1]
        b = train(*make(deterministic=True))[1]
    assert a == b and not torch.are_deterministic_algorithms_enabled()  # the point's settings end with it


@pytest.mark.parametrize("knobs, reason", [
    ({"cuda_graph": "attention"}, "workload tiny does not support it"),  # it captures no attention helpers
    ({"cuda_graph": "step"}, "needs a CUDA device"),
    ({"sharding": "fsdp2_hybrid", "replicate": 2}, "fsdp2_hybrid needs"),
    ({"sharding": "ddp", "offload": "optimizer"}, "not under DDP"),
    ({"recompute": "selective", "recompute_impl": "reentrant"}, "needs recompute_impl=non_reentrant"),
    ({"recompute": "attention", "recompute_impl": "reentrant"}, "needs recompute_impl=non_reentrant"),
    # a modifier whose knob is off would be ignored while the point claims it
    ({"offload_shards": 4}, "acts only with offload=optimizer and sharding=none"),
    ({"replicate": 2}, "act only with sharding=fsdp2_hybrid"),
    ({"ddp_static_graph": True}, "needs sharding=ddp"),
    ({"ddp_bucket_cap_mb": 100}, "needs sharding=ddp"),
    ({"recompute_impl": "reentrant"}, "acts only with recompute on"),
])
def test_unsupported_combinations_are_skipped_with_a_reason(knobs, reason):
    workload, _ = make(**knobs)
    assert reason in harness_for(workload, 1).skip_reason()


#: the only generic knob values the tiny CPU workload cannot run, and why
EXPECTED_SKIPS = {("cuda_graph", "attention"): "does not support it", ("cuda_graph", "step"): "needs a CUDA device",
                  ("cudnn_benchmark", True): "needs a CUDA device",
                  ("emulate_precision_casts", True): "needs compile != off",
                  ("recompute_impl", "reentrant"): "acts only with recompute on",
                  ("float8_pad_rows", True): "acts only under float8=tensorwise or rowwise",
                  ("ddp_static_graph", True): "needs sharding=ddp",
                  ("ddp_gradient_as_bucket_view", True): "needs sharding=ddp",
                  ("ddp_find_unused_parameters", True): "needs sharding=ddp",
                  **{("optimizer", f"adamw_sr{kind}"): "needs precision=bf16" for kind in ("", "_8bit", "_4bit")},
                  **{("float8", recipe): "needs a CUDA GPU of compute capability 8.9"
                     for recipe in knob_table.GENERIC["float8"].values if recipe != "off"}}


def test_every_generic_knob_value_runs_or_is_skipped():
    """Sweep each enumerated generic knob on its own over the tiny model: it trains, or it is one
    of the expected skips with its reason."""
    for name, knob in knob_table.GENERIC.items():
        for value in knob.values or ():
            if name in ("sharding", "compile"):
                continue  # sharding needs a process group (above); compile is slow (test_compile)
            if name == "optimizer" and value.startswith("ao_"):
                continue  # torchao compiles its step: test_fidelity runs them
            workload, values = make(**{name: value})
            reason = harness_for(workload, 1).skip_reason()
            if (name, value) in EXPECTED_SKIPS:
                assert EXPECTED_SKIPS[name, value] in reason
            else:
                assert reason is None, f"{name}={value}: {reason}"
                assert all(torch.isfinite(torch.tensor(train(workload, values, steps=2)[1])))


@pytest.mark.slow
@pytest.mark.parametrize("value", ["blocks", "full"])
def test_compile_matches_eager(value):
    _, reference = train(*make())
    _, losses = train(*make(compile=value))
    assert losses == pytest.approx(reference, rel=1e-4)


@pytest.mark.parametrize("mode", ["selective", "attention", "full"])
def test_recomputed_blocks_compile_whole(mode):
    """A checkpointed block compiles as one graph, its backward too, with no graph break: a policy
    dynamo cannot inline sends the block back to eager, silently (a compiled point that is not).
    AOTAutograd with no code generation keeps this quick."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._dynamo.utils import counters

    from benchbay.knobs import recompute

    backward_graphs = []

    def backward(gm, _):
        backward_graphs.append(gm)
        return gm.forward

    backend = aot_autograd(fw_compiler=lambda gm, _: gm.forward, bw_compiler=backward)
    workload, _ = make()
    parts = workload.build()
    recompute.apply(parts, mode)
    torch._dynamo.reset()
    counters.clear()
    for block in parts.regions["blocks"]:
        block.compile(backend=backend)
    loss, _ = workload.loss(parts.model, workload.batch(0))
    loss.backward()
    assert not counters["graph_break"], dict(counters["graph_break"])
    assert backward_graphs


@pytest.mark.slow
def test_emulated_precision_casts_give_compiled_bf16_eagers_loss():
    """On the DreamZero tiny step in bf16, compiled blocks round their fused intermediates to bf16
    where eager does: the loss of the first batch (before any update) comes far closer to eager's
    (to the bit with 2 threads; with 1, whose matmul reductions run in another order than inductor's,
    ~12x closer than without); the setting holds for the point and no longer."""
    import torch._inductor.config as inductor

    def first_loss(**knobs):
        torch._dynamo.reset()
        values = {**knob_table.defaults_for(DreamZero), "precision": "bf16", "attention": "sdpa", **knobs}
        workload = DreamZero({"preset": "dreamzero-tiny"}, values, CPU)
        torch.manual_seed(0)
        with harness_for(workload, 1).settings():
            assert inductor.emulate_precision_casts == values["emulate_precision_casts"]
            step = training.prepare(workload, values, CPU)
            with torch.no_grad(), step.autocast():  # the forward alone: no backward graph to compile
                return float(workload.loss(step.model, workload.batch(0))[0])

    eager = first_loss()
    emulated = abs(first_loss(compile="blocks", emulate_precision_casts=True) - eager)
    assert emulated < abs(first_loss(compile="blocks") - eager) / 4
    assert not inductor.emulate_precision_casts


class _AttentionCalls(TorchDispatchMode):
    """Forward attention kernels dispatched while active (their backward kernels not counted)."""

    def __init__(self):
        super().__init__()
        self.forward = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.name()  # an aten overload or a higher-order op (flex_attention)
        self.forward += "attention" in name and "backward" not in name
        return func(*args, **(kwargs or {}))


def attention_calls_in_backward(knobs: dict, device: torch.device) -> int:
    """Forward attention kernels run by the backward of one harness step on the DreamZero tiny preset."""
    values = {**knob_table.defaults_for(DreamZero), "mbs": 1, **knobs}
    workload = DreamZero({"preset": "dreamzero-tiny"}, values, device)
    torch.manual_seed(0)
    step = training.prepare(workload, values, device)
    with step.autocast():
        loss, _ = workload.loss(step.model, workload.batch(0))
    with _AttentionCalls() as calls:
        loss.backward()
    return calls.forward


@pytest.mark.parametrize("attention", ["sdpa", "blockwise"])
@pytest.mark.parametrize("mode, recomputed", [("selective", False), ("attention", False), ("full", True),
                                              ("off", False)])
def test_selective_recompute_keeps_attention_outputs(attention, mode, recomputed):
    """Through the harness, on the DreamZero tiny step: backward re-runs the attention kernels
    under full recompute only; selective and attention keep their outputs (their save lists name them)."""
    calls = attention_calls_in_backward({"precision": "fp32", "attention": attention, "recompute": mode}, CPU)
    assert (calls > 0) == recomputed


def test_selective_recompute_saves_fp8_matmuls_as_it_saves_bf16_ones():
    """torchao's float8 linears reach the policy as aten._scaled_mm: saved, not recomputed, like mm."""
    from torch.utils.checkpoint import CheckpointPolicy

    from benchbay.knobs import recompute

    recompute._fill_policy_sets()
    for op in (torch.ops.aten.mm.default, torch.ops.aten._scaled_mm.default):
        assert recompute._selective(None, op) == CheckpointPolicy.MUST_SAVE
    assert recompute._selective(None, torch.ops.aten.gelu.default) == CheckpointPolicy.PREFER_RECOMPUTE
