"""The PixArt package (PixArt-α, PixArt-Σ): the network (:mod:`.net`) and its diffusers key map
(:mod:`.keys`). Its prompts are encoded with ``pixart_t5`` (``core/archs/t5_text``, shared with
Chroma)."""

from core.archs.pixart.net import NET

CONVENTIONS = ()

__all__ = ["CONVENTIONS", "NET"]
