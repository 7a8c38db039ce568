"""Which FLUX.2 a LoRA was trained on (klein 4B, klein 9B, dev), from its module names and shapes,
in every naming its files come in: BFL's / ComfyUI's (``double_blocks.N.img_attn.qkv``,
``single_blocks.N.linear1``), diffusers/PEFT's and ai-toolkit's (``transformer_blocks.N.attn.to_q``,
``ff.linear_in``, ``single_transformer_blocks.N.attn.to_qkv_mlp_proj``), kohya-style underscored.

FLUX.1 shares BFL's block names and (klein 4B) the 3072 width, so FLUX.2 is told by what only it
has: diffusers' FLUX.2 names, the shared modulations, or the SwiGLU shapes (``linear1`` 9 x the
width out where FLUX.1's is 7 x, ``img_mlp.0`` 6 x where FLUX.1's is 4 x, ``linear2`` 4 x in where
FLUX.1's is 5 x), or a width FLUX.1 never has (4096 klein 9B, 6144 dev). A LoRA on FLUX.1-named
attention layers 3072 wide and nothing else is left to FLUX.1's rule."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

WIDTHS = {3072: "flux2-klein-4b", 4096: "flux2-klein-9b", 6144: "flux2-dev"}
_HEADS = (".double.blocks.", ".single.blocks.", ".transformer.blocks.", ".single.transformer.blocks.",
          ".double.stream.modulation.", ".single.stream.modulation.")  # fmt: skip
_NAMES = (".to.qkv.mlp.proj.", ".ff.linear.in.", ".ff.linear.out.", ".ff.context.linear.in.",
          ".ff.context.linear.out.", ".double.stream.modulation.", ".single.stream.modulation.")  # fmt: skip
#: (path ending, output width / input width only FLUX.2 has)
_SHAPES = ((".linear1.", 9.0), (".img.mlp.0.", 6.0), (".txt.mlp.0.", 6.0), (".linear2.", 0.25))
_WIDTH_OF = (".qkv.", ".to.q.", ".add.q.proj.", ".linear1.", ".to.qkv.mlp.proj.", ".proj.")


class Module(Protocol):
    @property
    def path(self) -> str: ...

    @property
    def in_features(self) -> int | None: ...

    @property
    def out_features(self) -> int | None: ...


def _flat(path: str) -> str:
    """Dots and underscores alike (kohya-style paths are rebuilt from underscored names)."""
    return "." + path.replace("_", ".").lower() + "."


def _evidence(mods: Sequence[Module]) -> str | None:
    for m in mods:
        flat = _flat(m.path)
        if any(mark in flat for mark in _NAMES):
            return f"{m.path} is a FLUX.2 layer's name"
        for end, ratio in _SHAPES:
            ok = flat.endswith(end) and m.in_features and m.out_features
            if ok and abs((m.out_features or 0) / (m.in_features or 1) - ratio) < 1e-6:
                return f"{m.path} has FLUX.2's SwiGLU shape ({m.out_features} x {m.in_features})"
    return None


def guess(modules: Sequence[Module]) -> tuple[str, str, tuple[str, ...]] | None:
    """(family, evidence, warnings), or None for a LoRA this rule cannot call FLUX.2."""
    mods = [m for m in modules if _flat(m.path).startswith(_HEADS)]
    if not mods:
        return None
    widths = [m.in_features for m in mods if m.in_features and _flat(m.path).endswith(_WIDTH_OF)]
    width = max(set(widths), key=widths.count) if widths else None
    evidence = _evidence(mods)
    if evidence is None:
        if width not in (4096, 6144):
            return None  # FLUX.1's names and width: FLUX.1's rule decides
        evidence = f"{mods[0].path}: Flux-style blocks {width} wide (FLUX.1 is 3072 wide)"
    family = WIDTHS.get(width or 0)
    if family is not None:
        return family, evidence, ()
    near = "flux2-klein-4b" if (width or 0) < 4096 else "flux2-klein-9b"
    return near, evidence, (f"FLUX.2 blocks {width or 'of unknown'} wide (klein 4B 3072, 9B 4096, dev 6144)",)
