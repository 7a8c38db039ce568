"""A network's blocks, as per-block merges and LoRA block weights name them (plain data).

Each block is a key prefix of the diffusion model in its original (ComfyUI) layout, without the
checkpoint's ``model.diffusion_model.`` prefix: ComfyUI's ``ModelMerge<Arch>`` nodes take one ratio
per such prefix, and a key takes the ratio of the longest prefix it starts with
(``ModelMergeBlocks``). An architecture package lists its tables as ``BLOCKS``; a family record
names its table (``DiffusionSpec.blocks``), found through ``core.archs.catalog.blocks_for``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

#: the LoRA-block-weight name of a LoRA's text-encoder part
BASE = "BASE"


@dataclass(frozen=True)
class LbwBlocks:
    """LoRA block weights as A1111's lora-block-weight extension (and the Inspire pack) name them:
    ``prefixes`` maps every block of the long layout (``IN04``, ``M00``, ``OUT03``) to its key
    prefix; ``layouts`` are the vectors accepted, each a list of names starting with ``BASE`` (the
    text encoders); ``presets`` name whole vectors of the first layout. A block the given layout
    leaves out gets 0 (the extension's rule); a key in no block (``time_embed.``, ``out.``) keeps
    the LoRA's strength."""

    prefixes: Mapping[str, str]
    layouts: tuple[tuple[str, ...], ...]
    presets: Mapping[str, tuple[float, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for layout in self.layouts:
            if layout[0] != BASE or any(n not in self.prefixes for n in layout[1:]):
                raise ValueError(f"a block-weight layout names blocks the table does not have: {layout}")
        for name, values in self.presets.items():
            if len(values) != len(self.layouts[0]):
                raise ValueError(f"block-weight preset {name} has {len(values)} values")


@dataclass(frozen=True)
class BlockTable:
    """``prefixes``: ComfyUI's node arguments, in its order; ``node``: that node's name ("" where
    ComfyUI has none and the table is Loadout's, in the same style); ``lbw``: the LoRA block
    weights, where the network has them."""

    id: str
    title: str
    node: str
    prefixes: tuple[str, ...]
    lbw: LbwBlocks | None = None

    def __post_init__(self) -> None:
        if len(set(self.prefixes)) != len(self.prefixes):
            raise ValueError(f"block table {self.id}: a prefix is listed twice")


def numbered(stem: str, count: int, dot: bool = True) -> tuple[str, ...]:
    """``stem.0.`` ... ``stem.{count-1}.`` (without the final dot where ComfyUI writes none)."""
    return tuple(f"{stem}.{i}{'.' if dot else ''}" for i in range(count))
