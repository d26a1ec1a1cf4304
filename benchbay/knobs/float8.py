"""float8: FP8 training of the repeated blocks' linears, torchao's float8 training recipes
(``torchao.float8.convert_to_float8_training`` with ``Float8LinearConfig.from_recipe_name``):

- tensorwise: one dynamic scale a tensor, cuBLAS's FP8 GEMM; the fastest (issue 51, H200, four
  DreamZero-5B blocks compiled: 1.30x bf16);
- rowwise: a scale a row, CUTLASS's rowwise GEMM, scales rounded down to powers of two (1.12x);
- rowwise_with_gw_hp: rowwise, with the weight gradient's GEMM kept in bf16: the most accurate (1.21x).

Which linears stay in bf16, and why (``plan``; the record keeps both lists, ``facts``):

- every linear outside the workload's regions (its repeated blocks): the first layers (DreamZero's
  text, time, image, state and action embeddings; Wall-X's vision merger), the adaLN modulation
  projection (DreamZero's ``time_projection``: its error would scale and shift every block's
  residual stream; the blocks' own modulation is a parameter, not a linear) and the last layers
  (DreamZero's video head and action decoder; Wall-X's lm_head and flow head). They are a small share
  of the FLOPs, often narrow, and the most sensitive to the precision of their gradients; torchtitan
  keeps the output layer out for the same reason;
- inside the blocks, a linear whose in or out features are not multiples of 16 (FP8 GEMMs need
  them: Wall-X's vision MLP, 3420 wide), or whose GEMM is below torchao's size thresholds for the
  recipe (``torchao.float8._auto_filter_for_recipe``, from H100 measurements: casting costs more than
  the FP8 GEMM saves; rowwise_with_gw_hp takes rowwise's): Wall-X's 256-wide k/v projections, and
  under rowwise every GEMM with 2048 outputs or fewer (Wall-X's attention, MLP down and action
  expert projections, its vision attention);
- a frozen linear (the knob trains; FP8 inference of the frozen encoders is not this knob);
- a linear whose rows in a batch (the tokens it takes a sample, as the workload declares them in
  ``block_linear_rows``, times mbs) are not a multiple of 16, under the recipes whose weight-gradient
  GEMM is FP8 (tensorwise, rowwise): that GEMM runs over the rows, and inductor refuses it otherwise
  (H200: DreamZero-5B's ``k_img``/``v_img`` over CLIP's 257 tokens at mbs 12). rowwise_with_gw_hp
  keeps that GEMM in bf16 and converts at any batch. Undeclared linears are taken to fit. With
  ``float8_pad_rows`` such a linear converts too: its input gets zero rows up to the next multiple of
  16 and its output loses them again (``RowsPadded``). Zero rows raise no amax, so every scale, every
  output kept and the weight gradient are those of the unpadded rows (DreamZero-14B's 15,940 tokens a
  sample: tensorwise at mbs 1).

A value that leaves nothing to convert is refused: before the model is built where no declared
linear's rows fit the batch (with the batch that would), else as it is applied (``Refused``: Wall-X
under rowwise at mbs 52, whose attention and VLM MLP take 255 and 223 tokens a sample).

At real width every other linear of DreamZero's blocks converts (dim 3072 or 5120, FFN 14336 or
13824). A linear run on few tokens (Wall-X's action expert, 32 of 255 tokens a sample) converts when
its weight is large enough.

Composes: applied after precision and before recompute, compile and sharding (torchtitan's order;
eager FP8 is slow, compile fuses the casts). Under FSDP2, tensorwise all-gathers the weights in FP8
(``enable_fsdp_float8_all_gather``; torchao has it for tensorwise scales only, and not with
offload=optimizer, whose weights live on the host). The optimizers step the
weights as before: FP8 is only the GEMMs' operands. Refused on a CPU (benchbay.knobs.rules) and
below compute capability 8.9 (no FP8 tensor cores).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from benchbay.knobs.rules import FP8_WEIGHT_GRADIENT, Refused

if TYPE_CHECKING:  # the workloads import the knobs' declarations, never the other way round
    from benchbay.knobs.parts import ModelParts

#: FP8 tensor cores: Ada (8.9), Hopper (9.0) and newer
MIN_CAPABILITY = (8, 9)
#: why a linear stays in bf16 (the keys of ``Plan.kept``)
OUTSIDE = "outside the repeated blocks (first and last layers, heads, adaLN modulation)"
NOT_16 = "in or out features not multiples of 16"
ROWS = "rows in a batch (tokens x mbs) not a multiple of 16 (the FP8 weight-gradient GEMM needs them)"
SMALL = "below torchao's size thresholds for the recipe"
FROZEN = "frozen"


@dataclasses.dataclass
class Plan:
    """The linears of a model by what the knob does with them: FQNs converted, FQNs kept by reason,
    and each FQN with its block's index as ``*`` (``blocks.0.ffn.0`` and ``blocks.1.ffn.0``: ``blocks.*.ffn.0``)."""

    converted: list[str]
    kept: dict[str, list[str]]
    patterns: dict[str, str]
    padded: list[str] = dataclasses.field(default_factory=list)  # converted, their rows padded to 16

    def facts(self) -> dict[str, Any]:
        """What a record keeps: the counts, and the kept linears by reason, one pattern for every block."""
        return {"float8_converted": len(self.converted), "float8_padded": len(self.padded),
                "float8_kept": sum(map(len, self.kept.values())),
                "float8_kept_linears": {reason: list(dict.fromkeys(self.patterns[f] for f in fqns))
                                        for reason, fqns in self.kept.items() if fqns}}


def skip_reason(knobs: dict[str, Any], device: torch.device, rows: dict[str, int]) -> str | None:
    """Below compute capability 8.9 (the device type is checked before the point's process: rules.py),
    or a batch that leaves none of the declared linears (``rows``: a sample's) to convert."""
    recipe, mbs, padded = knobs["float8"], knobs["mbs"], knobs["float8_pad_rows"]
    if recipe in FP8_WEIGHT_GRADIENT and rows and not padded and all(r * mbs % 16 for r in rows.values()):
        fits = min(16 // math.gcd(16, r) for r in rows.values())
        return (f"float8={recipe} at mbs {mbs} converts no linear: every one takes rows a batch that are not "
                f"a multiple of 16 ({', '.join(sorted({f'{r} x {mbs}' for r in rows.values()}))}), which its "
                f"FP8 weight-gradient GEMM needs; use rowwise_with_gw_hp, float8_pad_rows=True or an mbs that is "
                f"a multiple of {fits}")
    return below_capability("float8", recipe, device)


def below_capability(name: str, recipe: str, device: torch.device) -> str | None:
    """Why knob ``name`` at ``recipe`` cannot run on a CUDA ``device`` without FP8 tensor cores
    (None on a CPU: each knob says that itself)."""
    if recipe == "off" or device.type != "cuda":
        return None
    capability = torch.cuda.get_device_capability(device)
    if capability < MIN_CAPABILITY:
        return (f"{name}={recipe} needs FP8 tensor cores: a CUDA GPU of compute capability "
                f"{MIN_CAPABILITY[0]}.{MIN_CAPABILITY[1]} or newer (this one: {capability[0]}.{capability[1]})")
    return None


def plan(parts: ModelParts, recipe: str, rows: dict[str, int] | None = None, pad_rows: bool = False) -> Plan:
    """Which of ``parts.model``'s linears ``recipe`` converts, and why each other one stays in bf16
    (``rows``: a batch's rows of the blocks' linears, by name inside a block; ``pad_rows``: those
    whose rows are not a multiple of 16 convert, padded)."""
    from torchao.float8 import _auto_filter_for_recipe

    # torchao has no thresholds of its own for rowwise_with_gw_hp: its forward and grad-input GEMMs are rowwise's
    large_enough = _auto_filter_for_recipe("tensorwise" if recipe == "tensorwise" else "rowwise", filter_fqns=[])
    names = {id(m): name for name, m in parts.model.named_modules()}
    blocks = tuple(names[id(b)] + "." for blocks in parts.regions.values() for b in blocks if id(b) in names)
    rows = (rows or {}) if recipe in FP8_WEIGHT_GRADIENT else {}
    out = Plan(converted=[], kept={OUTSIDE: [], NOT_16: [], ROWS: [], SMALL: [], FROZEN: []}, patterns={})
    for fqn, module in parts.model.named_modules():
        if not isinstance(module, nn.Linear):
            continue
        out_features, in_features = module.weight.shape
        block = next((b for b in blocks if fqn.startswith(b)), None)
        out.patterns[fqn] = fqn if block is None else re.sub(r"\d+\.$", "*.", block) + fqn.removeprefix(block)
        if block is None:
            out.kept[OUTSIDE].append(fqn)
        elif not module.weight.requires_grad:
            out.kept[FROZEN].append(fqn)
        elif in_features % 16 or out_features % 16:
            out.kept[NOT_16].append(fqn)
        elif (uneven := rows.get(fqn.removeprefix(block), 0) % 16) and not pad_rows:
            out.kept[ROWS].append(fqn)
        elif not large_enough(module, fqn):
            out.kept[SMALL].append(fqn)
        else:
            out.converted.append(fqn)
            if uneven:
                out.padded.append(fqn)
    return out


def config(recipe: str, knobs: dict[str, Any]):
    """torchao's configuration of the recipe; tensorwise all-gathers its weights in FP8 under FSDP2."""
    from torchao.float8 import Float8LinearConfig

    out = Float8LinearConfig.from_recipe_name(recipe)
    if recipe == "tensorwise" and knobs["sharding"].startswith("fsdp2") and knobs["offload"] == "none":
        out = dataclasses.replace(out, enable_fsdp_float8_all_gather=True)
    return out


def apply(parts: ModelParts, knobs: dict[str, Any], rows: dict[str, int]) -> dict[str, Any]:
    """Convert the planned linears in place (``rows``: a sample's, by name inside a block); returns
    the facts a record keeps ({} when off)."""
    recipe = knobs["float8"]
    if recipe == "off":
        return {}
    from torchao.float8 import convert_to_float8_training

    chosen = plan(parts, recipe, {name: r * knobs["mbs"] for name, r in rows.items()}, knobs["float8_pad_rows"])
    if not chosen.converted:
        kept = "; ".join(f"{len(fqns)} {reason}" for reason, fqns in chosen.kept.items() if fqns)
        raise Refused(f"float8={recipe} at mbs {knobs['mbs']} converts no linear of this model ({kept})")
    if knobs["float8_pad_rows"] and not chosen.padded:
        raise Refused(f"float8_pad_rows=True: at mbs {knobs['mbs']} every converted linear's rows are a multiple "
                      "of 16 already (nothing to pad)")
    converted = set(chosen.converted)
    convert_to_float8_training(parts.model, module_filter_fn=lambda _, fqn: fqn in converted,
                               config=config(recipe, knobs))
    for fqn in chosen.padded:
        module = parts.model.get_submodule(fqn)
        module.__class__ = _rows_padded(type(module))
    return chosen.facts()


@functools.cache
def _rows_padded(float8_linear: type) -> type:
    """``float8_linear`` (torchao's Float8Linear, imported only where the knob is on) over zero-padded rows."""

    class RowsPadded(float8_linear):
        def forward(self, input: torch.Tensor) -> torch.Tensor:
            rows = input.shape[:-1].numel()
            flat = nn.functional.pad(input.reshape(rows, input.shape[-1]), (0, 0, 0, -rows % 16))
            return super().forward(flat)[:rows].reshape(*input.shape[:-1], -1)

    return RowsPadded
