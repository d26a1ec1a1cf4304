"""The float8 knob: refused without FP8 tensor cores, with its reason; which linears it converts and
which it keeps in bf16 on each workload, at toy and at real width (real width built on the meta
device: no memory, no kernels); the conversion itself on the meta device; training with it on a GPU."""

import copy

import pytest
import torch
from torch import nn
from torchao.float8.float8_linear import Float8Linear

from benchbay import knobs as knob_table
from benchbay.knobs import float8, rules
from benchbay.launch import training
from benchbay.launch.harness import harness_for
from benchbay.runner import cannot_run
from benchbay.suite import load
from benchbay.workloads import registry
from tests.fixtures.tinywork import Tiny

CPU, META = torch.device("cpu"), torch.device("meta")
RECIPES = ["tensorwise", "rowwise", "rowwise_with_gw_hp"]


def workload(name: str, device: torch.device, **params):
    cls = registry.resolve(name)
    return cls(params, knob_table.defaults_for(cls), device)


def built(name: str, device: torch.device, **params):
    return workload(name, device, **params).build()


def fp8(recipe: str, mbs: int, pad_rows: bool = False) -> dict:
    """The knobs float8.skip_reason reads, as a resolved point gives them all."""
    return {"float8": recipe, "mbs": mbs, "float8_pad_rows": pad_rows}


def _skip_without_fp8_cores() -> None:
    """In a ``gpu`` test (CUDA is there): skip below compute capability 8.9."""
    if torch.cuda.get_device_capability() < float8.MIN_CAPABILITY:
        pytest.skip("needs FP8 tensor cores")


@pytest.mark.parametrize("recipe", RECIPES)
def test_refused_on_a_cpu_with_its_reason(recipe):
    values = {**knob_table.defaults_for(Tiny), "float8": recipe}
    reason = rules.skip_reason(Tiny, values, "cpu", 1)
    assert reason.startswith(f"float8={recipe}") and "compute capability 8.9" in reason and "(running on cpu)" in reason
    assert harness_for(Tiny({}, values, CPU), 1).skip_reason() == reason  # the worker says the same
    assert rules.skip_reason(Tiny, {**values, "float8": "off"}, "cpu", 1) is None


def test_a_cpu_suite_skips_the_float8_points_before_their_process(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("name: s\nworkload: {name: dreamzero, params: {preset: dreamzero-tiny}}\n"
                    "sweep: {grid: {float8: ['off', tensorwise]}}\n")
    points = load(path).expand("cpu")
    assert [cannot_run(p, "cpu", 1) is None for p in points] == [True, False]
    assert knob_table.check_value(Tiny, "float8", "fp8") == f"one of {['off', *RECIPES]}"


def test_below_compute_capability_8_9_it_is_refused(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))  # an A100
    reason = float8.skip_reason(fp8("rowwise", 1), torch.device("cuda", 0), {})
    assert "compute capability 8.9 or newer (this one: 8.0)" in reason
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))  # an H200
    assert float8.skip_reason(fp8("rowwise", 1), torch.device("cuda", 0), {}) is None


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_a_batch_whose_rows_no_fp8_weight_gradient_takes_is_refused(recipe, monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    cuda, rows = torch.device("cuda", 0), {"attn.q": 15940, "attn.k": 257}
    for mbs in (1, 2, 3):
        reason = float8.skip_reason(fp8(recipe, mbs), cuda, rows)
        assert reason.startswith(f"float8={recipe} at mbs {mbs} converts no linear")
        assert f"(15940 x {mbs}, 257 x {mbs})" in reason
        assert reason.endswith("use rowwise_with_gw_hp, float8_pad_rows=True or an mbs that is a multiple of 4")
        assert float8.skip_reason(fp8(recipe, mbs, pad_rows=True), cuda, rows) is None
    assert float8.skip_reason(fp8(recipe, 16), cuda, rows) is None  # attn.q fits from 4, attn.k at 16
    assert float8.skip_reason(fp8(recipe, 4), cuda, rows) is None
    # the weight gradient's GEMM in bf16 takes any rows; a workload that declares none is taken to fit
    assert float8.skip_reason(fp8("rowwise_with_gw_hp", 1), cuda, rows) is None
    assert float8.skip_reason(fp8(recipe, 1), cuda, {}) is None


def test_the_14b_at_mbs_1_converts_only_the_prompts_keys_and_values():
    parts = built("dreamzero", META, preset="dreamzero-14b", layers=1)
    # 15,940 tokens a sample, 512 of the prompt
    rows = workload("dreamzero", META, preset="dreamzero-14b").block_linear_rows()
    plan = float8.plan(parts, "tensorwise", rows)
    assert plan.converted == ["blocks.0.cross_attn.k", "blocks.0.cross_attn.v"]
    assert len(kept(plan, float8.ROWS)) == 10
    assert len(float8.plan(parts, "rowwise_with_gw_hp", rows).converted) == 12
    # padded, every one converts under tensorwise: the ten over the 15,940 rows and CLIP's 257
    padded = float8.plan(parts, "tensorwise", rows, pad_rows=True)
    assert len(padded.converted) == 12 and kept(padded, float8.ROWS) == []
    assert padded.padded == [f for f in padded.converted if f not in ("blocks.0.cross_attn.k", "blocks.0.cross_attn.v")]
    assert padded.facts()["float8_padded"] == 10


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_padded_rows_change_no_output_and_no_gradient(recipe):
    """On the CPU torchao's FP8 GEMM takes any rows: the padded linear must give the unpadded one's
    outputs and gradients exactly (zero rows raise no amax and add nothing to the weight gradient)."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    torch.manual_seed(0)
    plain = nn.Sequential(nn.Linear(64, 48)).to(torch.bfloat16)
    padded = copy.deepcopy(plain)
    for model in (plain, padded):
        convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name(recipe))
    padded[0].__class__ = float8._rows_padded(type(padded[0]))
    x = torch.randn(3, 10, 64, dtype=torch.bfloat16)  # 30 rows: 2 of padding
    outs = []
    for model in (plain, padded):
        given = x.clone().requires_grad_()
        out = model(given)
        (out.float() ** 2).sum().backward()
        outs.append((out, given.grad, model[0].weight.grad, model[0].bias.grad))
    assert outs[1][0].shape == (3, 10, 48)
    for a, b in zip(*outs, strict=True):
        assert torch.equal(a, b)


@pytest.mark.gpu
@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
def test_padded_rows_run_compiled_on_the_gpu_as_zero_rows_given_by_hand(recipe):
    """On CUDA the FP8 weight gradient refuses 30 rows: padded, the linear runs, compiled, and gives
    what the same linear gives for those rows with 2 zero rows appended by hand."""
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    _skip_without_fp8_cores()
    torch.manual_seed(0)
    by_hand = nn.Sequential(nn.Linear(1024, 512)).to("cuda", torch.bfloat16)
    padded = copy.deepcopy(by_hand)
    for model in (by_hand, padded):
        convert_to_float8_training(model, config=Float8LinearConfig.from_recipe_name(recipe))
    padded[0].__class__ = float8._rows_padded(type(padded[0]))
    x = torch.randn(3, 10, 1024, device="cuda", dtype=torch.bfloat16)
    out_hand = torch.compile(by_hand)(nn.functional.pad(x.reshape(30, 1024), (0, 0, 0, 2)))[:30].reshape(3, 10, 512)
    out_padded = torch.compile(padded)(x)
    for out in (out_hand, out_padded):
        (out.float() ** 2).sum().backward()
    assert torch.equal(out_hand, out_padded)
    assert torch.equal(by_hand[0].weight.grad, padded[0].weight.grad)


def test_padding_is_refused_where_it_would_not_act():
    cls = registry.resolve("dreamzero")
    values = {**knob_table.defaults_for(cls), "float8_pad_rows": True}
    for recipe in ("off", "rowwise_with_gw_hp"):  # the latter's weight gradient takes any rows
        assert "acts only under float8=tensorwise or rowwise" in rules.skip_reason(
            cls, {**values, "float8": recipe}, "cuda", 1)
    parts = built("dreamzero", META, preset="dreamzero-5b", layers=1)
    rows = workload("dreamzero", META, preset="dreamzero-5b").block_linear_rows()
    with pytest.raises(rules.Refused, match="at mbs 16 every converted linear's rows are a multiple of 16"):
        float8.apply(parts, {**values, "float8": "tensorwise", "mbs": 16}, rows)
    facts = float8.apply(parts, {**values, "float8": "tensorwise", "mbs": 12}, rows)  # 257 x 12 rows padded
    assert facts["float8_converted"] == 12 and facts["float8_padded"] == 2
    assert type(parts.model.blocks[0].cross_attn.k_img).__name__ == "RowsPadded"
    assert type(parts.model.blocks[0].cross_attn.k) is Float8Linear


def kept(plan: float8.Plan, reason: str) -> list[str]:
    return plan.facts()["float8_kept_linears"].get(reason, [])


@pytest.mark.parametrize("name, preset, outside", [
    ("dreamzero", "dreamzero-tiny", 15),  # text/time/image/state/action embeddings, time_projection, heads
    ("wallx", "wallx-tiny", 8),  # vision merger, lm_head, the flow head
])
def test_at_toy_width_every_linear_stays_in_bf16(name, preset, outside):
    parts = built(name, CPU, preset=preset)
    linears = sum(isinstance(m, nn.Linear) for m in parts.model.modules())
    for recipe in RECIPES:
        plan = float8.plan(parts, recipe)
        assert plan.converted == []
        assert len(plan.kept[float8.OUTSIDE]) == outside
        assert len(plan.kept[float8.SMALL]) == linears - outside  # 64 to 256 wide: below torchao's thresholds
        assert plan.facts()["float8_kept"] == linears


def test_dreamzero_at_real_width_converts_every_block_linear_and_keeps_the_rest():
    parts = built("dreamzero", META, preset="dreamzero-5b", layers=2)
    block = ["self_attn.q", "self_attn.k", "self_attn.v", "self_attn.o", "cross_attn.q", "cross_attn.k",
             "cross_attn.v", "cross_attn.o", "cross_attn.k_img", "cross_attn.v_img", "ffn.0", "ffn.2"]
    rows = workload("dreamzero", META, preset="dreamzero-5b").block_linear_rows()
    assert set(rows) == set(block) and rows["cross_attn.k_img"] == 257 and rows["ffn.0"] == 1000
    for recipe in RECIPES:
        plan = float8.plan(parts, recipe, {name: r * 16 for name, r in rows.items()})  # mbs 16: all fit
        assert plan.converted == [f"blocks.{i}.{name}" for i in range(2) for name in block]
        assert {"time_projection.1", "head.head", "action_decoder.2", "text_embedding.0"} <= set(
            kept(plan, float8.OUTSIDE))
        assert kept(plan, float8.SMALL) == kept(plan, float8.NOT_16) == kept(plan, float8.ROWS) == []
        # mbs 12: CLIP's 257 tokens make 3,084 rows, which an FP8 weight gradient cannot take (H200)
        at_12 = float8.plan(parts, recipe, {name: r * 12 for name, r in rows.items()})
        if recipe == "rowwise_with_gw_hp":
            assert at_12.converted == plan.converted
        else:
            assert kept(at_12, float8.ROWS) == ["blocks.*.cross_attn.k_img", "blocks.*.cross_attn.v_img"]
            assert len(at_12.converted) == 2 * 10


def test_wallx_at_real_width_keeps_odd_and_small_shapes():
    parts = built("wallx", META, preset="wallx-3b", layers=1)
    tensorwise, rowwise = float8.plan(parts, "tensorwise"), float8.plan(parts, "rowwise")
    layer = "vlm.model.language_model.layers.*"
    vision_mlp = [f"vlm.model.visual.blocks.*.mlp.{p}_proj" for p in ("gate", "up", "down")]
    assert kept(tensorwise, float8.NOT_16) == vision_mlp  # 3420 wide
    assert kept(tensorwise, float8.SMALL) == [f"{layer}.self_attn.k_proj", f"{layer}.self_attn.v_proj"]  # 256 wide
    assert len(tensorwise.converted) == 32 * 2 + 8  # vision qkv and proj; q, o, both experts' MLPs
    # rowwise's thresholds keep every GEMM of 2048 outputs or fewer: the main MLP's gate and up convert
    assert rowwise.converted == [f"vlm.model.language_model.layers.0.mlp.experts.0.{p}_proj" for p in ("gate", "up")]
    assert "vlm.lm_head" in kept(rowwise, float8.OUTSIDE)
    assert float8.plan(parts, "rowwise_with_gw_hp").converted == rowwise.converted


def test_conversion_swaps_the_planned_linears_on_the_meta_device():
    parts = built("wallx", META, preset="wallx-3b", layers=1)
    values = {**knob_table.defaults_for(registry.resolve("wallx")), "float8": "tensorwise"}
    planned = float8.plan(parts, "tensorwise")
    facts = float8.apply(parts, values, {})
    swapped = [name for name, m in parts.model.named_modules() if isinstance(m, Float8Linear)]
    assert swapped == planned.converted and facts["float8_converted"] == len(swapped)
    assert facts["float8_kept"] == sum(type(m) is nn.Linear for m in parts.model.modules())
    assert float8.apply(built("wallx", META, preset="wallx-tiny"), {**values, "float8": "off"}, {}) == {}


def test_a_plan_that_converts_nothing_refuses_the_point_as_it_is_applied():
    from benchbay.launch.worker import _failure
    from benchbay.record import Status

    values = {**knob_table.defaults_for(registry.resolve("dreamzero")), "float8": "tensorwise", "mbs": 2}
    with pytest.raises(rules.Refused, match=r"float8=tensorwise at mbs 2 converts no linear of this model "
                                            r"\(15 outside the repeated blocks.*; 24 below torchao's") as refused:
        float8.apply(built("dreamzero", META, preset="dreamzero-tiny"), values, {})  # 64 to 256 wide
    assert _failure(refused.value, -1, CPU) == {"status": Status.SKIPPED, "reason": str(refused.value)}


def test_wallx_declares_its_rows_and_converts_all_at_a_multiple_of_16():
    # 255 tokens a sample: 32 of them actions; 2 cameras of 18 x 18 patches
    rows = workload("wallx", META, preset="wallx-3b", action_horizon=32).block_linear_rows()
    assert rows["self_attn.q_proj"] == 255 and rows["mlp.experts.0.up_proj"] == 223
    assert rows["mlp.experts.1.up_proj"] == 32 and rows["attn.qkv"] == rows["mlp.down_proj"] == 648
    parts = built("wallx", META, preset="wallx-3b", layers=1)
    at_48 = float8.plan(parts, "tensorwise", {k: r * 48 for k, r in rows.items()})
    assert len(at_48.converted) == 32 * 2 + 8 and kept(at_48, float8.ROWS) == []
    at_52 = float8.plan(parts, "tensorwise", {k: r * 52 for k, r in rows.items()})
    assert len(at_52.converted) == 32 * 2 + 3  # vision and the action expert; attention and the VLM's MLP kept
    assert "vlm.model.language_model.layers.*.mlp.experts.0.up_proj" in kept(at_52, float8.ROWS)


def test_fsdp2_gathers_tensorwise_weights_in_fp8_only():
    values = knob_table.defaults_for(Tiny)
    assert float8.config("tensorwise", {**values, "sharding": "fsdp2_full"}).enable_fsdp_float8_all_gather
    assert not float8.config("tensorwise", values).enable_fsdp_float8_all_gather
    assert not float8.config("rowwise", {**values, "sharding": "fsdp2_full"}).enable_fsdp_float8_all_gather
    assert not float8.config("tensorwise", {**values, "sharding": "fsdp2_full",
                                            "offload": "optimizer"}).enable_fsdp_float8_all_gather


@pytest.mark.gpu
@pytest.mark.parametrize("recipe", RECIPES)
def test_fp8_blocks_train_and_record_what_they_converted(recipe):
    cuda = torch.device("cuda")
    _skip_without_fp8_cores()
    # FP8 GEMMs need every dimension a multiple of 16: the batch's rows too (the weight gradient's inner one)
    values = {**knob_table.defaults_for(Tiny), "float8": recipe, "precision": "bf16_mixed", "mbs": 16}
    workload = Tiny({"width": 4096, "depth": 2}, values, cuda)
    step = training.prepare(workload, values, cuda)
    assert sum(isinstance(m, Float8Linear) for m in step.model.modules()) == 2  # the blocks; the head stays
    step(workload.batch(0))
    step.fidelity.start_window()
    losses = [float(step(workload.batch(i))[0]) for i in range(1, 4)]
    assert all(map(torch.isfinite, torch.tensor(losses)))
    summary = step.fidelity.summary()
    assert summary["extra"]["float8_converted"] == 2 and summary["extra"]["float8_kept"] == 1
    assert summary["extra"]["compute_fidelity"] in ("faithful", "lossy")
    assert summary["metrics"]["compute_gradient_cosine"] < 1.0  # FP8 GEMMs: not the reference's arithmetic


# --- encoders_float8: FP8 inference of DreamZero's frozen encoders --------------------------------

def _dreamzero(**knobs):
    from benchbay.workloads.dreamzero.workload import DreamZero

    values = {**knob_table.defaults_for(DreamZero), "precision": "bf16", "attention": "sdpa", **knobs}
    return DreamZero({"preset": "dreamzero-tiny"}, values, CPU), values


def test_fp8_encoders_are_refused_on_a_cpu_and_where_no_encoder_runs_in_the_step():
    workload, _ = _dreamzero(encoders_float8="rowwise")
    assert "needs a CUDA GPU of compute capability 8.9" in workload.skip_reason()
    cached, _ = _dreamzero(encoders_float8="rowwise", frozen_encoders="cached")
    assert "needs a CUDA GPU" in cached.skip_reason()  # refused for the device first, whatever else


def test_fp8_encoders_convert_their_linears_whose_sides_are_multiples_of_16():
    from benchbay.knobs import float8_inference

    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 24), nn.Conv1d(4, 4, 3))
    assert float8_inference.plan(model) == (["0"], ["2"])  # 24 outputs: kept; the conv is not a linear


def test_fp8_encoders_leave_inductors_settings_as_they_were(monkeypatch):
    """torchao's inference configs switch on exhaustive kernel tuning for the whole process unless told
    not to: why the trained blocks' compile did not end (H200; told not to, it did). quantize_ is planted:
    no FP8 on a CPU."""
    import torchao.quantization

    from benchbay.knobs import float8_inference

    seen = []
    monkeypatch.setattr(torchao.quantization, "quantize_", lambda module, config, filter_fn: seen.append(config))
    counts = float8_inference.convert(nn.Sequential(nn.Linear(32, 64)), "tensorwise")
    assert counts == {"converted": 1, "kept": 0} and seen[0].set_inductor_config is False


@pytest.mark.slow  # five Wan VAE encodes on a CPU: ~13 s a case
@pytest.mark.parametrize("perturbed, expected", [(False, "faithful"), (True, "lossy")])
def test_the_encoders_outputs_against_bf16_join_compute_fidelity(monkeypatch, perturbed, expected):
    """The conversion is planted (no FP8 kernels on a CPU): left as it is, the encoders' outputs match
    their bf16 selves; with their linears' weights changed, they do not, and the point's compute
    fidelity says lossy although its reference (which runs the same encoders) agrees with it."""
    from benchbay.collect.compute_fidelity import FROZEN_VERDICT
    from benchbay.knobs import float8_inference

    def planted(module, recipe):
        if perturbed:
            with torch.no_grad():
                for child in module.modules():
                    if isinstance(child, nn.Linear):
                        child.weight.mul_(1.5)
        return {"converted": 1, "kept": 0}

    monkeypatch.setattr(float8_inference, "convert", planted)
    workload, values = _dreamzero(encoders_float8="rowwise")
    torch.manual_seed(0)
    step = training.prepare(workload, values, CPU)
    step(workload.batch(0))
    step.fidelity.start_window()
    extra = step.fidelity.compute.summary()["extra"]
    assert extra[FROZEN_VERDICT] == expected and extra["encoders_float8_converted"] == 1
    assert set(extra["frozen_outputs_fidelity_by_output"]) >= {"latents", "text", "image"}
    assert extra["compute_fidelity"] == expected


@pytest.mark.gpu
@pytest.mark.parametrize("recipe", ["rowwise", "tensorwise"])
def test_fp8_encoders_run_in_the_step_and_say_what_they_changed(recipe):
    """On the device: the tiny preset's encoders quantized by torchao, a step trains, and the record has
    the encoders' output fidelity (a verdict either way: FP8 is not bf16's arithmetic)."""
    import torch._inductor.config as inductor_config

    from benchbay.collect.compute_fidelity import FROZEN_VERDICT
    from benchbay.workloads.dreamzero.workload import DreamZero

    cuda = torch.device("cuda")
    _skip_without_fp8_cores()
    values = {**knob_table.defaults_for(DreamZero), "precision": "bf16", "attention": "sdpa",
              "encoders_float8": recipe, "mbs": 2}
    workload = DreamZero({"preset": "dreamzero-tiny"}, values, cuda)
    assert workload.skip_reason() is None
    step = training.prepare(workload, values, cuda)
    assert torch.isfinite(step(workload.batch(0))[0])
    step.fidelity.start_window()
    extra = step.fidelity.compute.summary()["extra"]
    assert extra["encoders_float8_converted"] > 0 and extra[FROZEN_VERDICT] in ("faithful", "lossy")
    assert not inductor_config.coordinate_descent_tuning  # the blocks' compile tunes as without FP8
