"""What a merge does, as a frozen record: the method, its ratio (or multiplier), per-block ratios,
and whether the text encoders are merged too; written into the merged file's metadata and read
back from it.

The methods are ComfyUI's model-merging nodes (``comfy_extras/nodes_model_merging.py``), each a
patch ``(strength_patch, other, strength_model)`` applied as ComfyUI's ``calculate_weight`` does:

- ``weighted``: ModelMergeSimple / ModelMergeBlocks, ``A * r + B * (1 - r)``. The ratio is model A's
  share (ComfyUI's ``model1``): 1 keeps A, 0 takes B. (A1111's multiplier M is B's share: r = 1 - M.)
- ``add-difference``: ModelMergeSubtract(B, C, m) into ModelMergeAdd(A, ...):
  ``A + (B * m + C * (-m))``, ComfyUI's "add difference" (A1111 computes ``A + (B - C) * m``).
- ``subtract``: ModelMergeSubtract(A, B, m): ``A * m + B * (-m)``.
- ``add``: ModelMergeAdd(A, B): ``A + B``.

Per-block ratios map key prefixes of the diffusion model (original layout, without the checkpoint
prefix: ``input_blocks.4.``, ``double_blocks.7.``, ``middle``) to a ratio; a key takes the ratio of
the longest prefix it starts with (ComfyUI's ModelMergeBlocks), else the recipe's ``ratio``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from core.errors import LoadoutError
from core.values import MERGE_MULTIPLIER, MERGE_RATIO, NumberRange

#: the metadata key of the recipe in a merged file
RECIPE_KEY = "loadout.merge"


class MergeMethod(StrEnum):
    WEIGHTED = "weighted"
    ADD_DIFFERENCE = "add-difference"
    SUBTRACT = "subtract"
    ADD = "add"

    @property
    def inputs(self) -> int:
        """How many models the method takes (A, B and, for add-difference, C)."""
        return 3 if self is MergeMethod.ADD_DIFFERENCE else 2

    @property
    def number(self) -> NumberRange | None:
        """The range of its number: a ratio, a multiplier, or None (add takes none)."""
        if self is MergeMethod.WEIGHTED:
            return MERGE_RATIO
        return None if self is MergeMethod.ADD else MERGE_MULTIPLIER

    @classmethod
    def parse(cls, text: str) -> MergeMethod:
        try:
            return cls(text.strip().lower().replace("_", "-"))
        except ValueError:
            raise LoadoutError(
                f"unknown merge method {text!r}",
                fix="Use one of: " + ", ".join(m.value for m in cls),
                code="bad_argument",
            ) from None


@dataclass(frozen=True)
class MergeRecipe:
    """``ratio``: A's share (weighted) or the multiplier (add-difference, subtract); unused by add.
    ``blocks``: (key prefix, ratio) pairs. ``text_encoders``: None keeps A's text encoders (as
    ComfyUI's CheckpointSave given model 1's CLIP); a number merges them by the same method with
    that ratio (ComfyUI's CLIPMergeSimple / CLIPMergeSubtract / CLIPMergeAdd)."""

    method: MergeMethod
    ratio: float = 1.0
    blocks: tuple[tuple[str, float], ...] = ()
    text_encoders: float | None = None
    inputs: tuple[str, ...] = field(default=(), compare=False)  # recorded by the merge, not given

    def __post_init__(self) -> None:
        number = self.method.number
        values = [self.ratio, *(r for _, r in self.blocks)]
        if self.text_encoders is not None:
            values.append(self.text_encoders)
        if number is not None:
            for value in values:
                number.check(value)
        elif self.blocks:
            raise LoadoutError(
                "adding two models takes no ratios",
                why="ComfyUI's ModelMergeAdd adds B to A whole",
                fix="Leave out the per-block ratios, or use another method",
                code="bad_argument",
            )
        prefixes = [p for p, _ in self.blocks]
        if len(set(prefixes)) != len(prefixes) or any(not p for p in prefixes):
            raise LoadoutError(
                "a block is named twice, or by an empty name",
                fix="Name each block once",
                code="bad_argument",
            )

    def ratio_of(self, key: str) -> float:
        """The ratio of the diffusion-model key ``key`` (original layout, no checkpoint prefix)."""
        best, value = -1, self.ratio
        for prefix, ratio in self.blocks:
            if key.startswith(prefix) and len(prefix) > best:
                best, value = len(prefix), ratio
        return value

    def to_json(self) -> dict[str, Any]:
        return {
            "method": self.method.value,
            "ratio": self.ratio,
            "blocks": dict(self.blocks),
            "text_encoders": self.text_encoders,
        }

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> MergeRecipe:
        blocks = value.get("blocks") or {}
        return cls(
            MergeMethod.parse(str(value["method"])),
            float(value.get("ratio", 1.0)),
            tuple((str(k), float(v)) for k, v in dict(blocks).items()),
            None if value.get("text_encoders") is None else float(value["text_encoders"]),
        )


def read_recipe(metadata: Mapping[str, object]) -> dict[str, Any] | None:
    """The merge record of a file's metadata (the recipe, its inputs, the output dtype and Loadout's
    version), or None when the file was not merged by Loadout or the record is unreadable."""
    raw = metadata.get(RECIPE_KEY)
    if not isinstance(raw, str):
        return None
    try:
        record = json.loads(raw)
        MergeRecipe.from_json(record)  # refuses what is not a recipe
    except (ValueError, KeyError, TypeError, LoadoutError):
        return None
    return record if isinstance(record, dict) else None
