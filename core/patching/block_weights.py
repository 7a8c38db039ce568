"""LoRA block weights (LBW): a LoRA's strength per block of the network, as A1111's
lora-block-weight extension and the Inspire pack's LoraLoaderBlockWeight give it.

A :class:`BlockWeights` is what the user wrote: numbers (``1,0,0,0,1,1,...``) or a preset's name
(``INS``). Against the model's block table (``core.archs.catalog.blocks_for``) it becomes a weight
per block (:func:`resolve`), then a multiplier per patched key (:func:`key_scales`): the LoRA's
patches on a block's keys are applied at ``strength x weight``, exactly as if that block alone had
been baked at that strength; its text-encoder keys take ``BASE``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from core.archs.blocks import BASE, LbwBlocks
from core.errors import LoadoutError
from core.values import LORA_STRENGTH


@dataclass(frozen=True)
class BlockWeights:
    """``values`` as written, or ``preset`` (a name); exactly one of them."""

    values: tuple[float, ...] = ()
    preset: str = ""

    def __post_init__(self) -> None:
        if bool(self.values) == bool(self.preset):
            raise ValueError("block weights are numbers or a preset name")
        for v in self.values:
            LORA_STRENGTH.check(v)

    def text(self) -> str:
        """As written in a LoRA tag: ``lbw=INS`` or ``lbw=1,0,0.5,...``."""
        return self.preset or ",".join(f"{v:g}" for v in self.values)

    @classmethod
    def parse(cls, text: str) -> BlockWeights:
        """``INS``, ``1,0,0.5,...`` (numbers in the LoRA strength's range)."""
        t = text.strip()
        if not t:
            raise LoadoutError("empty block weights", fix="Give numbers like 1,0,0,1,... or a preset name",
                               code="bad_argument")  # fmt: skip
        if "," not in t and not _numeric(t):
            return cls(preset=t.upper())
        return cls(values=tuple(LORA_STRENGTH.parse(v) for v in t.split(",")))


def _numeric(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def resolve(weights: BlockWeights, lbw: LbwBlocks | None, model: str) -> dict[str, float]:
    """Block name -> weight for every block of the long layout (BASE included): the blocks the
    given layout leaves out get 0. Refused in words for a model without block weights, an unknown
    preset or a count no layout has."""
    if lbw is None:
        raise LoadoutError(
            f"LoRA block weights are not defined for {model}",
            why="they name the blocks of the SD1/SD2 and SDXL UNets",
            fix="Leave the block weights out for this model",
            code="bad_argument",
        )
    values = weights.values
    if weights.preset:
        found = lbw.presets.get(weights.preset)
        if found is None:
            raise LoadoutError(
                f"no block-weight preset {weights.preset!r} for {model}",
                fix="Use one of: " + ", ".join(lbw.presets) + "; or give the numbers",
                code="bad_argument",
            )
        values = found
    layout = next((lay for lay in lbw.layouts if len(lay) == len(values)), None)
    if layout is None:
        counts = " or ".join(str(len(lay)) for lay in lbw.layouts)
        raise LoadoutError(
            f"{len(values)} block weights were given for {model}",
            why=f"its LoRA block weights take {counts} values, BASE (the text encoders) first",
            fix=f"Give {counts} values",
            code="bad_argument",
        )
    out = dict.fromkeys((BASE, *lbw.prefixes), 0.0)
    out.update(zip(layout, values, strict=True))
    return out


def key_scales(keys: Iterable[str], weights: Mapping[str, float], lbw: LbwBlocks) -> dict[str, float]:
    """The multiplier of each diffusion-model key (module names, original layout) that lies in a
    block; keys in no block are left out (they keep the LoRA's strength)."""
    out: dict[str, float] = {}
    for key in keys:
        for name, prefix in lbw.prefixes.items():
            if key.startswith(prefix):
                out[key] = weights[name]
                break
    return out
