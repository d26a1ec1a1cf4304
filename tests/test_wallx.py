"""The wallx workload: the tiny preset trains on CPU through the same code as the 3B one; routing,
masks, parameter counts, FLOPs, reproducibility and knob handling. CUDA-only paths skip cleanly."""

from __future__ import annotations

import pytest
import torch

from benchbay import knobs as knob_table
from benchbay.launch import training
from benchbay.launch.harness import harness_for
from benchbay.workloads.wallx.attention import language_mask
from benchbay.workloads.wallx.layout import SequenceLayout
from benchbay.workloads.wallx.workload import WallX

CPU = torch.device("cpu")
TINY = {"preset": "wallx-tiny"}
TINY_KNOBS = {"attention": "sdpa", "vision_attention": "sdpa", "lm_head": "all"}


def build(knobs=None, params=None, device=CPU, seed=0):
    torch.manual_seed(seed)
    workload = WallX({**TINY, **(params or {})}, {"mbs": 2, **(knobs or {})}, device)
    return workload, workload.build()


def train(workload, parts, steps, batch=None):
    """The harness's step: loss -> backward -> clip 1.0 -> AdamW; returns losses and grad norms."""
    params = [p for p in parts.model.parameters() if p.requires_grad]
    opt = workload.optimizer(params)
    batch = batch if batch is not None else workload.batch(0)
    losses, norms = [], []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss, _ = workload.loss(parts.model, batch)
        loss.backward()
        norms.append(torch.nn.utils.clip_grad_norm_(params, 1.0).item())
        opt.step()
        losses.append(loss.item())
    return losses, norms


def test_tiny_trains_and_gradients_reach_both_experts_and_the_vision_tower():
    workload, parts = build()
    losses, _ = train(workload, parts, steps=8)
    assert all(torch.isfinite(torch.tensor(losses)))
    assert losses[-1] < losses[0]
    grads = {name: p.grad for name, p in parts.model.named_parameters()}
    for layer in range(2):
        for expert in (0, 1):
            g = grads[f"vlm.model.language_model.layers.{layer}.mlp.experts.{expert}.down_proj.weight"]
            assert g is not None and g.abs().sum() > 0
    for name, g in grads.items():
        if name.startswith("vlm.model.visual."):
            assert g is not None and g.abs().sum() > 0, name
    for name in ("w1", "w2", "w3", "action_proj_back", "proprio_proj"):
        assert grads[f"action_head.{name}.weight"].abs().sum() > 0


def test_regions_are_the_decoder_layers_and_vision_blocks():
    workload, parts = build(params={"layers": 3})
    lm = parts.model.vlm.model.language_model
    assert parts.regions["backbone"] == list(lm.layers) and len(lm.layers) == 3
    assert parts.regions["vision"] == list(parts.model.vlm.model.visual.blocks)
    assert set(parts.regions) == set(WallX.regions)
    assert parts.frozen == []


def test_routing_sends_action_tokens_and_only_them_to_the_action_expert():
    workload, parts = build()
    horizon = workload.params["action_horizon"]
    seen: dict[str, torch.Tensor] = {}
    hooks = []
    for i, layer in enumerate(parts.model.vlm.model.language_model.layers):
        hooks.append(layer.mlp.register_forward_hook(lambda m, a, o, i=i: seen.update({f"in{i}": a[0], f"out{i}": o})))
        for e, expert in enumerate(layer.mlp.experts):
            hooks.append(expert.register_forward_hook(lambda m, a, o, i=i, e=e: seen.update({f"e{e}.{i}": a[0]})))
    with torch.no_grad():
        workload.loss(parts.model, workload.batch(0))
    for h in hooks:
        h.remove()
    seq = workload.layout.length
    action = torch.arange(seq - horizon, seq)        # the layout puts the action chunk last
    other = torch.arange(seq - horizon)
    for i, layer in enumerate(parts.model.vlm.model.language_model.layers):
        x = seen[f"in{i}"]
        assert seen[f"e1.{i}"].shape == (2, horizon, x.shape[-1])
        torch.testing.assert_close(seen[f"e1.{i}"], x[:, action], rtol=0, atol=0)
        torch.testing.assert_close(seen[f"e0.{i}"], x[:, other], rtol=0, atol=0)
        with torch.no_grad():
            torch.testing.assert_close(seen[f"out{i}"][:, action], layer.mlp.experts[1](x[:, action]))
            torch.testing.assert_close(seen[f"out{i}"][:, other], layer.mlp.experts[0](x[:, other]))


def expected_mask(types: str) -> torch.Tensor:
    """Written from the spec: causal, and action tokens ('A') see every action token."""
    n = len(types)
    return torch.tensor([[k <= q or (types[q] == "A" and types[k] == "A") for k in range(n)] for q in range(n)])


def test_attention_mask_matches_the_spec_element_by_element():
    layout = SequenceLayout.wallx(prompt=2, image=2, cameras=1, instruction=1, actions=3)
    types = "TTTIITTPAAA"
    assert "".join("TIPA"[t] for t in layout.types) == types
    expected = expected_mask(types)
    sdpa = language_mask("sdpa", layout, CPU)
    assert sdpa.dtype == torch.bool and sdpa.shape == (1, 1, 11, 11)
    assert torch.equal(sdpa[0, 0], expected)
    eager = language_mask("eager", layout, CPU)[0, 0]
    assert torch.equal(eager == 0, expected) and (eager[~expected] < -1e30).all()
    block = language_mask("flex", layout, CPU)
    q, k = torch.meshgrid(torch.arange(11), torch.arange(11), indexing="ij")
    assert torch.equal(block.mask_mod(0, 0, q, k), expected)
    assert language_mask("flash", layout, CPU) is None
    assert layout.action_tail() == 3


def test_the_models_mask_covers_the_whole_tiny_sample():
    workload, parts = build({"attention": "sdpa"})
    types = "".join("TIPA"[t] for t in workload.layout.types)
    assert types.endswith("P" + "A" * 32) and types.count("I") == 2 * 16
    assert torch.equal(parts.model.attention_mask[0, 0], expected_mask(types))


def test_3b_preset_on_meta_has_4_2b_parameters():
    workload = WallX({"preset": "wallx-3b"}, {"mbs": 1}, torch.device("meta"))
    parts = workload.build()
    named = dict(parts.model.named_parameters())
    total = sum(p.numel() for p in named.values())
    experts = sum(p.numel() for n, p in named.items() if ".mlp.experts.1." in n)
    head = sum(p.numel() for n, p in named.items() if n.startswith("action_head."))
    assert total == pytest.approx(4.2e9, rel=0.02)
    assert experts == pytest.approx(0.45e9, rel=0.02)
    assert total - experts - head == pytest.approx(3.76e9, rel=0.02)
    assert len(parts.regions["backbone"]) == 36 and len(parts.regions["vision"]) == 32
    assert parts.model.vlm.lm_head.weight is parts.model.vlm.model.language_model.embed_tokens.weight


def test_3b_shapes_and_flops():
    workload = WallX({"preset": "wallx-3b"}, {"mbs": 1}, CPU)
    assert workload.preset.resized_image == 252 and workload.preset.image_tokens == 81
    assert workload.layout.length == 255 and workload.extra_metrics()["text_tokens_per_sample"] == 60
    flops = workload.flops_per_sample()
    assert flops["train"] == pytest.approx(6.9e12, rel=0.03) and flops["frozen"] == 0
    short = WallX({"preset": "wallx-3b", "action_horizon": 10}, {"mbs": 1}, CPU)
    assert short.layout.length == 233
    text_only = WallX({"preset": "wallx-3b"}, {"lm_head": "text"}, CPU).flops_per_sample()["train"]
    assert text_only < flops["train"]


def test_batch_shapes_follow_the_preset_and_mbs():
    workload = WallX(TINY, {"mbs": 3}, CPU)
    batch = workload.batch(5)
    assert batch.pixel_values.shape == (3 * 2 * 64, 3 * 2 * 4 * 4)
    assert batch.actions.shape == batch.dof_mask.shape == (3, 32, 20)
    assert batch.dof_mask[0, 0].tolist() == [1.0] * 7 + [0.0] * 13
    assert batch.proprio_mask[0].sum() == 8
    assert batch.text_ids.shape == batch.text_labels.shape == (3, workload.preset.text_tokens)
    assert len(batch.vision.cu_window_seqlens) - 1 == 6 * 4        # four windows per image
    assert torch.equal(workload.batch(5).text_ids, batch.text_ids)  # batches depend on the step only


def test_eager_runs_repeat_bit_for_bit():
    runs = []
    for _ in range(2):
        workload, parts = build({"attention": "eager", "vision_attention": "eager"}, seed=3)
        torch.manual_seed(7)
        runs.append(train(workload, parts, steps=2))
    (loss_a, norm_a), (loss_b, norm_b) = runs
    torch.testing.assert_close(torch.tensor(loss_a), torch.tensor(loss_b), rtol=1e-3, atol=0)
    torch.testing.assert_close(torch.tensor(norm_a), torch.tensor(norm_b), rtol=1e-3, atol=0)


def test_attention_implementations_agree():
    losses = {}
    for attention in ("sdpa", "eager"):
        workload, parts = build({"attention": attention, "vision_attention": attention, "lm_head": "text"})
        torch.manual_seed(1)
        losses[attention] = workload.loss(parts.model, workload.batch(0))[0].item()
    assert losses["sdpa"] == pytest.approx(losses["eager"], rel=1e-4)


@pytest.mark.parametrize("knob,value", [(k, v) for k, c in WallX.knobs.items() for v in c.values])
def test_every_knob_value_is_accepted_or_skipped_with_a_reason(knob, value):
    if (knob, value) == ("loss_compile", True):
        pytest.skip("compiling takes a minute on a CPU: test_chunked_and_compiled_cross_entropy_are_the_text_loss")
    workload = WallX(TINY, {"mbs": 1, knob: value}, CPU)
    reason = workload.skip_reason()
    if reason is not None:
        assert isinstance(reason, str) and knob in reason
        return
    parts = workload.build()
    loss, extra = workload.loss(parts.model, workload.batch(0))
    loss.backward()
    assert torch.isfinite(loss) and set(extra) == {"text_loss", "action_loss"}


def test_generic_knobs_wallx_cannot_take_are_skipped_with_a_reason():
    graphs = WallX(TINY, {**knob_table.defaults_for(WallX), "cuda_graph": "attention"}, CPU)
    assert "does not support it" in harness_for(graphs, 1).skip_reason()


@pytest.mark.gpu
def test_flash_vision_attention_in_fp32_is_skipped_with_a_reason():
    reason = WallX(TINY, {"vision_attention": "flash", "precision": "fp32"}, torch.device("cuda")).skip_reason()
    assert "fp32" in reason


def test_bad_params_are_refused():
    with pytest.raises(ValueError, match="preset"):
        WallX({"preset": "wallx-7b"}, {}, CPU)
    with pytest.raises(ValueError, match="action_horizon"):
        WallX({"preset": "wallx-tiny", "action_horizon": 0}, {}, CPU)


@pytest.mark.gpu
@pytest.mark.parametrize("attention,vision", [("flash", "flash"), ("flex", "flash"), ("sdpa", "flash")])
def test_cuda_attention_paths_match_sdpa(attention, vision):
    device = torch.device("cuda")
    losses, grads = {}, {}
    for name, knobs in (("ref", {"attention": "sdpa", "vision_attention": "sdpa"}),
                        ("alt", {"attention": attention, "vision_attention": vision})):
        workload, parts = build(knobs, device=device)
        torch.manual_seed(1)
        with torch.autocast("cuda", dtype=torch.bfloat16):     # precision=bf16_mixed
            loss, _ = workload.loss(parts.model, workload.batch(0))
        loss.backward()
        losses[name] = loss.item()
        grads[name] = torch.cat([p.grad.float().flatten() for p in parts.model.parameters()])
    assert losses["alt"] == pytest.approx(losses["ref"], rel=2e-2)
    cos = torch.nn.functional.cosine_similarity(grads["alt"], grads["ref"], dim=0)
    assert cos > 0.99


def test_pure_bf16_weights_take_the_fp32_batch():
    workload, parts = build()
    parts.model.to(torch.bfloat16)          # what precision=bf16 does, with no autocast around loss()
    loss, _ = workload.loss(parts.model, workload.batch(0))
    loss.backward()
    assert torch.isfinite(loss)


def test_flex_on_short_sequences_is_skipped_with_a_reason():
    short = WallX({**TINY, "action_horizon": 10}, {"attention": "flex"}, torch.device("cuda"))
    assert short.layout.length < 128 and "128" in short.skip_reason()


@pytest.mark.parametrize("knobs", [
    {"sharding": "ddp"},  # a parameter the loss leaves unused fails the second step (on two ranks as on one)
    {"sharding": "ddp", "ddp_find_unused_parameters": True},
    {"sharding": "ddp", "ddp_static_graph": True, "ddp_gradient_as_bucket_view": True, "ddp_bucket_cap_mb": 100},
    {"sharding": "fsdp2_full", "recompute": "full"},
    {"precision": "bf16", "recompute": "full"},
])
def test_the_harness_step_runs_with_sharding_recompute_and_precision(gloo_group, knobs):
    values = {**knob_table.defaults_for(WallX), "mbs": 2, **TINY_KNOBS, **knobs}
    workload = WallX(TINY, values, CPU)
    torch.manual_seed(0)
    step = training.prepare(workload, values, CPU)
    losses = [float(step(workload.batch(0))[0]) for _ in range(2)]
    assert all(torch.isfinite(torch.tensor(losses)))


def test_chunked_and_compiled_cross_entropy_are_the_text_loss(monkeypatch):
    """lm_head=chunked (a few rows at a time, logits recomputed in backward), compiled or not, computes
    the same loss and gradients as lm_head=text."""
    from benchbay.workloads.wallx import model as wallx_model

    monkeypatch.setattr(wallx_model, "CE_CHUNK_ROWS", 7)  # several chunks, the last one short
    results = {}
    for lm_head, compiled in (("text", False), ("chunked", False), ("chunked", True)):
        workload, parts = build({"lm_head": lm_head, "loss_compile": compiled, "attention": "sdpa",
                                 "vision_attention": "sdpa"})
        assert (parts.model.rows_loss != parts.model._rows_loss) == compiled
        loss, _ = workload.loss(parts.model, workload.batch(0))
        loss.backward()
        results[lm_head, compiled] = (loss.detach(), [p.grad for p in parts.model.parameters() if p.requires_grad])
    text, text_grads = results.pop(("text", False))
    for loss, grads in results.values():
        torch.testing.assert_close(loss, text)
        for got, want in zip(grads, text_grads, strict=True):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
