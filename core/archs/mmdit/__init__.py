"""The SD3 / SD3.5 MMDiT package: the network (:mod:`.net`), its diffusers key map (:mod:`.keys`)
and SD3's prompt encoding (:mod:`.text`)."""

from core.archs.mmdit.net import NET
from core.archs.mmdit.text import CONVENTIONS

__all__ = ["CONVENTIONS", "NET"]
