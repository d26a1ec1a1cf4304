"""DreamZero workload: the tiny presets train, the attention mask is the spec's, the real presets
have the published sizes and FLOPs, every workload knob value runs or says why not."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from benchbay import knobs as knob_table
from benchbay.knobs.video import VIDEO_KNOBS
from benchbay.launch import training
from benchbay.launch.harness import harness_for
from benchbay.workloads.dreamzero import flops, mask
from benchbay.workloads.dreamzero.config import SequenceLayout, preset
from benchbay.workloads.dreamzero.transformer import CausalWanModel
from benchbay.workloads.dreamzero.workload import DreamZero

CPU = torch.device("cpu")


@pytest.fixture(autouse=True, scope="module")
def one_cpu_thread():
    # the test machine's cores are shared: with several busy processes, intra-op threads spin
    # against each other and small ops get ~10x slower
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def make(preset_name: str = "dreamzero-tiny", **knobs) -> DreamZero:
    return DreamZero({"preset": preset_name}, {"attention": "sdpa", "precision": "fp32", "mbs": 2, **knobs}, CPU)


def built(workload: DreamZero, seed: int = 0):
    torch.manual_seed(seed)
    return workload.build()


def train(workload: DreamZero, steps: int, lr: float) -> list[float]:
    """The harness's own step (training.prepare: zero_grad, loss, backward, clip 1.0, AdamW) on one
    fixed batch."""
    torch.manual_seed(0)
    step = training.prepare(workload, workload.knob_values, CPU)
    for group in step.optimizer.param_groups:
        group["lr"] = lr  # the recipe's 1e-5 barely moves a toy model in a few steps
    batch = workload.batch(0)
    losses = []
    for _ in range(steps):
        loss, _, parts = step(batch)
        assert set(parts) == {"dynamics_loss", "action_loss"}
        if not losses:  # the first step's gradients (the next step sets them to None first)
            assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in step.params)
            assert all(p.grad is None and not p.requires_grad for p in workload.encoders.parameters())
        losses.append(float(loss))
    return losses


@pytest.mark.parametrize("name", ["dreamzero-tiny", "dreamzero-tiny-i2v"])
def test_tiny_preset_trains(name):
    workload = make(name)
    parts = built(workload)
    assert parts.frozen and len(parts.regions["blocks"]) == 2
    losses = train(workload, steps=6, lr=1e-3)
    assert all(math.isfinite(x) for x in losses)
    assert losses[-1] < losses[0]


def test_ddp_over_one_rank_trains_like_no_sharding(gloo_group):
    """A trainable parameter the loss left unused would fail DDP's second step, on one rank as on
    two (FSDP2 over two ranks: test_distributed)."""
    reference = train(make(), steps=3, lr=1e-3)
    assert train(make(sharding="ddp"), steps=3, lr=1e-3) == pytest.approx(reference, rel=1e-5)


def test_batch_shapes_and_determinism():
    workload = make()
    workload.build()
    batch = workload.batch(3)
    assert batch["video"].shape == (2, 3, 33, 128, 256) and batch["video"].dtype == torch.uint8
    assert batch["actions"].shape == (2, 96, 32) and batch["states"].shape == (2, 4, 64)
    assert batch["action_mask"][0, 0].sum() == 8 and (batch["actions"].abs() <= 1).all()
    assert batch["text_ids"].shape == batch["text_mask"].shape == (2, 16)
    assert batch["frame_ids"].shape == (2, 9) and batch["action_ids"].shape == (2, 96)
    # timesteps shared within each block of 2 latent frames; actions follow their block
    assert (batch["frame_ids"][:, 1::2] == batch["frame_ids"][:, 2::2]).all()
    assert (batch["action_ids"][:, ::24] == batch["frame_ids"][:, 1::2]).all()
    again = workload.batch(3)
    assert all(torch.equal(batch[k], again[k]) for k in batch)
    assert not torch.equal(batch["video"], workload.batch(4)["video"])


def _spec_mask(frame_tokens: int, latent_frames: int, frames_per_block: int, actions_per_block: int,
               states_per_block: int) -> torch.Tensor:
    """The attention pattern of docs/architecture.md, written from its prose with explicit index ranges."""
    f, blocks = frame_tokens, (latent_frames - 1) // frames_per_block
    video = latent_frames * f
    block_len = frames_per_block * f
    action0, state0 = 2 * video, 2 * video + blocks * actions_per_block
    total = state0 + blocks * states_per_block

    def clean_block(i):
        return list(range(f + i * block_len, f + (i + 1) * block_len))

    def noisy_block(i):
        return [video + t for t in clean_block(i)]

    def action_block(i):
        return list(range(action0 + i * actions_per_block, action0 + (i + 1) * actions_per_block))

    def state_block(i):
        return list(range(state0 + i * states_per_block, state0 + (i + 1) * states_per_block))

    m = torch.zeros(total, total, dtype=torch.bool)
    first_clean, first_noisy = list(range(f)), list(range(video, video + f))
    for q in first_clean:
        m[q, first_clean] = True
    for i in range(blocks):  # clean block i: the first frame and clean blocks 0..i (block-causal)
        keys = first_clean + sum((clean_block(j) for j in range(i + 1)), [])
        for q in clean_block(i):
            m[q, keys] = True
    for q in first_noisy:
        m[q, first_noisy] = True
    for i in range(blocks):
        keys = first_clean + sum((clean_block(j) for j in range(i)), []) + noisy_block(i) + action_block(i) \
            + state_block(i)
        for q in noisy_block(i) + action_block(i):
            m[q, keys] = True
        for q in state_block(i):
            m[q, state_block(i)] = True
    return m


@pytest.mark.parametrize("shape", [(2, 5, 2, 3, 1), (3, 9, 2, 24, 1), (8, 9, 2, 24, 1)])
def test_mask_matches_spec(shape):
    frame_tokens, latent_frames, frames_per_block, actions_per_block, states_per_block = shape
    layout = SequenceLayout(latent_frames, (1, frame_tokens), frames_per_block, actions_per_block, states_per_block)
    expected = _spec_mask(*shape)
    assert torch.equal(mask.dense_mask(layout), expected)
    assert mask.allowed_pairs(layout) == int(expected.sum())


@pytest.mark.parametrize("name, trainable", [("dreamzero-5b", 5.61e9), ("dreamzero-14b", 16.48e9)])
def test_real_presets_parameter_counts(name, trainable):
    with torch.device("meta"):
        model = CausalWanModel(preset(name).transformer)
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(trainable, rel=0.01)


def test_layers_param_overrides_depth():
    workload = DreamZero({"preset": "dreamzero-14b", "layers": 8}, {}, CPU)
    assert workload.preset.transformer.layers == 8
    assert preset("dreamzero-14b").transformer.layers == 40


@pytest.mark.parametrize("name, forward, tokens", [("dreamzero-5b", 10.2e12, 1000), ("dreamzero-14b", 453e12, 15940)])
def test_flops_match_spec(name, forward, tokens):
    p = preset(name)
    assert p.layout().total == tokens
    assert flops.transformer_forward_flops(p) == pytest.approx(forward, rel=0.10)
    assert flops.umt5_forward_flops(p.t5, 512) == pytest.approx(4.8e12, rel=0.10)
    workload = DreamZero({"preset": name}, {}, CPU)
    per_sample = workload.flops_per_sample()
    assert per_sample["train"] == pytest.approx(3 * flops.transformer_forward_flops(p))
    assert per_sample["frozen"] > flops.umt5_forward_flops(p.t5, 512)


def test_frozen_flops_follow_the_knobs():
    base = make().flops_per_sample()["frozen"]
    twice = make(duplicate_vae_encode=True).flops_per_sample()["frozen"]
    assert twice - base == pytest.approx(flops.vae_encode_flops(preset("dreamzero-tiny")))
    assert make(frozen_encoders="cached").flops_per_sample()["frozen"] == 0
    # 14B needs the first-frame latent anyway: the flag adds nothing there
    assert make("dreamzero-tiny-i2v").flops_per_sample() == make("dreamzero-tiny-i2v", duplicate_vae_encode=True) \
        .flops_per_sample()


def _one_loss(workload: DreamZero) -> tuple[torch.Tensor, object]:
    parts = built(workload)
    loss, _ = workload.loss(parts.model, workload.batch(0))
    return loss.detach(), parts


@pytest.mark.slow
def test_every_workload_knob_value_runs_or_says_why():
    reference, _ = _one_loss(make())
    for knob, choice in DreamZero.knobs.items():
        for value in choice.values:
            workload = make(**{knob: value})
            reason = workload.skip_reason()
            if knob in VIDEO_KNOBS and value != choice.default:
                if knob != "data":  # they act with data=video only; data=video: test_video_feeds_the_step
                    assert "no effect with data=synthetic" in reason
                continue
            if reason is not None:
                # test_flex_matches_sdpa; FP8 encoders: test_float8.py plants their conversion on a CPU
                assert (knob, value) in {("attention", "flex"), ("encoders_float8", "rowwise"),
                                         ("encoders_float8", "tensorwise")}, (knob, value, reason)
                assert "CPU" in reason or "CUDA GPU" in reason
                continue
            if (knob, value) == ("encoders_compile", True):
                continue  # compiling takes minutes on a CPU: test_encoders_compile_compiles_each_encoder_in_place
            loss, parts = _one_loss(workload)
            assert torch.isfinite(loss)
            if (knob, value) == ("frozen_encoders", "cached"):
                assert parts.frozen == []  # the encoders are gone from the step
            else:  # batching, the duplicate encode and the cache change work, not results
                assert loss == pytest.approx(reference.item(), rel=1e-4)


def test_the_record_names_the_encoders_attention():
    workload = make()
    built(workload)
    assert workload.extra_metrics()["encoder_attention"] == {"umt5": "sdpa", "clip": "sdpa"}
    cached = make(frozen_encoders="cached")
    built(cached)
    assert cached.extra_metrics()["encoder_attention"] is None


def test_encoders_compile_compiles_each_encoder_in_place():
    workload = make(encoders_compile=True)
    parts = built(workload)
    enc = parts.frozen[0]
    assert all(m._compiled_call_impl is not None for m in (enc.vae.encoder, enc.text_encoder, enc.image_encoder))
    assert "encoders_compile=True" in make(frozen_encoders="cached", encoders_compile=True).skip_reason()


@pytest.mark.parametrize("syncs", ["none", "official"])
def test_trim_prompts_gives_the_same_text_condition_from_fewer_tokens(syncs):
    text, seen = {}, {}
    for trim in (False, True):
        workload = make(trim_prompts=trim, host_syncs=syncs)
        enc = built(workload).frozen[0]
        hook = enc.text_encoder.register_forward_hook(
            lambda m, args, kw, out: seen.update({trim: kw["input_ids"].shape}), with_kwargs=True)
        batch = workload.batch(0)
        text[trim] = enc.encode_text(batch["text_ids"], batch["text_mask"])
        hook.remove()
    sample = workload.preset.sample
    assert seen == {False: (2, sample.text_len), True: (2, sample.longest_prompt)}
    assert text[True].shape == text[False].shape
    torch.testing.assert_close(text[True], text[False], rtol=1e-5, atol=1e-6)


def _channels_last_convolutions(**knobs) -> tuple[int, int]:
    """(conv3d outputs in channels-last, conv3d calls) of one VAE encode of two samples (with one,
    the first frame's (1, C, 1, h, w) tensors read as contiguous either way)."""
    enc = built(make(**knobs)).frozen[0]
    layouts = []
    hooks = [m.register_forward_hook(lambda m, i, out: layouts.append(out.is_contiguous(
        memory_format=torch.channels_last_3d))) for m in enc.vae.encoder.modules() if isinstance(m, torch.nn.Conv3d)]
    enc.encode_video(torch.rand(2, 3, enc.preset.sample.frames, *enc.preset.sample.model_hw) * 2 - 1)
    for hook in hooks:
        hook.remove()
    return sum(layouts), len(layouts)


def test_vae_channels_last_keeps_its_layout_through_the_convolutions():
    # (the same latents and loss: test_every_workload_knob_value_runs_or_says_why)
    channels_last, calls = _channels_last_convolutions(vae_channels_last=True)
    assert channels_last > 0.75 * calls and _channels_last_convolutions()[0] == 0


def test_knob_combinations_that_cannot_run_say_why():
    generic = knob_table.defaults_for(DreamZero)
    assert "CUDA" in harness_for(make(**{**generic, "cuda_graph": "attention"}), 1).skip_reason()
    cuda = DreamZero({"preset": "dreamzero-tiny"}, {"cuda_graph": "attention", "recompute": "full"},
                     torch.device("cuda"))
    assert "154306" in cuda.skip_reason()
    reentrant = DreamZero({"preset": "dreamzero-tiny"}, {"cuda_graph": "attention", "recompute": "full",
                                                          "recompute_impl": "reentrant"}, torch.device("cuda"))
    assert reentrant.skip_reason() is None  # RLinf's way: graphed helpers inside reentrant checkpoints
    assert "no effect" in make(frozen_encoders="cached", encoders="per_sample").skip_reason()
    flex = DreamZero({"preset": "dreamzero-tiny"}, {"attention": "flex", "recompute": "selective"},
                     torch.device("cuda"))
    assert "uncompiled" in flex.skip_reason()
    assert make(frozen_encoders="cached").skip_reason() is None


@pytest.mark.slow
def test_flex_matches_sdpa():
    """FlexAttention (compiled BlockMask and kernel; forward only: no flex backward on CPU) gives
    the dense-mask SDPA result on the tiny preset."""
    losses = {}
    for attention in ("sdpa", "flex"):
        workload = make(attention=attention)
        parts = built(workload)
        with torch.no_grad():
            losses[attention], _ = workload.loss(parts.model, workload.batch(0))
    torch.testing.assert_close(losses["flex"], losses["sdpa"], rtol=1e-4, atol=1e-5)


def _gpu_step(knobs: dict, steps: int = 3) -> list[float]:
    """The harness's step on the GPU, tiny preset; returns the losses."""
    device = torch.device("cuda")
    values = {**knob_table.defaults_for(DreamZero), "mbs": 2, **knobs}
    workload = DreamZero({"preset": "dreamzero-tiny"}, values, device)
    assert harness_for(workload, 1).skip_reason() is None and workload.skip_reason() is None
    torch.manual_seed(0)
    step = training.prepare(workload, values, device)
    losses = [float(step(workload.batch(i))[0]) for i in range(steps)]
    assert all(math.isfinite(x) for x in losses)
    return losses


@pytest.mark.parametrize("knobs", [
    {"attention": "flex", "cuda_graph": "attention", "compile": "blocks"},
    {"attention": "sdpa", "cuda_graph": "attention", "compile": "blocks"},
    # RLinf's way: the four blockwise helpers as CUDA graphs inside reentrant checkpoints
    {"attention": "blockwise", "cuda_graph": "attention", "recompute": "full", "recompute_impl": "reentrant",
     "kernels": "official", "host_syncs": "official", "precision": "bf16"},
], ids=["flex", "sdpa", "blockwise-reentrant"])
@pytest.mark.gpu
def test_gpu_graphed_attention_steps(knobs):
    _gpu_step(knobs)


@pytest.mark.gpu
def test_gpu_host_syncs_are_the_official_ones_only():
    """host_syncs=none: the transformer and flow matching never wait for the GPU; official: they do
    (CUDA's sync debug mode raises on a synchronising call)."""
    device = torch.device("cuda")
    for syncs, expect_sync in (("none", False), ("official", True)):
        values = {**knob_table.defaults_for(DreamZero), "attention": "sdpa", "frozen_encoders": "cached",
                  "host_syncs": syncs, "precision": "fp32"}
        workload = DreamZero({"preset": "dreamzero-tiny"}, values, device)
        parts = workload.build()
        batch = workload.batch(0)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            workload.loss(parts.model, batch)
            synced = False
        except RuntimeError as exc:
            assert "synchroniz" in str(exc)
            synced = True
        finally:
            torch.cuda.set_sync_debug_mode(0)
        assert synced == expect_sync, syncs


@pytest.mark.parametrize("graphs", [
    {"cuda_graph": "off", "recompute_impl": "non_reentrant"},
    {"cuda_graph": "attention", "recompute_impl": "reentrant"},
], ids=["eager", "graphed"])
@pytest.mark.gpu
def test_gpu_host_syncs_change_no_loss(graphs):
    """The same draws through the CPU or on the device: the same losses. (dreamzero-5b's stored
    +no_host_syncs points of run 5365 started from 6.671 against 7.367: they predate the schedule
    drawn on the CPU in both modes; rerun on the H200, the pair starts from 7.367 alike.)"""
    knobs = {"attention": "blockwise", "recompute": "full", "kernels": "official", "precision": "bf16", **graphs}
    official, none = (_gpu_step({**knobs, "host_syncs": syncs}) for syncs in ("official", "none"))
    assert none == pytest.approx(official, rel=1e-3)


@pytest.mark.gpu
def test_gpu_selective_recompute_keeps_flex_attention():
    """FlexAttention's outputs are in the selective save list: backward runs no flex forward
    (compiled blocks: eager selective checkpointing would run flex uncompiled, so it is refused)."""
    from tests.test_knobs import attention_calls_in_backward

    knobs = {"attention": "flex", "recompute": "selective", "compile": "blocks"}
    assert attention_calls_in_backward(knobs, torch.device("cuda")) == 0


class _OpCounts(TorchDispatchMode):
    """aten calls by name while active: the launch pattern of eager code."""

    def __init__(self):
        super().__init__()
        self.calls: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))

    def count(self, fragment: str) -> int:
        return sum(n for name, n in self.calls.items() if fragment in name)


def _one_block_forward(**knobs) -> _OpCounts:
    """aten calls of the first block's forward at the tiny preset's real sequence structure."""
    workload = make(mbs=1, **knobs)
    parts = built(workload)
    block, layout = parts.regions["blocks"][0], workload.layout
    d, text, image = workload.preset.transformer.dim, workload.preset.sample.text_len, workload.preset.clip_tokens
    x, e = torch.randn(1, layout.total, d), torch.randn(1, layout.total, 6, d)
    with torch.no_grad(), _OpCounts() as counts:
        block(x, e, torch.randn(1, text, d), torch.randn(1, image, d), workload.rope, workload.attention_mask)
    return counts


def test_blockwise_issues_the_official_launch_pattern():
    """attention=blockwise: per layer 2 + 4 x blocks self-attention calls (18 for DROID's 4 blocks,
    plus the 2 cross-attention calls) and 6 x blocks + 1 concatenations, as the official block loop."""
    blocks = make().layout.blocks
    assert blocks == 4
    one_call = _one_block_forward(attention="sdpa")
    blockwise = _one_block_forward(attention="blockwise")
    assert one_call.count("scaled_dot_product") == 1 + 2
    assert blockwise.count("scaled_dot_product") == 2 + 4 * blocks + 2
    assert blockwise.calls["cat"] - one_call.calls["cat"] == 6 * blocks + 1


def test_official_kernels_issue_more_launches_for_the_same_function():
    fused = _one_block_forward(attention="blockwise")
    official = _one_block_forward(attention="blockwise", kernels="official")
    assert official.calls["view_as_complex"] == 4 and fused.calls["view_as_complex"] == 0  # q and k, per half
    # the noisy half's RoPE table joined at each call, the two halves joined after, for q and k
    assert official.calls["cat"] - fused.calls["cat"] == 4
    assert official.calls["_to_copy"] - fused.calls["_to_copy"] == 8  # float64 in, back per half
    assert sum(official.calls.values()) > sum(fused.calls.values())


@pytest.mark.parametrize("knobs", [{"attention": "blockwise"}, {"kernels": "official"},
                                   {"attention": "blockwise", "kernels": "official", "host_syncs": "official"}])
def test_official_variants_compute_the_same_function(knobs):
    """Loss and gradients of the official launch pattern, kernels and host round trips match the
    one-call fused step (fp32, tiny preset)."""
    results = []
    for variant in ({}, knobs):
        workload = make(**variant)
        parts = built(workload)
        loss, _ = workload.loss(parts.model, workload.batch(0))
        loss.backward()
        results.append((loss.detach(), [p.grad for p in parts.model.parameters()]))
    (loss, grads), (other_loss, other_grads) = results
    torch.testing.assert_close(other_loss, loss, rtol=1e-5, atol=1e-6)
    for got, want in zip(other_grads, grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-5)


def test_host_syncs_official_draws_the_schedule_on_the_cpu():
    official, fused = make(host_syncs="official"), make()
    for workload in (official, fused):
        workload.build()
    batch, reference = official.batch(0), fused.batch(0)
    assert batch["frame_ids"].device.type == "cpu"
    assert torch.equal(batch["frame_ids"], reference["frame_ids"])  # the same draws, only elsewhere
    for lookup in ("timesteps_of", "sigmas_of", "weights_of"):
        torch.testing.assert_close(getattr(official.flow, lookup)(batch["frame_ids"]),
                                   getattr(fused.flow, lookup)(reference["frame_ids"]))
