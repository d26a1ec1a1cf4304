"""Update fidelity and the optimizer knob: the rule calls round-to-nearest bf16 at lr 1e-5 lossy and
fp32 master weights and stochastic rounding faithful; each optimizer steps and keeps the state it
says; the harness records the verdict; an equivalent group fails on a lossy point. Compute fidelity:
identical compute is faithful, a planted change of the gradients is caught, what cannot be compared
or does not fit is said, the measured steps train as if it never ran, and the record keeps it."""

import tempfile
from pathlib import Path

import pandas as pd
import pytest
import torch

from benchbay import knobs as knob_table
from benchbay.analysis.frame import records_to_frame
from benchbay.analysis.tables import KEY_COLUMNS, fidelity_label, loss_agreement, point_summary
from benchbay.analysis.update_fidelity import verdict, with_compute
from benchbay.collect import compute_fidelity
from benchbay.collect.fidelity import UpdateFidelity
from benchbay.knobs import optimizer as optimizer_knob
from benchbay.knobs import sr_adamw
from benchbay.knobs.adam import hyper_of, recipe_refusal
from benchbay.knobs.parts import ModelParts
from benchbay.knobs.rules import Refused
from benchbay.launch import training
from benchbay.launch.base import PointSpec
from benchbay.launch.harness import harness_for
from benchbay.record import FIGURES, Record
from benchbay.suite import Steps
from benchbay.workloads import registry
from tests.conftest import TINY, InProcessLauncher
from tests.fixtures.tinywork import Tiny

CPU = torch.device("cpu")
DREAMZERO = dict(lr=1e-5, betas=(0.95, 0.999), eps=1e-8, weight_decay=1e-5)


def weights(dtype, n=2):
    torch.manual_seed(0)
    return [torch.nn.Parameter((torch.randn(384, 384) * 0.02).to(dtype)) for _ in range(n)]


def fidelity_of(params, optimizer, steps=10):
    """Steps with random gradients; every element sampled, so the verdict is not noise-bound."""
    probe = UpdateFidelity(hyper_of(optimizer), per_tensor=1 << 20)
    probe.start_window()
    for _ in range(steps):
        for p in params:
            p.grad = torch.randn_like(p)
        probe.before_step()
        optimizer.step()
    return probe.summary()


def test_round_to_nearest_bf16_is_lossy_at_dreamzero_lr():
    params = weights(torch.bfloat16)
    out = fidelity_of(params, torch.optim.AdamW(params, **DREAMZERO))
    assert out["extra"]["fidelity"] == "lossy"
    assert out["metrics"]["update_applied_share"] < 0.5 and out["metrics"]["update_lost_share"] > 0.5


def test_fp32_master_weights_are_faithful():
    params = weights(torch.float32)
    out = fidelity_of(params, torch.optim.AdamW(params, **DREAMZERO))
    assert out["extra"]["fidelity"] == "faithful"
    assert out["metrics"]["update_applied_share"] == pytest.approx(1.0, abs=1e-3)
    assert out["metrics"]["update_lost_share"] == 0.0


FLAT = ["adamw_sr", "adamw_sr_8bit", "adamw_sr_4bit"]


def flat(name, params):
    values = {**knob_table.defaults_for(Tiny), "precision": "bf16", "optimizer": name}
    return optimizer_knob.build(name, params, torch.optim.AdamW(params, **DREAMZERO), values)


@pytest.mark.parametrize("name", FLAT)
def test_stochastic_rounding_is_faithful_though_most_single_weights_stay(name):
    params = weights(torch.bfloat16) + [torch.nn.Parameter(torch.ones(384, dtype=torch.bfloat16))]
    out = fidelity_of(params, flat(name, params))
    assert out["extra"]["fidelity"] == "faithful"
    # random gradients, uncorrelated from step to step, are the harshest case for quantised state
    assert out["metrics"]["update_applied_share"] == pytest.approx(1.0, abs=0.01 if name != "adamw_sr_4bit" else 0.08)
    assert out["metrics"]["update_lost_share"] > 0.2  # noisy per element, unbiased on the whole


@pytest.mark.parametrize("name", FLAT)
def test_flat_sr_buckets_and_state_bytes(monkeypatch, name):
    monkeypatch.setattr(sr_adamw, "BUCKET", 384 * 384)  # one tensor a bucket
    params = weights(torch.bfloat16, n=3)
    optimizer = flat(name, params)
    assert len(optimizer.buckets) == 3
    state = sum(tensor_bytes(b.m) + tensor_bytes(b.v) for b in optimizer.buckets)
    claimed = optimizer_knob.CHOICES[name].state_bytes
    assert claimed <= state / sum(p.numel() for p in params) < claimed * 1.1  # plus one scale per block


def test_flat_step_keeps_tensors_apart_splits_large_ones_and_skips_absent_gradients(monkeypatch):
    """Tensors start on whole blocks, one larger than a bucket's room is split over two, and a parameter
    without a gradient keeps its weight, as in torch's AdamW."""
    monkeypatch.setattr(sr_adamw, "BUCKET", 1 << 12)
    params = [torch.nn.Parameter(torch.full((n,), 0.5, dtype=torch.bfloat16)) for n in (300, 7, 2000, 1500, 64)]
    values = {**knob_table.defaults_for(Tiny), "precision": "bf16", "optimizer": "adamw_sr"}
    optimizer = optimizer_knob.build("adamw_sr", params, torch.optim.AdamW(params, lr=0.1), values)
    assert [[(s.start, s.length, s.offset) for s in b.segments] for b in optimizer.buckets] == [
        [(0, 300, 0), (0, 7, 512), (0, 2000, 768), (0, 1280, 2816)], [(1280, 220, 0), (0, 64, 256)]]
    for p in params[:4]:
        p.grad = torch.ones_like(p)
    optimizer.step()
    # the first AdamW step moves each weight by lr (0.5 -> ~0.4, rounded to one of its bf16 neighbours)
    assert all(bool(((p.float() > 0.398) & (p.float() < 0.401)).all()) for p in params[:4])
    assert bool((params[4] == 0.5).all())


@pytest.mark.parametrize("name", FLAT)
def test_flat_weights_are_views_stepped_in_place_as_a_sharded_copy_is_stepped(monkeypatch, name):
    """Plain parameters become views of one storage (a tensor split over buckets as well), and their
    in-place step moves every weight as the copied step of sharded parameters does, to the bit."""
    monkeypatch.setattr(sr_adamw, "BUCKET", 1 << 12)
    stepped = {}
    for in_place in (True, False):
        monkeypatch.setattr(sr_adamw, "_steps_in_place", lambda params, in_place=in_place: in_place)
        gen = torch.Generator().manual_seed(0)
        params = [torch.nn.Parameter(torch.randn(n, generator=gen).to(torch.bfloat16))
                  for n in (300, 7, 2000, 1500, 64)]
        before = [p.detach().clone() for p in params]
        optimizer = flat(name, params)
        assert [bool(torch.equal(p, b)) for p, b in zip(params, before, strict=True)] == [True] * 5
        storages = {p.untyped_storage().data_ptr() for p in params}
        assert len(storages) == (1 if in_place else 5)
        torch.manual_seed(1)
        for _ in range(3):
            for p in params[:4]:
                p.grad = torch.randn(p.shape, generator=gen).to(torch.bfloat16)
            optimizer.step()
        assert bool(torch.equal(params[4], before[4]))  # no gradient: its weight kept
        stepped[in_place] = [p.detach().clone() for p in params]
    assert all(bool(torch.equal(a, b)) for a, b in zip(stepped[True], stepped[False], strict=True))


def test_verdict_rule():
    assert verdict(1.05, 0.0) == "faithful"
    assert verdict(1.05, None) == "faithful"  # a share given alone
    assert verdict(0.15, 0.01) == "lossy"
    assert verdict(2.9, 1.5) == "uncertain"  # a few elements moved a whole bf16 step: noise, not loss
    assert verdict(None, None) is None


def test_a_share_in_the_band_is_faithful_only_when_its_noise_could_not_have_put_it_there():
    assert verdict(0.95, 2.0) == "uncertain"  # noise alone lands a share anywhere near 1
    assert verdict(1.0, 0.05) == "uncertain"
    assert verdict(1.0, 0.03) == "faithful"  # 3 standard errors fit in the band
    assert verdict(1.0, float("nan")) == "uncertain"


def test_non_contiguous_tensors_are_sampled_by_their_logical_elements():
    """channels_last weights: the same elements of weight and gradient, never skipped."""
    for dtype, lr, expected in ((torch.float32, 1e-3, "faithful"), (torch.bfloat16, 1e-5, "lossy")):
        torch.manual_seed(0)
        conv = torch.nn.Conv2d(16, 16, 3, bias=False).to(dtype, memory_format=torch.channels_last)
        params = [conv.weight, torch.nn.Parameter(torch.randn(64, 32).t())]  # and a transposed view
        assert not any(p.is_contiguous() for p in params)
        out = fidelity_of(params, torch.optim.AdamW(params, lr=lr), steps=5)
        assert out["metrics"]["fidelity_sampled_elements"] == sum(p.numel() for p in params)
        assert out["extra"]["fidelity"] == expected
        if expected == "faithful":
            assert out["metrics"]["update_applied_share"] == pytest.approx(1.0, abs=1e-3)


def test_a_reference_that_did_not_move_is_said_rather_than_left_blank():
    params = weights(torch.float32)
    probe = UpdateFidelity(hyper_of(torch.optim.AdamW(params, lr=0.0)))
    probe.start_window()
    for p in params:
        p.grad = torch.randn_like(p)
    probe.before_step()
    assert probe.summary()["extra"]["fidelity_sample"].startswith("not measured: the reference AdamW did not move")


class AmsGrad(Tiny):
    def optimizer(self, params):
        return torch.optim.Adam(params, lr=1e-2, amsgrad=True)


class CoupledL2(Tiny):
    def optimizer(self, params):
        return torch.optim.Adam(params, lr=1e-2, weight_decay=0.5)


class Sgd(Tiny):
    def optimizer(self, params):
        return torch.optim.SGD(params, lr=1e-2)


@pytest.mark.parametrize("cls, reason", [(AmsGrad, "amsgrad=True"), (CoupledL2, "couples weight_decay=0.5"),
                                         (Sgd, "optimizer is SGD")])
@pytest.mark.parametrize("knobs", [{"optimizer": "adamw"}, {"optimizer": "adamw_sr", "precision": "bf16"},
                                   {"offload": "optimizer"}])
def test_a_recipe_that_is_not_adamw_is_refused_rather_than_replaced_or_judged_as_adamw(cls, reason, knobs):
    values = {**knob_table.defaults_for(Tiny), **knobs}
    with pytest.raises(Refused, match=reason):
        training.prepare(cls({}, values, CPU), values, CPU)


@pytest.mark.parametrize("make", [lambda ps: torch.optim.Adam(ps, lr=1e-2),  # no decay: AdamW's update
                                  lambda ps: torch.optim.Adam(ps, lr=1e-2, weight_decay=0.1,
                                                              decoupled_weight_decay=True)])
def test_adam_with_adamws_update_is_accepted(make):
    params = weights(torch.float32)
    assert recipe_refusal(make(params)) is None
    assert fidelity_of(params, make(params))["extra"]["fidelity"] == "faithful"


def tensor_bytes(value: torch.Tensor) -> int:
    """Bytes of one state tensor (a torchao quantised state counts its parts)."""
    inner = getattr(value, "__tensor_flatten__", None)
    return sum(t.nbytes for t in ([getattr(value, n) for n in inner()[0]] if inner else [value]))


def state_bytes(optimizer) -> int:
    return sum(tensor_bytes(value) for state in optimizer.state.values() for name, value in state.items()
               if name != "step" and isinstance(value, torch.Tensor))


@pytest.mark.slow  # torchao compiles its step (~5-10 s on 2 cores)
@pytest.mark.parametrize("name, precision", [("ao_adamw8bit", "bf16_mixed"), ("ao_adamw4bit", "bf16_mixed"),
                                             ("ao_adamw_sr", "bf16")])
def test_torchao_state_steps_faithfully_and_saves_memory(name, precision):
    params = weights(torch.bfloat16 if precision == "bf16" else torch.float32)
    values = {**knob_table.defaults_for(Tiny), "precision": precision, "optimizer": name}
    optimizer = optimizer_knob.build(name, params, torch.optim.AdamW(params, **DREAMZERO), values)
    out = fidelity_of(params, optimizer, steps=4)
    assert out["extra"]["fidelity"] == "faithful"
    per_param = state_bytes(optimizer) / sum(p.numel() for p in params)
    claimed = optimizer_knob.CHOICES[name].state_bytes
    assert claimed <= per_param < claimed * 1.1  # plus one scale per block


@pytest.mark.parametrize("knobs, reason", [
    ({"optimizer": "adamw_sr", "precision": "bf16_mixed"}, "needs precision=bf16"),
    ({"optimizer": "ao_adamw_sr", "precision": "fp32"}, "needs precision=bf16"),
    ({"optimizer": "ao_adamw_fp8"}, "compute capability 8.9"),
    ({"optimizer": "ao_adamw8bit", "offload": "optimizer"}, "offload=optimizer"),
])
def test_optimizers_that_cannot_run_are_skipped(knobs, reason):
    values = {**knob_table.defaults_for(Tiny), **knobs}
    assert reason in harness_for(Tiny({}, values, CPU), 1).skip_reason()


@pytest.mark.parametrize("knobs, reason", [
    ({"precision": "bf16"}, "needs precision=bf16_mixed or fp32"),
    ({"sharding": "fsdp2_full"}, "needs sharding=none"),
    ({"offload": "optimizer"}, "offload=optimizer"),
])
def test_cpu_offload_refuses_what_it_cannot_step_faithfully(knobs, reason):
    values = {**knob_table.defaults_for(Tiny), "precision": "bf16_mixed", "optimizer": "ao_cpu_offload", **knobs}
    choice = optimizer_knob.CHOICES["ao_cpu_offload"]
    assert reason in choice.skip_reason(values, torch.device("cuda"))
    assert "needs a CUDA device" in choice.skip_reason(values, CPU)


@pytest.mark.gpu  # torchao's CPUOffloadOptimizer needs CUDA
def test_cpu_offload_steps_like_fp32_adamw_with_the_clip():
    """Gradients past the clip: the host copies, taken during backward, are stepped clipped."""
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(256, 256, device="cuda") * 0.02) for _ in range(2)]
    reference = [torch.nn.Parameter(p.detach().clone()) for p in params]
    x = torch.randn(64, 256, device="cuda")
    values = {**knob_table.defaults_for(Tiny), "precision": "bf16_mixed", "optimizer": "ao_cpu_offload"}
    offload = optimizer_knob.build("ao_cpu_offload", params, torch.optim.AdamW(params, **DREAMZERO), values)
    adamw = torch.optim.AdamW(reference, **DREAMZERO)
    probe = UpdateFidelity(hyper_of(offload), per_tensor=1 << 20)
    probe.start_window()
    for _ in range(3):
        for ws, optimizer in ((params, offload), (reference, adamw)):
            optimizer.zero_grad(set_to_none=True)
            (100 * (x @ ws[0] @ ws[1]).square().sum()).backward()  # a norm far past 1.0
        norm = offload.clip_grad_norm_(params, 1.0)
        assert float(norm) > 1.0 and float(torch.nn.utils.clip_grad_norm_(reference, 1.0)) == pytest.approx(float(norm))
        probe.before_step()
        offload.step()
        adamw.step()
    for p, r in zip(params, reference, strict=True):
        torch.testing.assert_close(p, r, rtol=1e-5, atol=1e-7)
    assert probe.summary()["extra"]["fidelity"] == "faithful"


def test_list_states_memory_per_parameter():
    text = knob_table.GENERIC["optimizer"].help
    assert all(name in text for name in optimizer_knob.CHOICES) and "B/param" in text


@pytest.mark.parametrize("precision, optimizer, expected", [
    ("bf16", "adamw_sr", {"faithful", "uncertain"}), ("bf16_mixed", "adamw", {"faithful"}),
])
def test_the_training_step_records_fidelity(precision, optimizer, expected):
    values = {**knob_table.defaults_for(Tiny), "precision": precision, "optimizer": optimizer}
    workload = Tiny({}, values, CPU)
    step = training.prepare(workload, values, CPU)
    step.fidelity.start_window()
    for _ in range(3):
        step(workload.batch(0))
    out = step.fidelity.summary()
    assert out["extra"]["fidelity"] in expected
    assert out["metrics"]["fidelity_sampled_elements"] == sum(p.numel() for p in step.params)  # tiny: all
    assert "trainable tensors" in out["extra"]["fidelity_sample"]


def test_equivalent_group_fails_on_a_lossy_point_whatever_its_losses():
    group = pd.DataFrame({"name": ["fp32 master", "pure bf16"], "losses": [[1.0, 0.9], [1.0, 0.9]],
                          "fidelity": ["faithful (1.00)", "lossy (0.15)"]})
    within = loss_agreement(group)["within_tolerance"].tolist()
    assert within[0] == "yes" and within[1].startswith("no (update fidelity: lossy")


def test_equivalent_group_fails_on_lossy_gradients_too():
    cells = ["faithful (1.00); compute faithful (1.0000)", with_compute("faithful (1.00)", "lossy", 0.9123),
             with_compute("not recorded", "lossy", 0.9), "not recorded; compute faithful (0.9990)"]
    group = pd.DataFrame({"name": list("abcd"), "losses": [[1.0, 0.9]] * 4, "fidelity": cells})
    within = loss_agreement(group)["within_tolerance"].tolist()
    assert within[0] == within[3] == "yes"
    assert within[1].startswith("no (compute fidelity:") and within[2].startswith("no (compute fidelity:")


def test_a_training_point_without_a_fidelity_sample_says_so():
    # records that predate the sample: unknown, neither faithful nor a blank that reads as nothing to say
    assert fidelity_label(float("nan"), float("nan"), trains=True) == "not recorded"
    assert fidelity_label(float("nan"), float("nan"), trains=True, command=True).startswith("not measured")
    assert fidelity_label(float("nan"), float("nan"), trains=False) == ""  # a decoder does not train
    assert fidelity_label(0.15, 0.01, trains=True).startswith("lossy")
    group = pd.DataFrame({"name": ["a", "b"], "losses": [[1.0, 0.9], [1.0, 0.9]],
                          "fidelity": ["not recorded", "not recorded"]})
    assert loss_agreement(group)["within_tolerance"].tolist() == ["yes", "yes"]  # the losses decide


def measured(workload, values, perturb=None):
    """Compute fidelity of a prepared step after one warm-up step; ``perturb(step)`` changes the
    point's own compute after the reference was captured."""
    step = training.prepare(workload, values, CPU)
    step(workload.batch(0))
    if perturb:
        perturb(step)
    step.fidelity.start_window()
    return step.fidelity.compute.summary()


def tiny(**overrides):
    values = {**knob_table.defaults_for(Tiny), "precision": "bf16_mixed", **overrides}
    return Tiny({"width": 32, "depth": 3}, values, CPU), values


def test_identical_compute_is_faithful():
    out = measured(*tiny())
    assert out["extra"]["compute_fidelity"] == "faithful"
    assert out["metrics"]["compute_gradient_cosine"] == pytest.approx(1.0, abs=1e-12)
    assert out["metrics"]["compute_gradient_error"] == 0.0
    groups = out["extra"]["compute_fidelity_groups"]
    assert set(groups) == {"blocks.weights", "blocks.vectors", "rest.weights", "rest.vectors"}
    assert sum(g["tensors"] for g in groups.values()) == out["metrics"]["compute_sampled_tensors"] == 8  # all of them
    assert "eager, bf16_mixed, recompute=off" in out["extra"]["compute_fidelity_sample"]


def test_a_scaled_gradient_is_caught():
    def scale_block_weights(step):  # the point's own backward makes 1.5x the gradients of the blocks' weights
        for block in step.model[:-1]:
            block.linear.weight.register_hook(lambda g: g * 1.5)

    out = measured(*tiny(), perturb=scale_block_weights)
    groups = out["extra"]["compute_fidelity_groups"]
    assert groups["blocks.weights"]["relative_error"] == pytest.approx(0.5, rel=1e-5)
    assert groups["blocks.weights"]["cosine"] == pytest.approx(1.0, abs=1e-9)  # the direction: unchanged
    assert groups["rest.weights"]["relative_error"] == 0.0
    assert out["extra"]["compute_fidelity"] == "lossy"


def test_planted_noise_in_the_forward_is_caught():
    noise = torch.randn(8, 32, generator=torch.Generator().manual_seed(1))  # drawn before: not the steps' draws

    def noisy_first_block(step):
        step.model[0].register_forward_hook(lambda module, args, out: out + noise[: out.shape[0]])

    workload, values = tiny(mbs=8)
    out = measured(workload, values, perturb=noisy_first_block)
    assert out["metrics"]["compute_gradient_cosine"] < compute_fidelity.COSINE_MIN
    assert out["extra"]["compute_fidelity"] == "lossy"


def window(workload, values, steps=6):
    """The record's fidelity figures of a point after two warm-up steps, and the step."""
    torch.manual_seed(0)
    step = training.prepare(workload, values, CPU)
    for i in range(2):
        step(workload.batch(i))
    step.fidelity.start_window()
    for i in range(2, 2 + steps):
        step(workload.batch(i))
    return step.fidelity.summary(), step


@pytest.mark.filterwarnings("ignore:None of the inputs have requires_grad")
def test_a_block_a_reentrant_checkpoint_leaves_untrained_is_neither_update_nor_compute_faithful():
    """torch's reentrant checkpoint gives no gradient to a block whose inputs need none (the first
    block, fed the batch): the reference's blocks take inputs that need one, and train."""
    out, step = window(*tiny(recompute="full", recompute_impl="reentrant"))
    first = step.model[0]._checkpoint_wrapped_module.linear.weight
    assert first.grad is None  # the point never trains it
    assert out["extra"]["fidelity"] == "lossy" and out["extra"]["compute_fidelity"] == "lossy"
    assert "first: 0.linear" in out["extra"]["fidelity_untrained"]
    assert "recompute=full (reentrant, every block trained)" in out["extra"]["compute_fidelity_sample"]
    out, _ = window(*tiny(recompute="full"))
    assert out["extra"]["fidelity"] == out["extra"]["compute_fidelity"] == "faithful"
    assert "fidelity_untrained" not in out["extra"]


class Embedded(Tiny):
    """Blocks behind a trainable input layer: each block's input needs a gradient."""

    def build(self):
        parts = super().build()
        w = self.params["width"]
        model = torch.nn.Sequential(torch.nn.Linear(w, w), *parts.model)
        return ModelParts(model=model, regions={"blocks": list(model)[1:-1]})


def test_a_reentrant_point_whose_blocks_all_train_is_faithful():
    values = {**knob_table.defaults_for(Tiny), "precision": "bf16_mixed", "recompute": "full",
              "recompute_impl": "reentrant"}
    out, _ = window(Embedded({"width": 32, "depth": 3}, values, CPU), values)
    assert out["extra"]["fidelity"] == out["extra"]["compute_fidelity"] == "faithful"
    assert out["metrics"]["compute_gradient_cosine"] == pytest.approx(1.0, abs=1e-12)


class UnusedHead(Tiny):
    """A trainable tensor the loss never reaches: no gradient in the point nor in the reference."""

    def build(self):
        parts = super().build()
        parts.model.add_module("unused", torch.nn.Linear(4, 4))
        return parts

    def loss(self, model, batch):
        x, y = batch
        return torch.nn.functional.mse_loss(model[-2](model[1](model[0](x))), y), {}


def test_a_tensor_without_a_gradient_in_the_reference_too_is_not_the_points_fault():
    values = {**knob_table.defaults_for(Tiny), "precision": "bf16_mixed"}
    out, _ = window(UnusedHead({"width": 32, "depth": 2}, values, CPU), values)
    assert "some tensors had no gradient" in out["extra"]["fidelity_sample"]
    assert out["extra"]["fidelity"] == out["extra"]["compute_fidelity"] == "faithful"
    assert "fidelity_untrained" not in out["extra"]


class SmallLr(Tiny):
    def optimizer(self, params):
        return torch.optim.AdamW(params, lr=1e-5)  # bf16 device copies round its updates away


def test_offload_samples_the_fp32_masters_it_steps_not_their_bf16_copies():
    verdicts = {}
    for offload in ("none", "optimizer"):
        values = {**knob_table.defaults_for(Tiny), "precision": "bf16", "offload": offload}
        out, _ = window(SmallLr({"width": 32, "depth": 2}, values, CPU), values, steps=10)
        verdicts[offload] = out["extra"]["fidelity"], out["metrics"]["update_applied_share"]
        assert ("fp32 master copies" in out["extra"]["fidelity_sample"]) == (offload == "optimizer")
    assert verdicts["none"][0] == "lossy"
    assert verdicts["optimizer"][0] == "faithful" and verdicts["optimizer"][1] == pytest.approx(1.0, abs=1e-3)


def test_other_random_draws_are_said_rather_than_compared():
    def draws(step):  # as compiled random ops draw from inductor's generator, not eager's
        step.model[0].register_forward_hook(lambda module, args, out: out + 0 * torch.rand(1))

    out = measured(*tiny(), perturb=draws)
    assert "random numbers" in out["extra"]["compute_fidelity_skipped"]
    assert "compute_fidelity" not in out["extra"] and "metrics" not in out


def test_a_reference_that_does_not_fit_is_skipped_with_the_reason(monkeypatch):
    monkeypatch.setattr(compute_fidelity, "_free_bytes", lambda device: 0)
    cls = registry.resolve("dreamzero")
    values = {**knob_table.defaults_for(cls), "precision": "bf16", "attention": "sdpa"}
    out = measured(cls({"preset": "dreamzero-tiny"}, values, CPU), values)  # its norms' fp32 copies need memory
    assert out["extra"]["compute_fidelity_skipped"].startswith("not measured: the reference's weight copies")
    assert "GiB are free" in out["extra"]["compute_fidelity_skipped"]


def test_a_reference_whose_points_recompute_would_not_fit_recomputes_every_block(monkeypatch):
    monkeypatch.setattr(compute_fidelity, "_peak", lambda device: 10**12)  # the point's step filled the card
    monkeypatch.setattr(compute_fidelity, "_free_bytes", lambda device: 10**9)  # its weight copies still fit
    for recompute in ("off", "selective"):
        out = measured(*tiny(recompute=recompute))
        assert out["extra"]["compute_fidelity"] == "faithful", recompute  # the same gradients, replayed
        assert out["metrics"]["compute_gradient_cosine"] == pytest.approx(1.0, abs=1e-12)
        assert "recompute=full" in out["extra"]["compute_fidelity_sample"]


@pytest.mark.parametrize("name, params, knobs", [
    ("wallx", {"preset": "wallx-tiny"}, {"attention": "sdpa", "vision_attention": "sdpa"}),  # draws in its forward
    pytest.param("dreamzero", {"preset": "dreamzero-tiny"}, {"attention": "sdpa"}, marks=pytest.mark.slow),
])
def test_workloads_are_faithful_to_themselves_and_train_as_if_it_never_ran(name, params, knobs):
    cls = registry.resolve(name)
    values = {**knob_table.defaults_for(cls), "precision": "bf16_mixed", "recompute": "full", **knobs}
    losses = []
    for measure in (True, False):
        torch.manual_seed(0)
        workload = cls(params, values, CPU)
        step = training.prepare(workload, values, CPU)
        step(workload.batch(0))
        if measure:
            step.fidelity.start_window()
            out = step.fidelity.compute.summary()
        losses.append([float(step(workload.batch(i))[0]) for i in (1, 2)])
    assert out["extra"]["compute_fidelity"] == "faithful"
    assert out["metrics"]["compute_gradient_cosine"] == pytest.approx(1.0, abs=1e-12)
    assert losses[0] == losses[1]  # the same random draws and weights after it: the steps do not see it


@pytest.mark.slow  # a tiny model's steps to a verdict: 8 s
def test_pure_bf16_weights_are_compared_against_fp32_weights():
    cls = registry.resolve("dreamzero")
    values = {**knob_table.defaults_for(cls), "precision": "bf16", "attention": "sdpa"}
    out = measured(cls({"preset": "dreamzero-tiny"}, values, CPU), values)
    # its norms and modulation in bf16 move the gradients a little, not beyond the rule
    assert 0.99 < out["metrics"]["compute_gradient_cosine"] < 1.0
    assert out["extra"]["compute_fidelity"] == "faithful"


def test_the_record_keeps_compute_fidelity_and_show_says_it(tmp_path):
    spec = PointSpec(workload=TINY, params={}, knobs={"precision": "bf16_mixed"}, steps=Steps(warmup=1, measure=2),
                     device="cpu", timeout=300)
    out = InProcessLauncher().run(spec, Path(tempfile.gettempdir()))
    assert out.status == "ok", out.reason
    assert {"compute_gradient_cosine", "compute_gradient_error", "compute_sampled_tensors"} <= FIGURES
    assert out.metrics["compute_gradient_cosine"] == pytest.approx(1.0, abs=1e-12)
    assert out.extra["compute_fidelity"] == "faithful" and out.extra["fidelity"] == "faithful"
    record = Record(suite="s", run_id="r", point_id="p", workload=TINY, knobs=spec.knobs, status=out.status,
                    metrics=out.metrics, series=out.series, extra=out.extra)
    back = Record.from_json(record.to_json())
    assert back.metrics["compute_gradient_error"] == 0.0
    assert back.extra["compute_fidelity_groups"] == out.extra["compute_fidelity_groups"]
    row = point_summary(records_to_frame([back.to_json()])).iloc[0]
    assert "fidelity" in KEY_COLUMNS and row["fidelity"] == "faithful (1.00); compute faithful (1.0000)"


@pytest.mark.slow
def test_two_fsdp2_ranks_gather_and_average_what_they_compare(tmp_path, in_repo, monkeypatch):
    from tests.test_distributed import run_suite

    records = run_suite(tmp_path, monkeypatch, "compute-2proc", f"""
workload: {{name: "{TINY}"}}
knobs: {{precision: bf16_mixed, sharding: fsdp2_full}}
steps: {{warmup: 1, measure: 2}}
timeout: 180
devices: {{type: cpu, nproc: 2}}
""")
    (record,) = records
    assert record["status"] == "ok", record["reason"]
    assert record["extra"]["compute_fidelity"] == "faithful"
    assert record["metrics"]["compute_gradient_cosine"] == pytest.approx(1.0, abs=1e-12)


@pytest.mark.gpu
def test_its_passes_stay_out_of_the_measured_peak_memory(monkeypatch):
    """A reference pass that holds a GiB more leaves the measured peak as it was: the passes run before
    the peak is reset. (Both points measure: one whose compute fidelity does not run keeps other
    memory, 16 MiB more on an H100 at width 1024, and would not say what this test asks.)"""
    reference_pass = compute_fidelity.ComputeFidelity._reference_gradients

    def peak(held_gib: int) -> float:
        def holding(self, batch, no_grad):  # a reference far larger than the point's step
            held = torch.empty(held_gib << 28, device="cuda")  # noqa: F841 (held through the pass)
            return reference_pass(self, batch, no_grad)

        monkeypatch.setattr(compute_fidelity.ComputeFidelity, "_reference_gradients", holding)
        spec = PointSpec(workload=TINY, params={"width": 1024}, knobs={"precision": "bf16", "mbs": 64},
                         steps=Steps(warmup=1, measure=2), device="cuda", timeout=300)
        out = InProcessLauncher().run(spec, Path(tempfile.gettempdir()))
        assert out.status == "ok", out.reason
        assert out.extra["compute_fidelity"] == "faithful"
        return out.metrics["peak_mem_allocated_gib"]

    assert peak(1) == pytest.approx(peak(0), abs=1 / 1024)  # GiB: the reference's GiB is not in it


def test_the_fidelity_cell_shows_the_compute_verdict_beside():
    assert with_compute("faithful (1.00)", "lossy", 0.97123) == "faithful (1.00); compute lossy (0.9712)"
    assert with_compute("faithful (1.00)", None, float("nan")) == "faithful (1.00)"  # older records
    assert with_compute("lossy (0.15)", "faithful", float("nan")) == "lossy (0.15); compute faithful"
    # a record whose reference did not fit (Wall-X's FP8 points at mbs 48-64 on an H200) says so
    assert with_compute("faithful (1.00)", None, float("nan"), skipped=True) == "faithful (1.00); compute not measured"
    assert with_compute("faithful (1.00)", "lossy", float("nan"), skipped=True) == "faithful (1.00); compute lossy"


def test_the_reference_is_freed_before_the_measured_steps_without_waiting_for_a_collection():
    """Wall-X's model (transformers') holds reference cycles: left to the cyclic collector, the
    reference and its gradients lived into the measured steps (an H100 ran out of memory there)."""
    import gc
    import weakref

    cls = registry.resolve("wallx")
    values = {**knob_table.defaults_for(cls), "precision": "bf16_mixed"}
    workload = cls({"preset": "wallx-tiny"}, values, CPU)
    step = training.prepare(workload, values, CPU)
    step(workload.batch(0))
    reference = weakref.ref(step.fidelity.compute.reference.parts.model)
    gc.disable()
    try:
        step.fidelity.start_window()
        assert reference() is None
    finally:
        gc.enable()
    assert step.fidelity.compute.summary()["extra"]["compute_fidelity"] == "faithful"


@pytest.mark.parametrize("warmup, measured_at", [(3, 2), (1, 1), (0, 0)])
def test_compute_fidelity_runs_before_the_last_warm_up_step_after_the_first(monkeypatch, warmup, measured_at):
    """Its passes give back the cache they grew: the step after them allocates again, so that step
    is a warm-up one wherever there are two or more (the first compiles and captures: never before it)."""
    from benchbay.collect.compute_fidelity import ComputeFidelity
    from benchbay.launch import worker
    from benchbay.launch.base import PointSpec
    from benchbay.record import Status
    from benchbay.suite import Steps

    at = []
    measure = ComputeFidelity.measure
    monkeypatch.setattr(ComputeFidelity, "measure", lambda self, step: (at.append(step), measure(self, step))[1])
    monkeypatch.setattr(worker, "rank_env", lambda: (0, 1, 0))
    spec = PointSpec(workload="tests.fixtures.tinywork:Tiny", params={}, knobs={"mbs": 2},
                     steps=Steps(warmup=warmup, measure=2), device="cpu", timeout=60)
    result = worker.run(spec)
    assert result.status == Status.OK, result.reason
    assert at[0] == measured_at  # the first call measures; a later one finds its figures
    assert result.extra["compute_fidelity"] == "faithful"


def test_a_reference_that_runs_out_of_memory_goes_again_with_every_block_recomputed(monkeypatch):
    """The estimate takes the point's compiled working memory for the reference's eager one, which holds
    more (Wall-X at mbs 48 on an H200 ran out): the reference goes once more, every block recomputed,
    from a fresh copy and the same draws, and measures the same gradients."""
    passes = []
    first_pass = compute_fidelity.ComputeFidelity._reference_gradients

    def out_of_memory_unless_full(self, batch, no_grad):
        passes.append(self.reference_recompute)
        if self.reference_recompute != "full":
            first_pass(self, batch, no_grad)  # the pass runs (and fills its copy), then the card is full
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 96.00 MiB.")
        return first_pass(self, batch, no_grad)

    monkeypatch.setattr(compute_fidelity.ComputeFidelity, "_reference_gradients", out_of_memory_unless_full)
    out = measured(*tiny(recompute="off"))
    assert passes == ["off", "full"]
    assert out["extra"]["compute_fidelity"] == "faithful"
    assert out["metrics"]["compute_gradient_cosine"] == pytest.approx(1.0, abs=1e-12)
    assert "recompute=full" in out["extra"]["compute_fidelity_sample"]


def test_a_reference_that_runs_out_of_memory_recomputing_every_block_says_so(monkeypatch):
    passes = []

    def out_of_memory(self, batch, no_grad):
        passes.append(self.reference_recompute)
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 96.00 MiB.")

    monkeypatch.setattr(compute_fidelity.ComputeFidelity, "_reference_gradients", out_of_memory)
    out = measured(*tiny(recompute="full"))  # nothing else to try
    assert passes == ["full"]
    assert out["extra"]["compute_fidelity_skipped"].startswith("not measured: the reference pass failed: OutOfMemory")


def test_a_reference_that_fails_otherwise_does_not_go_again(monkeypatch):
    passes = []

    def broken(self, batch, no_grad):
        passes.append(self.reference_recompute)
        raise RuntimeError("the reference cannot run this")

    monkeypatch.setattr(compute_fidelity.ComputeFidelity, "_reference_gradients", broken)
    out = measured(*tiny(recompute="off"))
    assert passes == ["off"]
    assert out["extra"]["compute_fidelity_skipped"] == (
        "not measured: the reference pass failed: RuntimeError: the reference cannot run this")
