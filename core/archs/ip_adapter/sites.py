"""Where an IP-Adapter's layers go in the UNet: its ``i``-th key/value pair belongs to the
``i``-th cross-attention in the order diffusers numbers the attention processors and
ComfyUI_IPAdapter_plus patches them: the input blocks in order (each transformer block of a
block in turn), then the output blocks, then the middle block."""

from __future__ import annotations

from torch import nn

from core.models.patches import Site


def _depth(block: nn.Module) -> int:
    """How many transformer blocks (each with one cross-attention) ``block`` holds."""
    total = 0
    for m in block.modules():
        found = getattr(m, "transformer_blocks", None)
        if isinstance(found, nn.ModuleList):
            total += len(found)
    return total


def cross_attention_order(unet: nn.Module) -> tuple[tuple[Site, int], ...]:
    """Each cross-attention of ``unet`` as (its block's site, the transformer block's number), in
    the IP-Adapter's order; empty for a network without the UNet's blocks."""
    stages = (
        ("input", getattr(unet, "input_blocks", None)),
        ("output", getattr(unet, "output_blocks", None)),
        ("middle", [getattr(unet, "middle_block", None)]),
    )
    order: list[tuple[Site, int]] = []
    for stage, blocks in stages:
        for index, block in enumerate(blocks or ()):
            if isinstance(block, nn.Module):
                order += [(Site(stage, index), layer) for layer in range(_depth(block))]
    return tuple(order)
