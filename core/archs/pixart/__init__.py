"""The PixArt package (PixArt-α, PixArt-Σ): the torch network itself (:mod:`.network`), its
``DiffusionNet`` (:mod:`.net`) and its diffusers key map (:mod:`.keys`): everything the family
needs beside its record row. Its prompts are encoded with ``pixart_t5`` (``core/archs/t5_text``, shared with
Chroma)."""

from core.archs.pixart.net import NET

CONVENTIONS = ()

__all__ = ["CONVENTIONS", "NET"]
