"""A network's blocks, as per-block merges and LoRA block weights name them (plain data).

Each block is a key prefix of the diffusion model in its original (ComfyUI) layout, without the
checkpoint's ``model.diffusion_model.`` prefix: ComfyUI's ``ModelMerge<Arch>`` nodes take one ratio
per such prefix, and a key takes the ratio of the longest prefix it starts with
(``ModelMergeBlocks``). An architecture package lists its tables as ``BLOCKS``; a family record
names its table (``DiffusionSpec.blocks``), found through ``core.archs.catalog.blocks_for``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BlockTable:
    """``prefixes``: ComfyUI's node arguments, in its order; ``node``: that node's name ("" where
    ComfyUI has none and the table is Loadout's, in the same style)."""

    id: str
    title: str
    node: str
    prefixes: tuple[str, ...]

    def __post_init__(self) -> None:
        if len(set(self.prefixes)) != len(self.prefixes):
            raise ValueError(f"block table {self.id}: a prefix is listed twice")


def numbered(stem: str, count: int, dot: bool = True) -> tuple[str, ...]:
    """``stem.0.`` ... ``stem.{count-1}.`` (without the final dot where ComfyUI writes none)."""
    return tuple(f"{stem}.{i}{'.' if dot else ''}" for i in range(count))
