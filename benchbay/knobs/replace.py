"""Swap each block of every region for a wrapped one, in its parent module and in the region list."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from torch import nn

if TYPE_CHECKING:  # the workloads import the knobs' declarations, never the other way round
    from benchbay.knobs.parts import ModelParts


def replace_blocks(parts: ModelParts, wrap: Callable[[nn.Module], nn.Module]) -> None:
    parents = {id(child): (parent, name)
               for parent in parts.model.modules() for name, child in parent.named_children()}
    for region, blocks in parts.regions.items():
        wrapped = []
        for block in blocks:
            if id(block) not in parents:
                raise ValueError(f"region {region!r}: a block is not a submodule of the model")
            parent, name = parents[id(block)]
            new = wrap(block)
            setattr(parent, name, new)
            wrapped.append(new)
        parts.regions[region] = wrapped
