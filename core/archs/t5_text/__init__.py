"""T5's encoder: its loading record (``layout``: T5-XXL, T5-base, UMT5-XXL; the network is
``core.models.t5``) and the prompt encodings that take T5-XXL alone and are shared by several
networks: ``pixart_t5`` (ComfyUI's PixArt T5 encoding, which PixArt's and Chroma's records both
name)."""

from core.archs.t5_text.layout import T5_ARCHITECTURE
from core.archs.t5_text.text import CONVENTIONS

#: read by ``core.archs.catalog`` (the loaders reach the record through it)
ENCODER_ARCHITECTURES = (T5_ARCHITECTURE,)

__all__ = ["CONVENTIONS", "ENCODER_ARCHITECTURES", "T5_ARCHITECTURE"]
