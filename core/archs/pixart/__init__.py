"""The PixArt package (PixArt-α, PixArt-Σ): the network (:mod:`.net`), its diffusers key map
(:mod:`.keys`) and the ``pixart_t5`` prompt encoding (:mod:`.text`)."""

from core.archs.pixart.net import NET
from core.archs.pixart.text import CONVENTIONS

__all__ = ["CONVENTIONS", "NET"]
