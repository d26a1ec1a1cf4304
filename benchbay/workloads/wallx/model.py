"""Wall-X: Qwen2.5-VL whose decoder layers route each token's MLP by token type, plus a
flow-matching action head.

Each decoder layer keeps its attention (shared by all tokens) and gets a ``TokenRoutedMLP``: expert 0
is the VLM's MLP, for text, image and proprioception tokens; expert 1, an action expert (a SwiGLU of
the same class, narrower), for the action tokens. The action head embeds the noisy action chunk into
the action tokens' input embeddings and reads the predicted flow back from their final hidden states.

Upstream:
- X-Square-Robot/wall-x@17335bcc3dd8:wall_x/model/qwen2_5_based/modeling_qwen2_5_vl_act.py
  (``SparseMoeBlock`` and ``BlockSparseMLP``: the per-token-type experts; ``Qwen2_5_VLDecoderLayer_with_MoE``;
  ``Qwen2_5_VLMoEForAction.train_step_forward``: lm_head over every token, the cross-entropy plus
  ``flow_loss_weight`` x the flow loss)
- X-Square-Robot/wall-x@17335bcc3dd8:wall_x/model/action_head.py::ActionProcessor
  (``sample_time``, ``forward``: x_t, the flow target, w1/w2/w3 with SiLU; ``proprioception_proj``;
  ``flow_loss``: the dof-masked MSE)
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint
from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLForConditionalGeneration

from benchbay.workloads.wallx.attention import language_mask
from benchbay.workloads.wallx.batch import WallXBatch
from benchbay.workloads.wallx.config import Preset
from benchbay.workloads.wallx.layout import SequenceLayout, Token


class TokenRoutedMLP(nn.Module):
    """Runs ``experts[i]`` on the sequence positions ``positions[i]`` only (static indices: the same
    for every sample, so shapes are fixed and nothing syncs with the host) and puts the outputs back
    in sequence order."""

    def __init__(self, experts: list[nn.Module], positions: list[torch.Tensor]):
        super().__init__()
        self.experts = nn.ModuleList(experts)
        for i, where in enumerate(positions):
            self.register_buffer(f"positions_{i}", where, persistent=False)
        self.register_buffer("restore", torch.argsort(torch.cat(positions)), persistent=False)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        outs = [expert(hidden.index_select(1, getattr(self, f"positions_{i}")))
                for i, expert in enumerate(self.experts)]
        return torch.cat(outs, dim=1).index_select(1, self.restore)


def sinusoidal(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Transformer sinusoidal embedding of a (batch,) time in [0, 1): (batch, dim) = [sin | cos]."""
    half = dim // 2
    freqs = torch.exp(-math.log(10000.0) * torch.arange(half, device=t.device, dtype=torch.float32) / (half - 1))
    angles = t.float()[:, None] * freqs[None, :]
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


class FlowMatchingActionHead(nn.Module):
    """t ~ Beta(1.5, 1) x 0.999; x_t = (1 - t) noise + t a; the target flow is a - noise.
    Embedding: w3(SiLU(w2([w1([x_t, dof_mask]) | sinusoidal(t)]))); proprioception -> one token.
    Upstream's ``ActionProcessor`` (X-Square-Robot/wall-x@17335bcc3dd8:wall_x/model/action_head.py) draws
    t = (0.999 - b) / 0.999 with b ~ Beta(1.5, 1) (``sample_time``) and builds its linears without bias."""

    def __init__(self, hidden: int, action_dim: int):
        super().__init__()
        self.w1 = nn.Linear(2 * action_dim, hidden)
        self.w2 = nn.Linear(2 * hidden, hidden)
        self.w3 = nn.Linear(hidden, hidden)
        self.action_proj_back = nn.Linear(hidden, action_dim)
        self.proprio_proj = nn.Linear(2 * action_dim, hidden)
        self.register_buffer("beta", torch.tensor([1.5, 1.0]), persistent=False)
        self.time_scale = 0.999

    def noisy_actions(self, actions: torch.Tensor, dof_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(action-token embeddings, target flow) for a (batch, horizon, action_dim) chunk."""
        # the batch is fp32; the weights may be bf16 (precision=bf16) with no autocast to cast for us
        actions, dof_mask = actions.to(self.w1.weight.dtype), dof_mask.to(self.w1.weight.dtype)
        # validate_args=False: validating the parameters would sync with the host every step
        beta = torch.distributions.Beta(self.beta[0].float(), self.beta[1].float(), validate_args=False)
        t = beta.sample((actions.shape[0],)) * self.time_scale
        noise = torch.randn_like(actions)
        tt = t.to(actions.dtype)[:, None, None]
        x_t = (1 - tt) * noise + tt * actions
        embedded = self.w1(torch.cat([x_t, dof_mask], dim=-1))
        time = sinusoidal(t, embedded.shape[-1]).to(embedded.dtype)[:, None].expand_as(embedded)
        tokens = self.w3(F.silu(self.w2(torch.cat([embedded, time], dim=-1))))
        return tokens, actions - noise

    def proprio_token(self, proprio: torch.Tensor, proprio_mask: torch.Tensor) -> torch.Tensor:
        return self.proprio_proj(torch.cat([proprio, proprio_mask], dim=-1).to(self.proprio_proj.weight.dtype))[:, None]

    def flow_loss(self, hidden: torch.Tensor, target: torch.Tensor, dof_mask: torch.Tensor) -> torch.Tensor:
        """MSE of the predicted flow over the real (dof-mask) action dimensions."""
        err = (self.action_proj_back(hidden).float() - target.float()).square() * dof_mask
        return err.sum() / dof_mask.sum().clamp(min=1)


#: rows of the chunked cross-entropy: 1024 x 151,936 fp32 logits (0.6 GB) live at a time
CE_CHUNK_ROWS = 1024


class WallXModel(nn.Module):
    """The trained model; ``forward(batch)`` returns (text cross-entropy, flow MSE)."""

    def __init__(self, vlm: Qwen2_5_VLForConditionalGeneration, preset: Preset, layout: SequenceLayout,
                 language_attention: str, lm_head_tokens: str, compile_loss: bool = False):
        super().__init__()
        self.vlm = vlm
        text_cfg = vlm.config.text_config
        self.action_head = FlowMatchingActionHead(text_cfg.hidden_size, preset.action_dim)
        expert_cfg = copy.deepcopy(text_cfg)
        expert_cfg.intermediate_size = preset.action_expert_size
        device = vlm.lm_head.weight.device
        routes = [layout.positions(Token.TEXT, Token.IMAGE, Token.PROPRIO).to(device),
                  layout.positions(Token.ACTION).to(device)]
        for layer in vlm.model.language_model.layers:
            layer.mlp = TokenRoutedMLP([layer.mlp, type(layer.mlp)(expert_cfg)], routes)
        self.register_buffer("order", layout.assembly_order().to(device), persistent=False)
        self.register_buffer("text_positions", layout.positions(Token.TEXT).to(device), persistent=False)
        self.register_buffer("action_positions", layout.positions(Token.ACTION).to(device), persistent=False)
        self.register_buffer("position_ids", self._rope_positions(layout, preset).to(device), persistent=False)
        # not buffers: a BlockMask is no tensor, and the masks must keep their dtype under precision=bf16
        self.attention_mask = language_mask(language_attention, layout, device)
        self.attention_kwargs = {"action_tail": layout.action_tail()} if language_attention == "flash" else {}
        self.lm_head_tokens = lm_head_tokens
        # compiled, inductor fuses the fp32 upcast, log-softmax and their backward into the reductions:
        # the (rows x 151,936) fp32 logits are never written, only lm_head's bf16 output
        self.rows_loss = torch.compile(self._rows_loss) if compile_loss else self._rows_loss

    def _rope_positions(self, layout: SequenceLayout, preset: Preset) -> torch.Tensor:
        """(3, 1, S) multimodal rotary positions of one sample, by transformers' own rule (an image's
        tokens get its (t, h, w) grid, every other token the next text position)."""
        types = torch.tensor([[t == Token.IMAGE for t in layout.types]], dtype=torch.int, device="cpu")
        grids = torch.tensor([[1, preset.patch_grid, preset.patch_grid]] * preset.cameras, device="cpu")
        positions, _ = self.vlm.model.get_rope_index(torch.zeros_like(types, dtype=torch.long), types, grids)
        return positions

    def forward(self, batch: WallXBatch) -> tuple[torch.Tensor, torch.Tensor]:
        lm = self.vlm.model.language_model
        n = batch.text_ids.shape[0]
        images = self.vlm.model.visual(batch.pixel_values, **batch.vision.kwargs()).pooler_output
        actions, target = self.action_head.noisy_actions(batch.actions, batch.dof_mask)
        text = lm.embed_tokens(batch.text_ids)
        parts = [text, images.view(n, -1, text.shape[-1]).to(text.dtype),
                 self.action_head.proprio_token(batch.proprio, batch.proprio_mask).to(text.dtype),
                 actions.to(text.dtype)]
        embeds = torch.cat(parts, dim=1).index_select(1, self.order)
        hidden = lm(inputs_embeds=embeds, attention_mask=self.attention_mask, use_cache=False,
                    position_ids=self.position_ids.expand(-1, n, -1), **self.attention_kwargs).last_hidden_state
        return self._text_loss(hidden, batch.text_labels), self.action_head.flow_loss(
            hidden.index_select(1, self.action_positions), target, batch.dof_mask)

    def _text_loss(self, hidden: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Cross-entropy over the text tokens. ``lm_head_tokens="all"`` is the official step: logits of
        every token, upcast to fp32, non-text labels ignored (transformers' causal-LM loss);
        ``"text"`` runs lm_head over the text tokens only; ``"chunked"`` too, a chunk of rows at a
        time whose fp32 logits are recomputed in backward rather than kept (the 152k-word vocabulary)."""
        count = labels.numel()
        if self.lm_head_tokens == "all":
            labels = torch.full(hidden.shape[:2], -100, dtype=labels.dtype, device=labels.device).index_copy(
                1, self.text_positions, labels)
        else:
            hidden = hidden.index_select(1, self.text_positions)
        rows, labels = hidden.flatten(0, 1), labels.flatten()
        if self.lm_head_tokens == "chunked":
            total = sum(checkpoint(self.rows_loss, h, y, use_reentrant=False)
                        for h, y in zip(rows.split(CE_CHUNK_ROWS), labels.split(CE_CHUNK_ROWS), strict=True))
        else:
            total = self.rows_loss(rows, labels)
        return total / count

    def _rows_loss(self, hidden: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Summed cross-entropy of (rows, hidden) states against (rows,) labels, -100 ignored."""
        return F.cross_entropy(self.vlm.lm_head(hidden).float(), labels, ignore_index=-100, reduction="sum")
