"""CLIP's text tower (CLIP-L, -H, -G): its loading record (``layout``: families, config from shapes,
the network build) and the open_clip <-> transformers key map (``keys``). The network is
``core.models.clip``; the prompt encodings that run it are the networks' packages' (``sd1``,
``sdxl`` ...)."""

from core.archs.clip_text.layout import CLIP_ARCHITECTURE

#: read by ``core.archs.catalog`` (the loaders reach the record through it)
ENCODER_ARCHITECTURES = (CLIP_ARCHITECTURE,)

__all__ = ["CLIP_ARCHITECTURE", "ENCODER_ARCHITECTURES"]
