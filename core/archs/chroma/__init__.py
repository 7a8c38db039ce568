"""The Chroma package: the network (:mod:`.net`) and its diffusers key map (:mod:`.keys`). Its
prompts are encoded with PixArt's T5 convention (``pixart_t5``, as ComfyUI's Chroma borrows
PixArt's tokenizer: ``core/archs/t5_text``); its blocks are Flux's."""

from core.archs.chroma.net import NET

CONVENTIONS = ()

__all__ = ["CONVENTIONS", "NET"]
