"""Which Next-DiT a LoRA was trained on: Z-Image or Lumina 2 (NetaYume), from its module names
and widths, in every naming Civitai's files come in: ComfyUI's own (``layers.N.attention.qkv``,
``feed_forward.w1``), ai-toolkit's and diffusers/PEFT's for Z-Image (``attention.to_q``,
``adaLN_modulation.0``) and Lumina 2 (``attn.to_q``, ``feed_forward.linear_1``, ``norm1.linear``),
kohya-style underscored (``lora_unet_layers_0_attention_to_q``).

Z-Image's blocks are 3840 wide and modulated from a 256-wide vector (``adaLN_modulation.0``);
Lumina 2's are 2304 wide, modulated from 1024 (``adaLN_modulation.1``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

#: each form's block width and modulation input width
WIDTHS = {3840: "z-image", 2304: "lumina2"}
_WIDE = {family: width for width, family in WIDTHS.items()}
_HEADS = ("layers", "noise_refiner", "context_refiner")
_BLOCK_MARKS = (".attention.", ".attn.to.", ".feed.forward.", ".adaln.modulation.", ".norm1.linear.")
_INPUT_WIDE = ("qkv", "to_q", "to_k", "to_v", "w1", "w3", "linear_1", "linear_3")


class Module(Protocol):
    @property
    def path(self) -> str: ...

    @property
    def in_features(self) -> int | None: ...


def _flat(path: str) -> str:
    """Dots and underscores alike (kohya-style paths are rebuilt from underscored names)."""
    return "." + path.replace("_", ".").lower() + "."


def _by_names(mods: Sequence[Module]) -> tuple[str, str] | None:
    """Names only one form has: Z-Image's SiLU-less block modulation (``adaLN_modulation.0``),
    Lumina 2's (``adaLN_modulation.1``, diffusers' ``norm1.linear``) and its diffusers names
    (``attn.to_q``, ``feed_forward.linear_1``; Z-Image's diffusers names are ``attention.to_q``, ``w1``)."""
    for m in mods:
        flat = _flat(m.path)
        if ".adaln.modulation.0." in flat:
            return "z-image", f"{m.path} is Z-Image's modulation (no SiLU before it)"
        if any(
            mark in flat
            for mark in (".adaln.modulation.1.", ".norm1.linear.", ".attn.to.", ".feed.forward.linear.")
        ):
            return "lumina2", f"{m.path} is a Lumina 2 block's"
    return None


def guess(modules: Sequence[Module]) -> tuple[str | None, str, tuple[str, ...]] | None:
    """(family, evidence, warnings), or None for a LoRA that touches no Next-DiT block."""
    mods = [m for m in modules if m.path.startswith(_HEADS)]
    mods = [m for m in mods if any(mark in _flat(m.path) for mark in _BLOCK_MARKS)]
    if not mods:
        return None
    widths = [m.in_features for m in mods if _flat(m.path).rstrip(".").endswith(_INPUT_WIDE)]
    width = max(set(widths), key=widths.count) if widths else None
    named = _by_names(mods)
    if named is not None:
        family, evidence = named
        odd = width is not None and WIDTHS.get(width) != family
        return (
            family,
            evidence,
            (f"Next-DiT blocks {width} wide ({family} has {_WIDE[family]})",) if odd else (),
        )
    by_width = WIDTHS.get(width or 0)
    if by_width is not None:
        return by_width, f"{mods[0].path}: Next-DiT blocks {width} wide ({by_width})", ()
    return None, f"{mods[0].path}: Next-DiT blocks {width or 'of unknown'} wide match no known family", ()
