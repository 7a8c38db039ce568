"""Prompt encodings that take T5-XXL alone and are shared by several networks: ``pixart_t5``
(ComfyUI's PixArt T5 encoding, which PixArt's and Chroma's records both name)."""

from core.archs.t5_text.text import CONVENTIONS

__all__ = ["CONVENTIONS"]
