"""Where each token of a Wall-X sample sits in the language model's sequence.

Every synthetic sample has the same layout, so token types, routing indices, rotary positions and
the attention mask are static: built once per model, never recomputed (no host sync) per step::

    [prompt | (<vision_start> image tokens <vision_end>) per camera | instruction | proprio | actions]

Upstream: the prompt template in X-Square-Robot/wall-x@17335bcc3dd8:wall_x/data/utils.py::get_wallx_normal_text
(``<|propri|>``, then ``<|action|>`` x the chunk); the action tokens as ``moe_token_types`` in
``DataCollator.__call__`` of X-Square-Robot/wall-x@17335bcc3dd8:wall_x/data/load_lerobot_dataset.py;
the mask in ``Qwen2_5_VLMoEModel._update_causal_mask`` (type-1 tokens attend to each other both ways) of
X-Square-Robot/wall-x@17335bcc3dd8:wall_x/model/qwen2_5_based/modeling_qwen2_5_vl_act.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import torch


class Token(IntEnum):
    TEXT = 0
    IMAGE = 1
    PROPRIO = 2
    ACTION = 3


@dataclass(frozen=True)
class SequenceLayout:
    types: tuple[Token, ...]

    @classmethod
    def wallx(cls, prompt: int, image: int, cameras: int, instruction: int, actions: int) -> SequenceLayout:
        camera = [Token.TEXT] + [Token.IMAGE] * image + [Token.TEXT]
        return cls(tuple([Token.TEXT] * prompt + camera * cameras + [Token.TEXT] * instruction
                         + [Token.PROPRIO] + [Token.ACTION] * actions))

    @property
    def length(self) -> int:
        return len(self.types)

    def count(self, kind: Token) -> int:
        return self.types.count(kind)

    def positions(self, *kinds: Token) -> torch.Tensor:
        """Sorted sequence positions of the tokens of these kinds (on the CPU, whatever the default device)."""
        return torch.tensor([i for i, t in enumerate(self.types) if t in kinds], dtype=torch.long, device="cpu")

    def is_action(self) -> torch.Tensor:
        return torch.tensor([t == Token.ACTION for t in self.types], device="cpu")

    def assembly_order(self) -> torch.Tensor:
        """For each position, its row in cat([text, image, proprio, action] embeddings, dim=1)."""
        order = torch.empty(self.length, dtype=torch.long, device="cpu")
        start = 0
        for kind in Token:
            where = self.positions(kind)
            order[where] = torch.arange(start, start + len(where), device="cpu")
            start += len(where)
        return order

    def action_tail(self) -> int:
        """Number of trailing action tokens; the action tokens must be the sequence's last block."""
        tail = self.count(Token.ACTION)
        if any(t == Token.ACTION for t in self.types[: self.length - tail]):
            raise ValueError("action tokens are not one trailing block")
        return tail


def action_bidirectional(is_action: torch.Tensor):
    """FlexAttention mask_mod of Wall-X's language model: causal, except that action tokens see every
    action token (bidirectional among themselves)."""

    def mask_mod(batch, head, q_idx, kv_idx):
        return (kv_idx <= q_idx) | (is_action[q_idx] & is_action[kv_idx])

    return mask_mod


def dense_mask(layout: SequenceLayout, device: torch.device) -> torch.Tensor:
    """(S, S) boolean: True where query row may attend to key column."""
    idx = torch.arange(layout.length, device=device)
    return action_bidirectional(layout.is_action().to(device))(None, None, idx[:, None], idx[None, :])
